/*
 * The submitter thread: posts jobs to the ledger, follows their status
 * (docs/DESIGN.md §7.2), and records every outcome in grouped,
 * fenced statements. See run/run.h for the threads and the shutdown order.
 */
#ifndef QW_SUBMITTER_SUBMITTER_H
#define QW_SUBMITTER_SUBMITTER_H

#include "common/err.h"
#include "shared/shared.h"

#include <pthread.h>

/**
 * Connects the submitter's own database connection and ledger client, then
 * starts the thread. On failure nothing is started and `err` says why.
 * The thread ends after `w->jobs` is closed and every job was handed back.
 */
QW_MUST_CHECK int qw_submitter_start(struct qw_worker *w, pthread_t *thread, struct qw_error *err);

#endif
