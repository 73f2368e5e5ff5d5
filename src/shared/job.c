/* Job lifetime; see job.h. */
#include "shared/job.h"
#include "common/err.h"
#include "common/hex.h"

#include <stdlib.h>
#include <string.h>

/* A job and its drain flag in one allocation (the job first, so freeing
 * the job frees both). */
struct job_block {
    struct qw_job job;
    atomic_bool drain;
};

struct qw_job *qw_job_new(void)
{
    struct job_block *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    atomic_init(&b->drain, false);
    b->job.drain = &b->drain;
    return &b->job;
}

int qw_job_set_payload_hex(struct qw_job *job, const char *bytea_text)
{
    free(job->payload);
    job->payload = NULL;
    job->payload_len = 0;
    size_t n = strlen(bytea_text);
    if (n < 4 || bytea_text[0] != '\\' || bytea_text[1] != 'x')
        return QW_ERR_INVALID;
    job->payload = malloc(n / 2);
    if (!job->payload)
        return QW_ERR_NOMEM;
    long len = qw_hex_decode(bytea_text + 2, n - 2, job->payload, n / 2);
    if (len <= 0) {
        free(job->payload);
        job->payload = NULL;
        return QW_ERR_INVALID;
    }
    job->payload_len = (size_t)len;
    return QW_OK;
}

void qw_job_free(struct qw_job *job)
{
    if (!job)
        return;
    free(job->payload);
    free(job);
}
