/* Ledger identifiers and scabbard REST URLs: validation and building. Pure functions. */
#ifndef QW_DLT_DLT_URL_H
#define QW_DLT_DLT_URL_H

#include "common/batch.h"
#include "common/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QW_DLT_MAX_WAIT_S 3600 /* largest long-poll wait a URL may carry, seconds */
#define QW_DLT_MAX_NODES 16    /* base URLs (nodes of one ledger) a list may hold */

/** The two halves of a service_id `circuit::service`, NUL-terminated. */
struct qw_dlt_service_ref {
    char circuit[QW_CIRCUIT_LEN + 1]; /* [A-Za-z0-9]{5}-[A-Za-z0-9]{5} */
    char service[QW_SERVICE_LEN + 1]; /* [A-Za-z0-9]{4} */
};

/**
 * Splits and validates a service_id `circuit::service` (circuit
 * `[A-Za-z0-9]{5}-[A-Za-z0-9]{5}`, service `[A-Za-z0-9]{4}`, nothing else).
 * `out` may be NULL to validate only. Returns QW_OK or QW_ERR_INVALID.
 */
QW_MUST_CHECK int qw_dlt_service_id_parse(const char *service_id, struct qw_dlt_service_ref *out);

/** True when `id` is exactly 128 lower-case hex characters (a batch header_signature). */
bool qw_dlt_batch_id_valid(const char *id);

/**
 * Checks a ledger base URL: http:// or https:// (any case), a host (a
 * name, an IPv4 address or a [bracketed] IPv6 address), an optional port
 * 1..65535, an optional path; no whitespace, control characters, '?', '#'
 * or '@' (no user:password in URLs: the token is the credential, and URLs
 * get logged). Trailing slashes are allowed (they are dropped when URLs are
 * built). Returns NULL when `base` is acceptable, else a static reason
 * ("must ..."). The configuration uses the same check, so what `run`
 * refuses `check-config` refuses too.
 */
const char *qw_dlt_base_url_check(const char *base);

/** True when qw_dlt_base_url_check() accepts `base`. */
bool qw_dlt_base_url_valid(const char *base);

/** The base URLs of a node list (dlt.url), in the order given, with what each serves. */
struct qw_dlt_url_list {
    size_t n;                       /* number of URLs, 1..QW_DLT_MAX_NODES */
    char *url[QW_DLT_MAX_NODES];    /* malloc'd copies, blanks around the commas dropped */
    char *serves[QW_DLT_MAX_NODES]; /* the entry's tags (circuits and services, one blank
                                       between them, malloc'd), NULL = every service */
};

/**
 * Parses `list`: one entry, or several entries for nodes of the same
 * ledger separated by commas (blanks around a comma are ignored). An entry
 * is a base URL, optionally followed (after blanks) by the circuits
 * (`abcde-12345`) and services (`abcde-12345::ab12`) that node serves,
 * separated by blanks; an entry without them serves every service. Each
 * URL must pass qw_dlt_base_url_check(); at most QW_DLT_MAX_NODES, no empty
 * entry, no URL twice (trailing slashes ignored). `out` may be NULL to
 * check only. Returns QW_OK (free `out` with qw_dlt_url_list_free()),
 * QW_ERR_INVALID with a static reason in *why (may be NULL; `out` then
 * holds nothing), or QW_ERR_NOMEM.
 */
QW_MUST_CHECK int qw_dlt_url_list_parse(const char *list, struct qw_dlt_url_list *out,
                                        const char **why);

/** NULL when qw_dlt_url_list_parse() accepts `list`, else its reason ("must ..."). */
const char *qw_dlt_url_list_check(const char *list);

/** Frees the copies of a parsed list; leaves it empty. Safe on a zeroed list. */
void qw_dlt_url_list_free(struct qw_dlt_url_list *list);

/**
 * The entries of `list` that serve `service_id` (`circuit::service`): bit i
 * for entry i when it names no circuit or service, names the service, or
 * names its circuit. 0 when none does.
 */
uint32_t qw_dlt_url_list_route(const struct qw_dlt_url_list *list, const char *service_id);

/**
 * Writes `{base}/scabbard/{circuit}/{service}/batches` into `buf`
 * (capacity `cap`, including the NUL). Returns QW_OK, or QW_ERR_INVALID
 * when an input is malformed or the URL would not fit; on error `buf`
 * (when cap > 0) holds "".
 */
QW_MUST_CHECK int qw_dlt_url_batches(char *buf, size_t cap, const char *base,
                                     const char *service_id);

/**
 * Writes `{base}/scabbard/{circuit}/{service}/batch_statuses?ids=a,b&wait=N`
 * into `buf` (capacity `cap`). `ids` holds `n` >= 1 batch ids, each
 * accepted by qw_dlt_batch_id_valid(); `wait_s` is 0..QW_DLT_MAX_WAIT_S.
 * Returns QW_OK, or QW_ERR_INVALID when an input is malformed or the URL
 * would not fit; on error `buf` (when cap > 0) holds "".
 */
QW_MUST_CHECK int qw_dlt_url_statuses(char *buf, size_t cap, const char *base,
                                      const char *service_id, const char *const *ids, size_t n,
                                      int wait_s);

#endif
