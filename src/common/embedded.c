/* Lookup over the embedded runtime statements. */
#include "common/embedded.h"

#include <string.h>

const char *qw_statement_text(const char *name)
{
    for (const struct qw_embedded *e = qw_statements; e->name; e++) {
        if (strcmp(e->name, name) == 0)
            return e->text;
    }
    return NULL;
}
