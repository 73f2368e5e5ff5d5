/*
 * Classification of a finished ledger request (HTTP status, body,
 * transport result) into what the caller should do. Pure functions,
 * independent of curl: the client maps its transport errors onto
 * enum qw_dlt_transport first.
 */
#ifndef QW_DLT_DLT_CLASSIFY_H
#define QW_DLT_DLT_CLASSIFY_H

#include "dlt/dlt_json.h"

#include <stddef.h>

#define QW_DLT_MESSAGE_MAX 512 /* bytes of an outcome message, with the NUL */

/** How the exchange with the ledger ended below HTTP. */
enum qw_dlt_transport {
    QW_DLT_TRANSPORT_OK = 0,    /* a complete response arrived */
    QW_DLT_TRANSPORT_CONNECT,   /* could not resolve or connect */
    QW_DLT_TRANSPORT_TIMEOUT,   /* connect or total timeout passed */
    QW_DLT_TRANSPORT_DROPPED,   /* connection lost mid-exchange, or nothing received */
    QW_DLT_TRANSPORT_TOO_LARGE, /* response body exceeded the configured cap */
    QW_DLT_TRANSPORT_TLS,       /* TLS handshake or certificate verification failed */
    QW_DLT_TRANSPORT_OTHER,     /* anything else */
};

/** What a finished request means for the caller. */
enum qw_dlt_outcome {
    QW_DLT_ACCEPTED = 0, /* POST: 202 with a "link"; the batch is Pending */
    QW_DLT_OK,           /* status GET: 200 with a well-formed array */
    QW_DLT_BACKPRESSURE, /* POST: 429; Delayed, pause submissions to the ledger */
    QW_DLT_INVALID,      /* POST: 400; the batch is bad (message says why) */
    QW_DLT_AUTH,         /* 401/403: credentials refused; stop, burn no attempts */
    QW_DLT_RETRY,        /* anything else; try again later with backoff */
    QW_DLT_ABANDONED,    /* never finished: cancelled (shutdown); outcome unknown */
};

/** Why an exchange with the ledger failed, for metrics and log lines. */
enum qw_dlt_failure {
    QW_DLT_FAIL_NONE = 0,     /* it did not fail (or it was cancelled) */
    QW_DLT_FAIL_BACKPRESSURE, /* 429 */
    QW_DLT_FAIL_REJECTED,     /* 400 in scabbard's error shape: the batch is Invalid */
    QW_DLT_FAIL_AUTH,         /* 401/403 */
    QW_DLT_FAIL_HTTP_4XX,     /* another 4xx (a 400 not from the ledger included) */
    QW_DLT_FAIL_HTTP_5XX,     /* 5xx */
    QW_DLT_FAIL_HTTP_OTHER,   /* any other unexpected status */
    QW_DLT_FAIL_MALFORMED,    /* the expected status with a body we cannot use */
    QW_DLT_FAIL_CONNECT,      /* could not connect */
    QW_DLT_FAIL_TIMEOUT,      /* timed out */
    QW_DLT_FAIL_DROPPED,      /* connection lost mid-exchange */
    QW_DLT_FAIL_TOO_LARGE,    /* response over the cap */
    QW_DLT_FAIL_TLS,          /* TLS failure */
    QW_DLT_FAIL_TRANSPORT,    /* another transport error */
    QW_DLT_FAIL_COUNT         /* number of kinds */
};

/** A finished exchange as the classifier sees it; all pointers borrowed. */
struct qw_dlt_response {
    enum qw_dlt_transport transport; /* how the exchange ended */
    const char *transport_detail;    /* transport error text (no secrets), or NULL */
    long http_status;                /* 0 when no response line arrived */
    const char *body;                /* response body, may be NULL when body_len is 0 */
    size_t body_len;                 /* bytes in body */
};

/** Static lower-case name of an outcome ("accepted", "retry", ...); never NULL. */
const char *qw_dlt_outcome_name(enum qw_dlt_outcome outcome);

/** Static lower-case name of a transport result ("ok", "timeout", ...); never NULL. */
const char *qw_dlt_transport_name(enum qw_dlt_transport transport);

/** Static lower-case name of a failure kind ("http_5xx", ...); never NULL. */
const char *qw_dlt_failure_name(enum qw_dlt_failure failure);

/**
 * The failure kind of a classified exchange (`kind` is an enum
 * qw_dlt_kind: 0 POST, 1 STATUS). Pure.
 */
enum qw_dlt_failure qw_dlt_failure_kind(int kind, enum qw_dlt_outcome outcome,
                                        enum qw_dlt_transport transport, long http_status);

/**
 * Classifies a finished batch POST:
 *   transport error                      -> RETRY
 *   202 + JSON object with string "link" -> ACCEPTED (message = the link)
 *   202 otherwise                        -> RETRY
 *   429                                  -> BACKPRESSURE
 *   400 + JSON object with a non-empty
 *         string "message" (scabbard's
 *         error shape)                   -> INVALID (message = that message)
 *   400 otherwise (a proxy's page, ...)  -> RETRY ("HTTP 400 not from the
 *                                           ledger: <body>")
 *   401, 403                             -> AUTH
 *   anything else (404, 5xx, 2xx, 3xx)   -> RETRY
 * Writes a one-line, sanitised explanation into `msg` (capacity `msg_cap`,
 * normally QW_DLT_MESSAGE_MAX; may be NULL).
 */
enum qw_dlt_outcome qw_dlt_classify_post(const struct qw_dlt_response *resp, char *msg,
                                         size_t msg_cap);

/**
 * Classifies a finished batch_statuses GET for the `n` requested `ids`:
 *   200 + a well-formed answer (see qw_dlt_json_parse_statuses) -> OK,
 *         `out` and `counts` filled
 *   401, 403                                                    -> AUTH
 *   anything else (transport errors, other statuses, a 200 with a
 *   malformed body, including 429 and 400)                      -> RETRY
 * Unless the result is OK, every out[i] is "not reported" and `counts`
 * (may be NULL) is zero. `msg` as for qw_dlt_classify_post().
 */
enum qw_dlt_outcome qw_dlt_classify_status(const struct qw_dlt_response *resp,
                                           const char *const *ids, size_t n,
                                           struct qw_dlt_status *out,
                                           struct qw_dlt_status_counts *counts, char *msg,
                                           size_t msg_cap);

#endif
