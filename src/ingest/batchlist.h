/*
 * BatchList payloads (pure functions): the check every enqueued payload
 * must pass, and a deterministic sample encoder for tests, the demo and
 * benchmarks.
 *
 * A payload is the Sawtooth/Splinter wire format the ledger accepts: a
 * protobuf BatchList (proto/batch.proto) holding exactly one Batch whose
 * header_signature is the batch_id and whose header is not empty. The
 * database enforces the same rule (queuer.batchlist_defect() in
 * migrations/0001_schema.sql); the unit and integration tests hold the two
 * to the same decisions.
 */
#ifndef QW_INGEST_BATCHLIST_H
#define QW_INGEST_BATCHLIST_H

#include "common/err.h"

#include <stddef.h>
#include <stdint.h>

/** What is wrong with a payload; QW_BATCHLIST_OK when nothing is. */
enum qw_batchlist_defect {
    QW_BATCHLIST_OK = 0,
    QW_BATCHLIST_EMPTY,              /* zero bytes */
    QW_BATCHLIST_TOO_LARGE,          /* more than the size limit */
    QW_BATCHLIST_UNDECODABLE,        /* not a well-formed BatchList message */
    QW_BATCHLIST_NO_BATCH,           /* decodes, but holds no Batch */
    QW_BATCHLIST_MANY_BATCHES,       /* holds two or more Batches */
    QW_BATCHLIST_NO_SIGNATURE,       /* the Batch has no (or an empty) header_signature */
    QW_BATCHLIST_BAD_SIGNATURE,      /* header_signature is not 128 lower-case hex */
    QW_BATCHLIST_SIGNATURE_MISMATCH, /* header_signature is not the given batch_id */
    QW_BATCHLIST_EMPTY_HEADER,       /* the Batch header is empty */
};

/**
 * Checks that `payload` (`len` bytes, borrowed) is a BatchList holding
 * exactly one Batch with a non-empty header, signed with `batch_id` (NUL
 * terminated), and at most `max_bytes` long. Checks run in the order of the
 * enum, so the first defect found is the one reported.
 *
 * Returns QW_OK; QW_ERR_INVALID with the defect in *defect (if not NULL)
 * and a one-line reason in `err->msg`; or QW_ERR_NOMEM when decoding ran
 * out of memory (*defect is then QW_BATCHLIST_OK: no verdict). Allocates
 * only temporarily; pure and thread-safe.
 */
QW_MUST_CHECK int qw_batchlist_check(const uint8_t *payload, size_t len, const char *batch_id,
                                     size_t max_bytes, enum qw_batchlist_defect *defect,
                                     struct qw_error *err);

/**
 * The number of transactions in the Batches of the BatchList `payload`
 * (`len` bytes, borrowed); 0 when it does not decode (or runs out of
 * memory). Used as the cost of a batch with dlt.cost = "transactions".
 * Pure and thread-safe.
 */
int64_t qw_batchlist_transactions(const uint8_t *payload, size_t len);

/** Short static name of a defect ("ok", "empty", "too-large", ...). */
const char *qw_batchlist_defect_name(enum qw_batchlist_defect defect);

/**
 * Writes a batch_id derived from `seed` into `out` (128 lower-case hex and
 * a NUL). The same seed always gives the same id; different seeds give
 * different ids with overwhelming probability. Pure and thread-safe.
 */
void qw_batchlist_sample_id(uint64_t seed, char out[129]);

/**
 * Encodes a valid sample payload signed with `batch_id`: a BatchList of one
 * Batch whose header is a BatchHeader (signer key, the one transaction id)
 * and which carries one Transaction (a TransactionHeader of family
 * "queuer_demo" and a small payload). Every byte is a function of `seed`
 * and `batch_id`. Keys and signatures are random-looking hex, not real
 * secp256k1 signatures: the payload is well-formed, not cryptographically
 * valid.
 *
 * On success *out is malloc'd (caller frees) and *out_len its size.
 * Returns QW_OK, QW_ERR_INVALID when `batch_id` is not a valid batch id,
 * or QW_ERR_NOMEM. Thread-safe.
 */
QW_MUST_CHECK int qw_batchlist_sample(const char *batch_id, uint64_t seed, uint8_t **out,
                                      size_t *out_len);

#endif
