/*
 * One node's batch history: what a scabbard service on that node can say
 * about batch ids, as Splinter's BatchHistory does (libscabbard
 * state/mod.rs): an entry per batch id the node has heard of, with its
 * status and the time of its last change, at most `limit` entries per
 * service; when an entry is added past the limit, the entry changed
 * longest ago goes (whatever its status). An id without an entry is
 * Unknown. A restart clears everything.
 *
 * Services are named by the ledger's service index (ledger.h), so the
 * history needs no key table of its own.
 *
 * Pure: no I/O, no clock reads, no locking (the engine serialises calls).
 */
#ifndef QW_SIM_HISTORY_H
#define QW_SIM_HISTORY_H

#include "ledger.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct qw_sim_history;

/** Creates an empty history keeping at most `limit` entries per service (0 = all). Returns QW_OK
 * or QW_ERR_NOMEM. */
int qw_sim_history_new(size_t limit, struct qw_sim_history **out);

/** Frees the history. NULL is a no-op. */
void qw_sim_history_free(struct qw_sim_history *h);

/**
 * Records `status` (not Unknown) for `id` of service `svc_index` at
 * `at_us`: updates the entry (it becomes the newest) or adds one, dropping
 * the service's oldest entry when that passes the limit. Returns QW_OK or
 * QW_ERR_NOMEM (nothing changed).
 */
int qw_sim_history_put(struct qw_sim_history *h, size_t svc_index, const char *id,
                       enum qw_sim_status status, int64_t at_us);

/** The status of `id` of service `svc_index` (QW_SIM_UNKNOWN without an entry) and, when known,
 * the time of its last change in `*changed_us` (may be NULL). */
enum qw_sim_status qw_sim_history_get(const struct qw_sim_history *h, size_t svc_index,
                                      const char *id, int64_t *changed_us);

/** Entries held for service `svc_index`. */
size_t qw_sim_history_count(const struct qw_sim_history *h, size_t svc_index);

/** Forgets every entry (a node restart). */
void qw_sim_history_clear(struct qw_sim_history *h);

#endif
