/*
 * Asynchronous scabbard client on the libcurl multi interface: the only
 * module that includes curl/curl.h.
 *
 * DESIGN. A struct qw_dlt_client belongs to one thread (its owner); every
 * function below except qw_dlt_wakeup() must be called from that thread.
 * The owner starts transfers (qw_dlt_post, qw_dlt_get_statuses), which
 * return at once, and drives them from its own loop with qw_dlt_run(),
 * which waits for network activity (or `timeout_ms`, or a readable
 * `wake_fd`, or qw_dlt_wakeup() from another thread) and calls the
 * caller's callback once per finished transfer, on the owner thread.
 * Every started transfer ends in exactly one callback: finished,
 * failed, timed out, or abandoned by qw_dlt_cancel_all(). Results are
 * classified by the pure code in dlt_classify.h.
 *
 * Nodes: the base URL may list several nodes of the same ledger
 * (comma-separated, dlt_url.h); node i is the i-th URL, and the caller
 * names the node of every transfer (the submitter's node chooser decides).
 *
 * Connections are kept alive and reused between transfers (at most
 * max_in_flight in all). TLS verification is always on; there is no
 * switch to turn it off. Each transfer is bounded by the connect timeout,
 * a total timeout (long polls get wait_s on top) and a cap on the
 * response body, so a ledger that drips, stalls or floods cannot hold a
 * transfer forever or exhaust memory. The bearer token is sent as an
 * Authorization header, never logged, and wiped from the client's memory
 * when it is freed.
 *
 * Shutdown: stop starting transfers, call qw_dlt_run() until
 * qw_dlt_in_flight() is 0 or the grace period ends, then
 * qw_dlt_cancel_all() so every remaining transfer is reported ABANDONED,
 * then qw_dlt_client_free().
 */
#ifndef QW_DLT_DLT_CLIENT_H
#define QW_DLT_DLT_CLIENT_H

#include "common/err.h"
#include "dlt/dlt_json.h"
#include "dlt/dlt_classify.h"

#include <stddef.h>
#include <stdint.h>

struct qw_dlt_client;

/** Settings of one client; strings are copied by qw_dlt_client_new(). */
struct qw_dlt_opts {
    const char *base_url;       /* ledger base URL, http(s)://host[:port][/prefix], or several
                                   (nodes of one ledger) separated by commas */
    const char *token;          /* bearer token, NULL or "" = none; never logged */
    const char *ca_file;        /* CA bundle, NULL or "" = system default */
    int connect_timeout_ms;     /* TCP + TLS connect bound, ms, > 0 */
    int request_timeout_ms;     /* whole request bound, ms, > 0; status GETs add wait_s */
    size_t max_response_bytes;  /* response body cap, bytes, > 0 */
    int max_in_flight;          /* concurrent transfers (and connections), >= 1 */
    int64_t retry_after_max_ms; /* Retry-After values are clamped to this, ms; 0 = 1 hour */
};

/** Which request a result belongs to. */
enum qw_dlt_kind {
    QW_DLT_KIND_POST = 0, /* POST .../batches */
    QW_DLT_KIND_STATUS,   /* GET .../batch_statuses */
};

/**
 * One finished transfer, passed to the callback. Everything it points to
 * is owned by the client and valid only during the callback: copy what
 * must outlive it.
 */
struct qw_dlt_result {
    enum qw_dlt_kind kind;                /* POST or STATUS */
    int node;                             /* the node (index of its base URL) it went to */
    void *user;                           /* the caller's pointer given when the transfer started */
    const char *service_id;               /* the transfer's service_id */
    enum qw_dlt_outcome outcome;          /* what to do; ABANDONED after qw_dlt_cancel_all() */
    enum qw_dlt_transport transport;      /* how the exchange ended below HTTP */
    long http_status;                     /* 0 when no response arrived */
    int64_t retry_after_ms;               /* Retry-After of the response, ms, -1 when absent */
    int64_t latency_us;                   /* from start call to completion, microseconds */
    const char *message;                  /* one sanitised line (link, ledger message, error) */
    const struct qw_dlt_status *statuses; /* STATUS: n_statuses entries parallel to the ids
                                             asked for; NULL for POST */
    size_t n_statuses;                    /* STATUS: number of ids asked for; 0 for POST */
    struct qw_dlt_status_counts counts;   /* STATUS with outcome OK: reported/missing/ignored */
};

/** Called once per finished transfer, on the owner thread. */
typedef void qw_dlt_done_fn(const struct qw_dlt_result *result, void *arg);

/**
 * Initialises libcurl for the whole process. Call once from main() before
 * any thread starts and before any client is created. Returns QW_OK, or
 * QW_ERR_IO when libcurl cannot initialise, or QW_ERR_CONFIG when the
 * libcurl found at run time is older than 7.68 (no curl_multi_wakeup).
 */
QW_MUST_CHECK int qw_dlt_global_init(void);

/** Releases libcurl's global state; call once at exit after every client is freed. */
void qw_dlt_global_cleanup(void);

/**
 * Creates a client. On success *out owns it (free with
 * qw_dlt_client_free()). Errors: QW_ERR_CONFIG (bad base URL, token with
 * control characters, unreadable CA file, a bound <= 0), QW_ERR_NOMEM,
 * QW_ERR_IO (libcurl refused a setting); `err` (may be NULL) says which.
 * The calling thread becomes the owner.
 */
QW_MUST_CHECK int qw_dlt_client_new(struct qw_dlt_client **out, const struct qw_dlt_opts *opts,
                                    struct qw_error *err);

/**
 * Frees the client. Transfers still in flight are dropped WITHOUT
 * callbacks (a warning is logged): call qw_dlt_cancel_all() first to
 * have them reported. Wipes the token. NULL is allowed. Owner thread only,
 * and no other thread may call qw_dlt_wakeup() on it any more.
 */
void qw_dlt_client_free(struct qw_dlt_client *c);

/**
 * Starts `POST {base}/scabbard/{circuit}/{service}/batches` on node `node`
 * (0..qw_dlt_nodes() - 1) with the `len`
 * bytes of `payload` (a serialized BatchList). The payload is COPIED: the
 * caller may free it as soon as this returns. `user` is handed back in
 * the result. Returns QW_OK (exactly one callback will follow),
 * QW_ERR_BACKPRESSURE when max_in_flight transfers are running (nothing
 * started), QW_ERR_INVALID (bad node or service_id, len 0), QW_ERR_NOMEM or
 * QW_ERR_IO (libcurl refused). Owner thread only; may be called from
 * inside the callback.
 */
QW_MUST_CHECK int qw_dlt_post(struct qw_dlt_client *c, int node, const char *service_id,
                              const void *payload, size_t len, void *user);

/**
 * Starts `GET .../batch_statuses?ids=...&wait=wait_s` on node `node` for the `n` batch
 * ids (1..QW_DLT_STATUS_MAX_IDS, distinct, 128 lower-case hex each; the
 * ids are copied). The request's total timeout is wait_s seconds plus
 * request_timeout_ms. The result's statuses are parallel to `ids`.
 * Returns as qw_dlt_post(); QW_ERR_INVALID also for bad ids or wait_s
 * outside 0..QW_DLT_MAX_WAIT_S.
 */
QW_MUST_CHECK int qw_dlt_get_statuses(struct qw_dlt_client *c, int node, const char *service_id,
                                      const char *const *ids, size_t n, int wait_s, void *user);

/**
 * Drives the transfers: makes progress on every one, calls `cb(result,
 * cb_arg)` for each that finished, and when none finished waits up to
 * `timeout_ms` (0 = do not wait; negative counts as 0) for network
 * activity, then makes progress again. The wait ends early when `wake_fd`
 * (-1 = none) becomes readable or another thread calls qw_dlt_wakeup().
 * The caller owns `wake_fd` and must drain it (a readable fd that is
 * never drained makes every call return at once); the client watches it
 * until a call passes another fd, so it must stay open until then (pass
 * -1 before closing it). It works with no
 * transfer in flight, so it can be the owner's only blocking point.
 *
 * The callback may start new transfers but must not call qw_dlt_run(),
 * qw_dlt_cancel_all() or qw_dlt_client_free().
 * Returns the number of callbacks made (>= 0), QW_ERR_INVALID when called
 * from inside a callback, or QW_ERR_IO when libcurl's multi handle failed.
 */
QW_MUST_CHECK int qw_dlt_run(struct qw_dlt_client *c, int timeout_ms, int wake_fd,
                             qw_dlt_done_fn *cb, void *cb_arg);

/**
 * Makes a qw_dlt_run() that is waiting (or the next one) return early.
 * The only function that may be called from any thread; the client must
 * stay alive until it returns. Returns QW_OK or QW_ERR_IO.
 */
QW_MUST_CHECK int qw_dlt_wakeup(struct qw_dlt_client *c);

/** Number of transfers started and not yet reported. Owner thread only. */
int qw_dlt_in_flight(const struct qw_dlt_client *c);

/**
 * The nodes that serve `service_id`: bit i for node i when its dlt.url
 * entry names no circuit or service, or names that service or its circuit
 * (dlt_url.h). 0 when no node serves it. Owner thread only.
 */
uint32_t qw_dlt_route(const struct qw_dlt_client *c, const char *service_id);

/** Number of nodes (base URLs), >= 1. */
int qw_dlt_nodes(const struct qw_dlt_client *c);

/** The base URL of node `node` as configured (no credentials), or NULL when out of range. */
const char *qw_dlt_node_url(const struct qw_dlt_client *c, int node);

/**
 * Abandons every transfer in flight, reporting each to `cb` with outcome
 * QW_DLT_ABANDONED (a POST may or may not have reached the ledger).
 * Transfers the callback starts are not abandoned. Returns the number of
 * callbacks made, or QW_ERR_INVALID when called from inside a callback.
 */
QW_MUST_CHECK int qw_dlt_cancel_all(struct qw_dlt_client *c, qw_dlt_done_fn *cb, void *cb_arg);

#endif
