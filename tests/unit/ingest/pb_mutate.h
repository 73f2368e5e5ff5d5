/*
 * Test helpers shared by the BatchList unit tests and the SQL-vs-C
 * integration test: a tiny protobuf writer for building payloads field by
 * field, seeded random mutations of a payload, and an independent
 * reference decision (what protobuf-c 1.4 decides, written from its rules,
 * not from its code). Header-only; test code only.
 */
#ifndef QW_TESTS_PB_MUTATE_H
#define QW_TESTS_PB_MUTATE_H

#include "common/backoff.h"
#include "ingest/batchlist.h"

#include <stdint.h>
#include <string.h>

#define PB_MAX 8192 /* bytes in a test buffer */

struct pb_buf {
    uint8_t d[PB_MAX]; /* bytes written */
    size_t n;          /* length, bytes */
};

static inline void pb_raw(struct pb_buf *b, const void *p, size_t n)
{
    size_t room = b->n < PB_MAX ? PB_MAX - b->n : 0;
    if (n > room)
        n = room;
    if (n > 0)
        memcpy(b->d + b->n, p, n);
    b->n += n;
}

static inline void pb_varint(struct pb_buf *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            c |= 0x80;
        if (b->n < PB_MAX)
            b->d[b->n++] = c;
    } while (v);
}

static inline void pb_tag(struct pb_buf *b, unsigned field, unsigned wire_type)
{
    pb_varint(b, (uint64_t)field << 3 | wire_type);
}

/* A length-delimited field (bytes, string or an embedded message). */
static inline void pb_field(struct pb_buf *b, unsigned field, const void *p, size_t n)
{
    pb_tag(b, field, 2);
    pb_varint(b, n);
    pb_raw(b, p, n);
}

static inline void pb_field_str(struct pb_buf *b, unsigned field, const char *s)
{
    pb_field(b, field, s, strlen(s));
}

/* ---- the reference decision ------------------------------------------ */

enum pb_msg { PB_BATCH_LIST, PB_BATCH, PB_TRANSACTION };

struct pb_ref {
    int batches;        /* Batches in the BatchList */
    const uint8_t *sig; /* last Batch.header_signature seen (of the first Batch) */
    size_t sig_len;     /* bytes */
    size_t header_len;  /* last Batch.header length */
};

/* Reads a varint of at most `max` bytes inside [*p, end); 0 on failure. */
static inline int pb_ref_varint(const uint8_t **p, const uint8_t *end, int max, uint64_t *v)
{
    *v = 0;
    for (int i = 0; i < max; i++) {
        if (*p >= end)
            return 0;
        uint8_t c = *(*p)++;
        if (i < 10)
            *v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80))
            return 1;
    }
    return 0;
}

/* Walks one message; returns 1 if protobuf-c would decode it. */
static inline int pb_ref_walk(const uint8_t *p, const uint8_t *end, enum pb_msg msg,
                              struct pb_ref *ref)
{
    while (p < end) {
        if ((*p & 0xf8) == 0) /* a one-byte tag naming field 0 */
            return 0;
        uint64_t tag;
        if (!pb_ref_varint(&p, end, 5, &tag))
            return 0;
        uint64_t field = tag >> 3;
        unsigned wt = (unsigned)(tag & 7);
        uint64_t len = 0;
        const uint8_t *body = p;
        switch (wt) {
        case 0: {
            uint64_t ignored;
            if (!pb_ref_varint(&p, end, 10, &ignored))
                return 0;
            break;
        }
        case 1:
        case 5:
            len = wt == 1 ? 8 : 4;
            if ((uint64_t)(end - p) < len)
                return 0;
            p += len;
            break;
        case 2:
            if (!pb_ref_varint(&p, end, 5, &len) || len > (uint64_t)(end - p))
                return 0;
            body = p;
            p += len;
            break;
        default:
            return 0;
        }
        int known_len_field = (msg == PB_BATCH_LIST && field == 1) ||
                              (msg == PB_BATCH && field >= 1 && field <= 3) ||
                              (msg == PB_TRANSACTION && field >= 1 && field <= 3);
        if (known_len_field && wt != 2)
            return 0;
        if (msg == PB_BATCH_LIST && field == 1) {
            ref->batches++;
            struct pb_ref inner = {0};
            if (!pb_ref_walk(body, body + len, PB_BATCH, &inner))
                return 0;
            if (ref->batches == 1) {
                ref->sig = inner.sig;
                ref->sig_len = inner.sig_len;
                ref->header_len = inner.header_len;
            }
        } else if (msg == PB_BATCH && field == 1) {
            ref->header_len = len;
        } else if (msg == PB_BATCH && field == 2) {
            ref->sig = body;
            ref->sig_len = len;
        } else if (msg == PB_BATCH && field == 3) {
            struct pb_ref ignored = {0};
            if (!pb_ref_walk(body, body + len, PB_TRANSACTION, &ignored))
                return 0;
        }
    }
    return 1;
}

/* The defect qw_batchlist_check() must report for this payload. */
static inline enum qw_batchlist_defect pb_ref_decide(const uint8_t *p, size_t n,
                                                     const char *batch_id, size_t max_bytes)
{
    if (n == 0)
        return QW_BATCHLIST_EMPTY;
    if (n > max_bytes)
        return QW_BATCHLIST_TOO_LARGE;
    struct pb_ref ref = {0};
    if (!pb_ref_walk(p, p + n, PB_BATCH_LIST, &ref))
        return QW_BATCHLIST_UNDECODABLE;
    if (ref.batches == 0)
        return QW_BATCHLIST_NO_BATCH;
    if (ref.batches > 1)
        return QW_BATCHLIST_MANY_BATCHES;
    /* protobuf-c hands strings over NUL-terminated: what is before a NUL */
    size_t c_len = ref.sig ? strnlen((const char *)ref.sig, ref.sig_len) : 0;
    if (c_len == 0)
        return QW_BATCHLIST_NO_SIGNATURE;
    if (c_len != ref.sig_len || c_len != 128)
        return QW_BATCHLIST_BAD_SIGNATURE;
    for (size_t i = 0; i < c_len; i++) {
        uint8_t c = ref.sig[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return QW_BATCHLIST_BAD_SIGNATURE;
    }
    if (memcmp(ref.sig, batch_id, 128) != 0)
        return QW_BATCHLIST_SIGNATURE_MISMATCH;
    if (ref.header_len == 0)
        return QW_BATCHLIST_EMPTY_HEADER;
    return QW_BATCHLIST_OK;
}

/* ---- mutations ---------------------------------------------------------- */

/*
 * Applies 1..3 random edits to `b` in place: overwrite a byte, flip a bit,
 * delete or insert a byte, truncate, nudge a byte by +-1 (lengths), or
 * duplicate a slice. Deterministic in the generator's state.
 */
static inline void pb_mutate(struct pb_buf *b, struct qw_rng *rng)
{
    int edits = 1 + (int)qw_rng_below(rng, 3);
    for (int e = 0; e < edits; e++) {
        size_t n = b->n;
        size_t at = n ? (size_t)qw_rng_below(rng, n) : 0;
        switch (qw_rng_below(rng, 7)) {
        case 0:
            if (n)
                b->d[at] = (uint8_t)qw_rng_next(rng);
            break;
        case 1:
            if (n)
                b->d[at] ^= (uint8_t)(1u << qw_rng_below(rng, 8));
            break;
        case 2:
            if (n) {
                memmove(b->d + at, b->d + at + 1, n - at - 1);
                b->n--;
            }
            break;
        case 3:
            if (n < PB_MAX) {
                memmove(b->d + at + 1, b->d + at, n - at);
                b->d[at] = (uint8_t)qw_rng_next(rng);
                b->n++;
            }
            break;
        case 4:
            b->n = n ? (size_t)qw_rng_below(rng, n + 1) : 0;
            break;
        case 5:
            if (n)
                b->d[at] = (uint8_t)(b->d[at] + (qw_rng_next(rng) & 1 ? 1 : 0xff));
            break;
        default: {
            size_t len = n ? 1 + (size_t)qw_rng_below(rng, n - at < 16 ? n - at : 16) : 0;
            if (n && n + len <= PB_MAX) {
                memmove(b->d + at + len, b->d + at, n - at);
                b->n += len;
            }
            break;
        }
        }
    }
}

#endif
