/*
 * Decoding a submitted body: a protobuf BatchList whose batches are named by
 * their header_signature. Pure.
 */
#ifndef QW_SIM_PAYLOAD_H
#define QW_SIM_PAYLOAD_H

#include "ledger.h"

#include <stddef.h>
#include <stdint.h>

/** Most batches one BatchList may carry. */
#define QW_SIM_BATCHES_MAX 1000

/** The batches of one BatchList; owns its strings. */
struct qw_sim_payload {
    struct qw_sim_submission *subs; /* `n` batches in list order */
    size_t n;                       /* number of batches */
    char *strings;                  /* storage behind the subs' ids */
};

/**
 * Decodes `len` bytes of `body`. On success (QW_OK) `out` lists every
 * batch; free it with qw_sim_payload_free(). On QW_ERR_INVALID (empty body,
 * not a BatchList, no batches, more than QW_SIM_BATCHES_MAX, a batch without
 * a well-formed header_signature) `err` holds a one-line reason and `out`
 * still lists the ids that could be read, for logging (may be none).
 * QW_ERR_NOMEM on allocation failure.
 */
int qw_sim_payload_decode(const uint8_t *body, size_t len, struct qw_sim_payload *out, char *err,
                          size_t errlen);

/** Frees what qw_sim_payload_decode() allocated; safe on a zeroed payload. */
void qw_sim_payload_free(struct qw_sim_payload *p);

#endif
