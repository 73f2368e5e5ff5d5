/* Decoding a submitted BatchList; see payload.h. */
#include "payload.h"

#include "batch.pb-c.h"
#include "common/err.h"
#include "routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies the well-formed ids of `list` (and each batch's first transaction
 * id) into `out`; counts the batches without one in `*bad`. */
static int collect(const BatchList *list, struct qw_sim_payload *out, size_t *bad)
{
    size_t bytes = 0;
    for (size_t i = 0; i < list->n_batches; i++) {
        const Batch *b = list->batches[i];
        bytes += strlen(b->header_signature) + 1;
        if (b->n_transactions > 0 && b->transactions[0]->header_signature)
            bytes += strlen(b->transactions[0]->header_signature) + 1;
    }
    out->subs = calloc(list->n_batches ? list->n_batches : 1, sizeof(*out->subs));
    out->strings = malloc(bytes ? bytes : 1);
    if (!out->subs || !out->strings)
        return QW_ERR_NOMEM;
    char *w = out->strings;
    *bad = 0;
    for (size_t i = 0; i < list->n_batches; i++) {
        const Batch *b = list->batches[i];
        if (!qw_sim_id_valid(b->header_signature)) {
            (*bad)++;
            continue;
        }
        struct qw_sim_submission *s = &out->subs[out->n++];
        size_t n = strlen(b->header_signature) + 1;
        memcpy(w, b->header_signature, n);
        s->batch_id = w;
        w += n;
        if (b->n_transactions > 0 && b->transactions[0]->header_signature &&
            b->transactions[0]->header_signature[0]) {
            n = strlen(b->transactions[0]->header_signature) + 1;
            memcpy(w, b->transactions[0]->header_signature, n);
            s->first_txn_id = w;
            w += n;
        }
    }
    return QW_OK;
}

int qw_sim_payload_decode(const uint8_t *body, size_t len, struct qw_sim_payload *out, char *err,
                          size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (len == 0) {
        snprintf(err, errlen, "the request body is empty");
        return QW_ERR_INVALID;
    }
    BatchList *list = batch_list__unpack(NULL, len, body);
    if (!list) {
        snprintf(err, errlen, "the request body is not a protobuf BatchList");
        return QW_ERR_INVALID;
    }
    int rc = QW_OK;
    if (list->n_batches == 0) {
        snprintf(err, errlen, "the BatchList holds no batches");
        rc = QW_ERR_INVALID;
        goto out;
    }
    if (list->n_batches > QW_SIM_BATCHES_MAX) {
        snprintf(err, errlen, "the BatchList holds more than %d batches", QW_SIM_BATCHES_MAX);
        rc = QW_ERR_INVALID;
        goto out;
    }
    size_t bad = 0;
    rc = collect(list, out, &bad);
    if (rc != QW_OK) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (bad > 0) {
        snprintf(err, errlen, "%zu batch(es) lack a well-formed header_signature", bad);
        rc = QW_ERR_INVALID;
    }
out:
    batch_list__free_unpacked(list, NULL);
    if (rc == QW_ERR_NOMEM)
        qw_sim_payload_free(out);
    return rc;
}

void qw_sim_payload_free(struct qw_sim_payload *p)
{
    free(p->subs);
    free(p->strings);
    memset(p, 0, sizeof(*p));
}
