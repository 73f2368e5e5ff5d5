/*
 * Canned-response HTTP server for the DLT client tests; see http_stub.h.
 *
 * The 4-character service in /scabbard/{circuit}/{service}/... picks the
 * behaviour:
 *   a202  202 {"link": ...}                  r429  429, Retry-After: 7, empty body
 *   d429  429, Retry-After: <a past date>    e400  400 {"message": ...}
 *   a401  401                                a403  403
 *   e503  503 with a text body               nolk  202 "{}" (no link)
 *   huge  200, Content-Length 200000         hugc  200, 200000 bytes chunked
 *   stal  headers, then nothing              drop  Content-Length 100, 10 bytes, close
 *   drip  chunked, one byte per 20 ms        clos  close without answering
 *   stat  batch_statuses answer: ids starting 'c' Committed, 'e' Invalid,
 *         'f' left out, others Pending, plus one id nobody asked for
 *   sbad  200 with truncated JSON
 *   echo  503, text body echoing the request's Authorization header (a proxy)
 *   ech4  400 {"message": ...} echoing the token inside the ledger's message
 * Connections are kept alive between requests unless the behaviour closes.
 */
#include "http_stub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS 256       /* connections one server accepts in its life */
#define REQ_HEAD_MAX 32768  /* bytes of request line + headers */
#define DRIP_INTERVAL_MS 20 /* pause between dripped bytes, ms */

struct conn {
    struct http_stub *server; /* owner */
    int fd;                   /* the accepted socket; closed by http_stub_stop() */
    pthread_t thread;         /* handler thread */
};

struct http_stub {
    int listen_fd;                 /* listening socket */
    int port;                      /* its port */
    pthread_t accept_thread;       /* runs accept_loop() */
    pthread_mutex_t mu;            /* guards everything below */
    bool stopping;                 /* http_stub_stop() has begun */
    int n_conns;                   /* entries used in conns */
    struct conn conns[MAX_CONNS];  /* accepted connections */
    int requests;                  /* complete requests read */
    struct http_stub_request last; /* most recent request */
};

static void send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

static void send_str(int fd, const char *s)
{
    send_all(fd, s, strlen(s));
}

/* Sends a complete response with a Content-Length body and optional extra header lines. */
static void respond(int fd, int status, const char *extra_headers, const char *body)
{
    char head[512];
    size_t len = body ? strlen(body) : 0;
    snprintf(head, sizeof(head), "HTTP/1.1 %d Stub\r\nContent-Length: %zu\r\n%s\r\n", status, len,
             extra_headers ? extra_headers : "");
    send_str(fd, head);
    if (len)
        send_all(fd, body, len);
}

/* Waits until the peer closes (or the server stops); true when it closed. */
static bool wait_for_close(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    if (n <= 0)
        return false;
    char buf[256];
    ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    return got <= 0;
}

static void answer_statuses(int fd, const char *target)
{
    const char *ids = strstr(target, "ids=");
    char *body = malloc(1 << 20);
    if (!body)
        return;
    size_t pos = 0;
    pos += (size_t)sprintf(body + pos, "[");
    bool first = true;
    for (const char *p = ids ? ids + 4 : NULL; p && *p && *p != '&';) {
        const char *end = p + strcspn(p, ",&");
        int len = (int)(end - p);
        const char *type = "Pending";
        const char *message = "[]";
        if (*p == 'c')
            type = "Committed";
        if (*p == 'e') {
            type = "Invalid";
            message = "[{\"transaction_id\": \"t1\", \"message\": \"bad txn\"}]";
        }
        if (*p != 'f') {
            pos += (size_t)sprintf(body + pos,
                                   "%s{\"id\": \"%.*s\", \"status\": {\"statusType\": \"%s\", "
                                   "\"message\": %s}, \"timestamp\": {\"secs_since_epoch\": 1}}",
                                   first ? "" : ", ", len, p, type, message);
            first = false;
        }
        p = *end == ',' ? end + 1 : end;
    }
    char other[129];
    memset(other, 'a', 128);
    other[128] = '\0';
    pos += (size_t)sprintf(body + pos,
                           "%s{\"id\": \"%s\", \"status\": {\"statusType\": \"Pending\", "
                           "\"message\": []}, \"timestamp\": 0}]",
                           first ? "" : ", ", other);
    respond(fd, 200, "Content-Type: application/json\r\n", body);
    free(body);
}

/* Answers one request; returns false when the connection must end. */
static bool answer(int fd, const struct http_stub_request *req)
{
    const char *target = req->target;
    const char *svc = strstr(target, "/scabbard/");
    char behaviour[5] = "";
    if (svc && strlen(svc) >= 10 + 12 + 4)
        memcpy(behaviour, svc + 10 + 12, 4);

    if (strcmp(behaviour, "a202") == 0) {
        respond(fd, 202, "Content-Type: application/json\r\n",
                "{\"link\": \"http://127.0.0.1/batch_statuses?ids=abc\"}");
    } else if (strcmp(behaviour, "echo") == 0) {
        char body[600];
        snprintf(body, sizeof(body),
                 "<html>upstream failed; your request:\r\nAuthorization: %s\r\n</html>",
                 req->authorization);
        respond(fd, 503, "Content-Type: text/html\r\n", body);
    } else if (strcmp(behaviour, "ech4") == 0) {
        const char *token = strchr(req->authorization, ' ');
        char body[600];
        snprintf(body, sizeof(body), "{\"message\": \"bad batch (client token %s)\"}",
                 token ? token + 1 : "");
        respond(fd, 400, "Content-Type: application/json\r\n", body);
    } else if (strcmp(behaviour, "r429") == 0) {
        respond(fd, 429, "Retry-After: 7\r\n", NULL);
    } else if (strcmp(behaviour, "d429") == 0) {
        respond(fd, 429, "Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n", NULL);
    } else if (strcmp(behaviour, "e400") == 0) {
        respond(fd, 400, "Content-Type: application/json\r\n",
                "{\"message\": \"bad batch:\\n signature mismatch\"}");
    } else if (strcmp(behaviour, "a401") == 0) {
        respond(fd, 401, NULL, NULL);
    } else if (strcmp(behaviour, "a403") == 0) {
        respond(fd, 403, NULL, "forbidden");
    } else if (strcmp(behaviour, "e503") == 0) {
        respond(fd, 503, NULL, "down for maintenance");
    } else if (strcmp(behaviour, "nolk") == 0) {
        respond(fd, 202, NULL, "{}");
    } else if (strcmp(behaviour, "huge") == 0 || strcmp(behaviour, "hugc") == 0) {
        bool chunked = behaviour[3] == 'c';
        send_str(fd, chunked ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             : "HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n");
        char chunk[1000];
        memset(chunk, 'x', sizeof(chunk));
        for (int i = 0; i < 200; i++) {
            if (chunked)
                send_str(fd, "3e8\r\n");
            send_all(fd, chunk, sizeof(chunk));
            if (chunked)
                send_str(fd, "\r\n");
        }
        if (chunked)
            send_str(fd, "0\r\n\r\n");
        shutdown(fd, SHUT_WR);
        wait_for_close(fd, -1);
        return false;
    } else if (strcmp(behaviour, "stal") == 0) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
        wait_for_close(fd, -1);
        return false;
    } else if (strcmp(behaviour, "drop") == 0) {
        send_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789");
        shutdown(fd, SHUT_RDWR);
        return false;
    } else if (strcmp(behaviour, "drip") == 0) {
        send_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        do {
            send_str(fd, "1\r\nx\r\n");
        } while (!wait_for_close(fd, DRIP_INTERVAL_MS));
        return false;
    } else if (strcmp(behaviour, "clos") == 0) {
        shutdown(fd, SHUT_RDWR);
        return false;
    } else if (strcmp(behaviour, "stat") == 0) {
        answer_statuses(fd, target);
    } else if (strcmp(behaviour, "sbad") == 0) {
        respond(fd, 200, NULL, "[{\"id\": ");
    } else {
        respond(fd, 404, NULL, "no such behaviour");
    }
    return true;
}

/* Copies header `name`'s value from the head block into out (capacity cap). */
static void header_value(const char *head, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    size_t nlen = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ')
                v++;
            size_t vlen = strcspn(v, "\r\n");
            if (vlen >= cap)
                vlen = cap - 1;
            memcpy(out, v, vlen);
            out[vlen] = '\0';
            return;
        }
    }
}

/* Reads one request; returns false on close or error. */
static bool read_request(struct http_stub *s, int fd, struct http_stub_request *req)
{
    char *head = malloc(REQ_HEAD_MAX + 1);
    if (!head)
        return false;
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        if (len == REQ_HEAD_MAX)
            goto fail;
        ssize_t n = recv(fd, head + len, REQ_HEAD_MAX - len, 0);
        if (n <= 0)
            goto fail;
        len += (size_t)n;
        head[len] = '\0';
        end = strstr(head, "\r\n\r\n");
    }
    memset(req, 0, sizeof(*req));
    sscanf(head, "%15s %16383s", req->method, req->target);
    header_value(head, "Authorization", req->authorization, sizeof(req->authorization));
    header_value(head, "User-Agent", req->user_agent, sizeof(req->user_agent));
    header_value(head, "Content-Type", req->content_type, sizeof(req->content_type));
    char clen[32];
    header_value(head, "Content-Length", clen, sizeof(clen));
    size_t want = (size_t)strtoul(clen, NULL, 10);

    /* Body bytes already read, then the rest. */
    size_t have = len - (size_t)(end + 4 - head);
    const char *p = end + 4;
    for (;;) {
        size_t take = have < want - req->body_len ? have : want - req->body_len;
        if (req->body_len < sizeof(req->body)) {
            size_t room = sizeof(req->body) - req->body_len;
            memcpy(req->body + req->body_len, p, take < room ? take : room);
        }
        req->body_len += take;
        if (req->body_len >= want)
            break;
        ssize_t n = recv(fd, head, REQ_HEAD_MAX, 0);
        if (n <= 0)
            goto fail;
        have = (size_t)n;
        p = head;
    }
    free(head);
    pthread_mutex_lock(&s->mu);
    s->requests++;
    s->last = *req;
    pthread_mutex_unlock(&s->mu);
    return true;
fail:
    free(head);
    return false;
}

static void *conn_loop(void *arg)
{
    struct conn *c = arg;
    struct http_stub_request *req = malloc(sizeof(*req));
    while (req && read_request(c->server, c->fd, req)) {
        if (!answer(c->fd, req))
            break;
    }
    free(req);
    return NULL;
}

static void *accept_loop(void *arg)
{
    struct http_stub *s = arg;
    for (;;) {
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        pthread_mutex_lock(&s->mu);
        if (s->stopping || s->n_conns == MAX_CONNS) {
            pthread_mutex_unlock(&s->mu);
            close(fd);
            continue;
        }
        struct conn *c = &s->conns[s->n_conns];
        c->server = s;
        c->fd = fd;
        if (pthread_create(&c->thread, NULL, conn_loop, c) == 0)
            s->n_conns++;
        else
            close(fd);
        pthread_mutex_unlock(&s->mu);
    }
}

struct http_stub *http_stub_start(void)
{
    struct http_stub *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(addr);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(s->listen_fd, 64) != 0 ||
        getsockname(s->listen_fd, (struct sockaddr *)&addr, &alen) != 0)
        goto fail;
    s->port = ntohs(addr.sin_port);
    if (pthread_create(&s->accept_thread, NULL, accept_loop, s) != 0)
        goto fail;
    return s;
fail:
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

void http_stub_stop(struct http_stub *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    shutdown(s->listen_fd, SHUT_RDWR); /* makes accept() fail */
    pthread_join(s->accept_thread, NULL);
    for (int i = 0; i < s->n_conns; i++)
        shutdown(s->conns[i].fd, SHUT_RDWR); /* wakes handlers blocked in recv/poll */
    for (int i = 0; i < s->n_conns; i++) {
        pthread_join(s->conns[i].thread, NULL);
        close(s->conns[i].fd);
    }
    close(s->listen_fd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int http_stub_port(const struct http_stub *s)
{
    return s->port;
}

int http_stub_connections(struct http_stub *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int http_stub_requests(struct http_stub *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->requests;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void http_stub_last(struct http_stub *s, struct http_stub_request *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->last;
    pthread_mutex_unlock(&s->mu);
}
