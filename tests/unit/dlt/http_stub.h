/*
 * A tiny HTTP/1.1 server on 127.0.0.1 for the DLT client tests: one thread
 * accepts, one thread per connection answers canned responses chosen by
 * the 4-character service in the request path (see http_stub.c for the
 * list). Not a general server: it exists to misbehave on purpose.
 */
#ifndef QW_TESTS_HTTP_STUB_H
#define QW_TESTS_HTTP_STUB_H

#include <stddef.h>

struct http_stub;

/** Starts a server on an ephemeral port; NULL on failure. */
struct http_stub *http_stub_start(void);

/** Stops the server, closing every connection and joining every thread. */
void http_stub_stop(struct http_stub *s);

/** The server's port. */
int http_stub_port(const struct http_stub *s);

/** Connections accepted so far. */
int http_stub_connections(struct http_stub *s);

/** Requests read completely so far. */
int http_stub_requests(struct http_stub *s);

/** Facts about the most recent complete request, copied under the server's lock. */
struct http_stub_request {
    char method[16];          /* "POST", "GET" */
    char target[16384];       /* request target (path and query) */
    char authorization[256];  /* Authorization header value, "" if none */
    char user_agent[128];     /* User-Agent header value, "" if none */
    char content_type[128];   /* Content-Type header value, "" if none */
    unsigned char body[4096]; /* first bytes of the request body */
    size_t body_len;          /* bytes of the body (not capped) */
};

/** Copies the most recent request into *out. */
void http_stub_last(struct http_stub *s, struct http_stub_request *out);

#endif
