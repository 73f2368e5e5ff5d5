/* One node of the simulator; see node.h. */
#include "node.h"

#include <string.h>

bool qw_sim_node_hosts(const struct qw_sim_node *nd, const char *service_key)
{
    if (nd->n_hosts == 0)
        return true;
    const char *sep = strstr(service_key, "::");
    size_t circuit_len = sep ? (size_t)(sep - service_key) : strlen(service_key);
    for (size_t i = 0; i < nd->n_hosts; i++) {
        const char *h = nd->hosts[i];
        if (strcmp(h, service_key) == 0 ||
            (strlen(h) == circuit_len && strncmp(h, service_key, circuit_len) == 0))
            return true;
    }
    return false;
}
