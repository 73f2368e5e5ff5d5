/*
 * BatchList payload check and sample encoder; see batchlist.h.
 *
 * Why protobuf-c and not a hand-written decoder: the payload is forwarded
 * byte for byte to a Splinter node, which decodes it with a real protobuf
 * library. protobuf-c is a maintained implementation of that wire format,
 * and its decoder is generated from proto/batch.proto, so the fields, their
 * numbers and wire types are checked exactly as declared rather than as
 * re-derived by hand. A hand decoder would be a second, private reading of
 * the format with its own corner cases (varint limits, unknown fields,
 * groups, repeated scalars). The one hand decoder we do keep is the
 * database's plpgsql check, and the tests hold it to protobuf-c's
 * decisions.
 *
 * protobuf-c stores strings NUL-terminated without their length, so a
 * header_signature with an embedded NUL would look like its prefix. The
 * decoder allocates through check_alloc(), which records every block's
 * size; a string's block is its length + 1, which exposes such a NUL.
 */
#include "ingest/batchlist.h"

#include "batch.pb-c.h"
#include "common/backoff.h"
#include "common/hex.h"
#include "ingest/validate.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Each decoder allocation is preceded by a header holding its size. */
union alloc_header {
    size_t size;     /* bytes requested by the decoder */
    max_align_t pad; /* keeps the block behind it aligned for any type */
};

struct check_alloc {
    int failed; /* set when an allocation failed: the verdict is "no memory" */
};

static void *check_alloc(void *data, size_t size)
{
    struct check_alloc *state = data;
    if (size > SIZE_MAX - sizeof(union alloc_header)) {
        state->failed = 1;
        return NULL;
    }
    union alloc_header *h = malloc(sizeof(*h) + size);
    if (!h) {
        state->failed = 1;
        return NULL;
    }
    h->size = size;
    return h + 1;
}

static void check_free(void *data, void *ptr)
{
    (void)data;
    if (ptr)
        free((union alloc_header *)ptr - 1);
}

/* Size the decoder asked for when it allocated `ptr` (a block of ours). */
static size_t alloc_size(const void *ptr)
{
    return ((const union alloc_header *)ptr - 1)->size;
}

const char *qw_batchlist_defect_name(enum qw_batchlist_defect defect)
{
    switch (defect) {
    case QW_BATCHLIST_OK:
        return "ok";
    case QW_BATCHLIST_EMPTY:
        return "empty";
    case QW_BATCHLIST_TOO_LARGE:
        return "too-large";
    case QW_BATCHLIST_UNDECODABLE:
        return "undecodable";
    case QW_BATCHLIST_NO_BATCH:
        return "no-batch";
    case QW_BATCHLIST_MANY_BATCHES:
        return "many-batches";
    case QW_BATCHLIST_NO_SIGNATURE:
        return "no-signature";
    case QW_BATCHLIST_BAD_SIGNATURE:
        return "bad-signature";
    case QW_BATCHLIST_SIGNATURE_MISMATCH:
        return "signature-mismatch";
    case QW_BATCHLIST_EMPTY_HEADER:
        return "empty-header";
    }
    return "unknown";
}

static int defective(enum qw_batchlist_defect *out, enum qw_batchlist_defect defect)
{
    if (out)
        *out = defect;
    return QW_ERR_INVALID;
}

int qw_batchlist_check(const uint8_t *payload, size_t len, const char *batch_id, size_t max_bytes,
                       enum qw_batchlist_defect *defect, struct qw_error *err)
{
    if (defect)
        *defect = QW_BATCHLIST_OK;
    if (len == 0) {
        qw_error_set(err, QW_ERR_INVALID, "payload is empty");
        return defective(defect, QW_BATCHLIST_EMPTY);
    }
    if (len > max_bytes) {
        qw_error_set(err, QW_ERR_INVALID, "payload is %zu bytes, the limit is %zu", len, max_bytes);
        return defective(defect, QW_BATCHLIST_TOO_LARGE);
    }

    struct check_alloc state = {0};
    ProtobufCAllocator allocator = {
        .alloc = check_alloc,
        .free = check_free,
        .allocator_data = &state,
    };
    BatchList *list = batch_list__unpack(&allocator, len, payload);
    if (!list) {
        if (state.failed)
            return qw_error_set(err, QW_ERR_NOMEM, "out of memory decoding a %zu-byte payload",
                                len);
        qw_error_set(err, QW_ERR_INVALID,
                     "payload is not a protobuf BatchList (malformed or truncated message)");
        return defective(defect, QW_BATCHLIST_UNDECODABLE);
    }

    int rc = QW_OK;
    if (list->n_batches == 0) {
        qw_error_set(err, QW_ERR_INVALID, "BatchList holds no Batch, expected exactly one");
        rc = defective(defect, QW_BATCHLIST_NO_BATCH);
        goto out;
    }
    if (list->n_batches > 1) {
        qw_error_set(err, QW_ERR_INVALID, "BatchList holds %zu Batches, expected exactly one",
                     list->n_batches);
        rc = defective(defect, QW_BATCHLIST_MANY_BATCHES);
        goto out;
    }
    const Batch *batch = list->batches[0];
    const char *sig = batch->header_signature;
    size_t sig_len = sig ? strlen(sig) : 0;
    if (sig_len == 0) {
        qw_error_set(err, QW_ERR_INVALID, "Batch has no header_signature");
        rc = defective(defect, QW_BATCHLIST_NO_SIGNATURE);
        goto out;
    }
    /* A non-empty string is a block of ours holding length + 1 bytes. */
    if (alloc_size(sig) != sig_len + 1) {
        qw_error_set(err, QW_ERR_INVALID,
                     "Batch header_signature contains a NUL byte after character %zu", sig_len);
        rc = defective(defect, QW_BATCHLIST_BAD_SIGNATURE);
        goto out;
    }
    struct qw_error why;
    qw_error_clear(&why);
    if (qw_validate_batch_id(sig, sig_len, &why) != QW_OK) {
        qw_error_set(err, QW_ERR_INVALID, "Batch header_signature is not a batch id: %s", why.msg);
        rc = defective(defect, QW_BATCHLIST_BAD_SIGNATURE);
        goto out;
    }
    if (strcmp(sig, batch_id) != 0) {
        qw_error_set(err, QW_ERR_INVALID,
                     "Batch header_signature %.16s... does not equal batch_id %.16s...", sig,
                     batch_id);
        rc = defective(defect, QW_BATCHLIST_SIGNATURE_MISMATCH);
        goto out;
    }
    if (batch->header.len == 0) {
        qw_error_set(err, QW_ERR_INVALID, "Batch header is empty");
        rc = defective(defect, QW_BATCHLIST_EMPTY_HEADER);
        goto out;
    }
out:
    batch_list__free_unpacked(list, &allocator);
    return rc;
}

int64_t qw_batchlist_transactions(const uint8_t *payload, size_t len)
{
    BatchList *list = batch_list__unpack(NULL, len, payload);
    if (!list)
        return 0;
    int64_t n = 0;
    for (size_t i = 0; i < list->n_batches; i++)
        n += (int64_t)list->batches[i]->n_transactions;
    batch_list__free_unpacked(list, NULL);
    return n;
}

/* Fills `out` with `n` random-looking lower-case hex characters and a NUL. */
static void fill_hex(struct qw_rng *rng, char *out, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0)
            bits = qw_rng_next(rng);
        out[i] = digits[bits & 0x0f];
        bits >>= 4;
    }
    out[n] = '\0';
}

void qw_batchlist_sample_id(uint64_t seed, char out[129])
{
    struct qw_rng rng;
    /* A distinct stream from qw_batchlist_sample()'s, which mixes in the id. */
    qw_rng_seed(&rng, seed ^ UINT64_C(0x5eed0fba7c41d5e5));
    fill_hex(&rng, out, QW_BATCH_ID_LEN);
}

/* Packs `msg` into a new malloc'd buffer; NULL on allocation failure. */
static uint8_t *pack_new(const ProtobufCMessage *msg, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        protobuf_c_message_pack(msg, buf);
    return buf;
}

int qw_batchlist_sample(const char *batch_id, uint64_t seed, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!batch_id || qw_validate_batch_id(batch_id, strlen(batch_id), NULL) != QW_OK)
        return QW_ERR_INVALID;

    struct qw_rng rng;
    uint64_t mix = seed;
    for (size_t i = 0; i < 16; i++) /* the id's first 64 bits */
        mix = mix * 31 + (uint64_t)(unsigned char)batch_id[i];
    qw_rng_seed(&rng, mix);

    char family[] = "queuer_demo";
    char family_version[] = "1.0";
    char batch_sig[QW_BATCH_ID_LEN + 1];
    char signer[67];
    char txn_sig[QW_BATCH_ID_LEN + 1];
    char nonce[17];
    char sha512[129];
    uint8_t body[48];
    signer[0] = '0';
    signer[1] = (qw_rng_next(&rng) & 1) ? '3' : '2'; /* compressed secp256k1 key prefix */
    fill_hex(&rng, signer + 2, 64);
    fill_hex(&rng, txn_sig, QW_BATCH_ID_LEN);
    fill_hex(&rng, nonce, 16);
    fill_hex(&rng, sha512, 128);
    size_t body_len = 16 + (size_t)qw_rng_below(&rng, sizeof(body) - 16 + 1);
    for (size_t i = 0; i < body_len; i++)
        body[i] = (uint8_t)qw_rng_next(&rng);

    int rc = QW_ERR_NOMEM;
    uint8_t *txn_header = NULL;
    uint8_t *batch_header = NULL;
    size_t txn_header_len = 0;
    size_t batch_header_len = 0;

    TransactionHeader th;
    transaction_header__init(&th);
    th.batcher_public_key = signer;
    th.family_name = family;
    th.family_version = family_version;
    th.nonce = nonce;
    th.payload_sha512 = sha512;
    th.signer_public_key = signer;
    txn_header = pack_new(&th.base, &txn_header_len);
    if (!txn_header)
        goto out;

    Transaction txn;
    transaction__init(&txn);
    txn.header.data = txn_header;
    txn.header.len = txn_header_len;
    txn.header_signature = txn_sig;
    txn.payload.data = body;
    txn.payload.len = body_len;

    char *txn_ids[1] = {txn_sig};
    BatchHeader bh;
    batch_header__init(&bh);
    bh.signer_public_key = signer;
    bh.n_transaction_ids = 1;
    bh.transaction_ids = txn_ids;
    batch_header = pack_new(&bh.base, &batch_header_len);
    if (!batch_header)
        goto out;

    Transaction *txns[1] = {&txn};
    Batch batch;
    batch__init(&batch);
    batch.header.data = batch_header;
    batch.header.len = batch_header_len;
    memcpy(batch_sig, batch_id, sizeof(batch_sig));
    batch.header_signature = batch_sig;
    batch.n_transactions = 1;
    batch.transactions = txns;

    Batch *batches[1] = {&batch};
    BatchList list;
    batch_list__init(&list);
    list.n_batches = 1;
    list.batches = batches;
    *out = pack_new(&list.base, out_len);
    if (*out)
        rc = QW_OK;
out:
    free(txn_header);
    free(batch_header);
    return rc;
}
