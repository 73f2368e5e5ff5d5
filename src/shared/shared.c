/* Helpers over the worker's shared state; see shared.h. */
#include "shared/shared.h"
#include "db/db.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

void qw_worker_wake(struct qw_worker *w)
{
    int saved = errno;
    uint64_t one = 1;
    ssize_t n = write(w->wake_fd, &one, sizeof(one));
    (void)n;
    errno = saved;
}

void qw_worker_db_opts(const struct qw_config *cfg, const char *app_name, struct qw_db_opts *opts)
{
    int half_lease = cfg->worker_lease_ms / 2;
    *opts = (struct qw_db_opts){
        .conninfo = cfg->db_conninfo,
        .password = cfg->db_password,
        .app_name = app_name,
        .connect_timeout_s = cfg->db_connect_timeout_s,
        .query_timeout_ms = cfg->db_query_timeout_ms,
        .unprepared = !cfg->db_prepared_statements,
        .idle_in_txn_timeout_ms = half_lease > 500 ? half_lease : 500,
        .lock_timeout_ms = half_lease / 2 > 250 ? half_lease / 2 : 250,
    };
}
