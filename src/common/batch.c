/* Batch statuses as the database spells them; see batch.h. */
#include "common/batch.h"

#include <stddef.h>
#include <string.h>

static const char *const status_names[] = {
    [QW_STATUS_NONE] = "",           [QW_STATUS_PENDING] = "Pending",
    [QW_STATUS_UNKNOWN] = "Unknown", [QW_STATUS_DELAYED] = "Delayed",
    [QW_STATUS_VALID] = "Valid",     [QW_STATUS_COMMITTED] = "Committed",
    [QW_STATUS_INVALID] = "Invalid",
};

_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == QW_STATUS_COUNT,
               "one name per status");

int qw_batch_status_parse(const char *text, enum qw_batch_status *out)
{
    if (!text || !*text) {
        *out = QW_STATUS_NONE;
        return 0;
    }
    for (size_t i = 1; i < QW_STATUS_COUNT; i++) {
        if (strcmp(text, status_names[i]) == 0) {
            *out = (enum qw_batch_status)i;
            return 0;
        }
    }
    return -1;
}

const char *qw_batch_status_name(enum qw_batch_status status)
{
    if ((unsigned)status >= QW_STATUS_COUNT)
        return "?";
    return status_names[status];
}

bool qw_batch_status_is_final(enum qw_batch_status status)
{
    return status == QW_STATUS_VALID || status == QW_STATUS_COMMITTED ||
           status == QW_STATUS_INVALID;
}
