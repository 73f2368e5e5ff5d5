/* Job lifetime; see job.h. */
#include "worker/job.h"

#include <stdlib.h>

void qw_job_free(struct qw_job *job)
{
    if (!job)
        return;
    free(job->payload);
    free(job);
}
