/*
 * The JSON bodies the simulator answers with, and their deliberate
 * corruption for the malformed-body fault. Pure; every returned string is
 * malloc'd and owned by the caller (NULL on allocation failure).
 */
#ifndef QW_SIM_RENDER_H
#define QW_SIM_RENDER_H

#include "ledger.h"

#include <stddef.h>
#include <stdint.h>

/** {"message": "<text>"} */
char *qw_sim_render_message(const char *text);

/**
 * {"link": "/scabbard/<circuit>/<service>/batch_statuses?ids=<id,...>"}
 * for the `n` batches of `subs`.
 */
char *qw_sim_render_link(const char *circuit, const char *service,
                         const struct qw_sim_submission *subs, size_t n);

/**
 * The batch_statuses array for `ids[i]` with `views[i]`, in that order.
 * `timestamp` is the time of the last change in Unix seconds, written with
 * six decimals (microseconds); Unknown entries carry `now_us`. NULL also
 * when a transaction id or message is not UTF-8.
 */
char *qw_sim_render_statuses(const char *const *ids, const struct qw_sim_status_view *views,
                             size_t n, int64_t now_us);

/**
 * Garbles `body` (length `len`) for the malformed-body fault, the way
 * chosen by `variant`: truncated, trailing garbage, or not JSON at all. The
 * result never parses as JSON. Sets `*out_len`.
 */
char *qw_sim_render_mangle(const char *body, size_t len, uint64_t variant, size_t *out_len);

#endif
