/* The wake-up self-test's state machine; see notify_check.h. */
#include "queuer/notify_check.h"

#include <stdlib.h>
#include <string.h>

void qw_notify_check_init(struct qw_notify_check *c)
{
    *c = (struct qw_notify_check){.delivering = true, .due = true, .listener_up = true};
}

void qw_notify_check_cycle(struct qw_notify_check *c)
{
    c->cycles++;
}

bool qw_notify_check_send_due(const struct qw_notify_check *c)
{
    return c->token == 0 && c->listener_up && (c->due || c->cycles >= QW_NOTIFY_CHECK_EVERY);
}

uint64_t qw_notify_check_next(const struct qw_notify_check *c)
{
    return c->last + 1;
}

void qw_notify_check_sent(struct qw_notify_check *c, int64_t now_ms)
{
    c->token = ++c->last;
    c->sent_ms = now_ms;
    c->due = false;
    c->cycles = 0;
}

enum qw_notify_check_change qw_notify_check_received(struct qw_notify_check *c, uint64_t token)
{
    if (token == 0 || token != c->token)
        return QW_NOTIFY_CHECK_SAME;
    c->token = 0;
    bool was = c->delivering;
    c->delivering = true;
    return was ? QW_NOTIFY_CHECK_SAME : QW_NOTIFY_CHECK_RECOVERED;
}

enum qw_notify_check_change qw_notify_check_expire(struct qw_notify_check *c, int64_t now_ms,
                                                   int64_t timeout_ms)
{
    if (c->token == 0 || now_ms < c->sent_ms + timeout_ms)
        return QW_NOTIFY_CHECK_SAME;
    c->token = 0;
    bool was = c->delivering;
    c->delivering = false;
    return was ? QW_NOTIFY_CHECK_FAILED : QW_NOTIFY_CHECK_SAME;
}

int64_t qw_notify_check_deadline(const struct qw_notify_check *c, int64_t timeout_ms)
{
    return c->token == 0 ? INT64_MAX : c->sent_ms + timeout_ms;
}

enum qw_notify_check_change qw_notify_check_listener_lost(struct qw_notify_check *c)
{
    c->listener_up = false;
    c->token = 0;
    bool was = c->delivering;
    c->delivering = false;
    return was ? QW_NOTIFY_CHECK_FAILED : QW_NOTIFY_CHECK_SAME;
}

void qw_notify_check_listener_back(struct qw_notify_check *c)
{
    c->listener_up = true;
    c->due = true;
    c->token = 0;
}

bool qw_notify_check_parse(const char *payload, uint64_t *token)
{
    size_t n = strlen(QW_NOTIFY_CHECK_PREFIX);
    if (strncmp(payload, QW_NOTIFY_CHECK_PREFIX, n) != 0)
        return false;
    const char *digits = payload + n;
    char *end = NULL;
    unsigned long long v = digits[0] >= '0' && digits[0] <= '9' ? strtoull(digits, &end, 10) : 0;
    *token = end && *end == '\0' ? (uint64_t)v : 0;
    return true;
}
