/* Format checks for service_id and batch_id; see validate.h. */
#include "ingest/validate.h"

#include <string.h>

#define CIRCUIT_LEN 11 /* "abcde-fghij" */
#define SERVICE_LEN 4  /* "klmn" */

/* ASCII only: the C library's isalnum() follows the locale. */
static int is_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_lower_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

const char *qw_validate_printable(const char *s, size_t len, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    size_t out = 0;
    size_t keep = len;
    int cut = 0;
    if (keep > cap - 1) {
        keep = cap > 4 ? cap - 4 : cap - 1;
        cut = cap > 4;
    }
    for (size_t i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[out++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (cut) {
        memcpy(buf + out, "...", 3);
        out += 3;
    }
    buf[out] = '\0';
    return buf;
}

/* Describes character `c` for a message: 'x', or a hex code when unprintable. */
static const char *describe_char(unsigned char c, char buf[8])
{
    static const char hex[] = "0123456789abcdef";
    if (c >= 0x20 && c < 0x7f && c != '\'') {
        buf[0] = '\'';
        buf[1] = (char)c;
        buf[2] = '\'';
        buf[3] = '\0';
    } else {
        memcpy(buf, "0x", 2);
        buf[2] = hex[c >> 4];
        buf[3] = hex[c & 0x0f];
        buf[4] = '\0';
    }
    return buf;
}

int qw_validate_service_id(const char *s, size_t len, struct qw_error *err)
{
    char shown[48];
    char ch[8];
    if (len == 0)
        return qw_error_set(err, QW_ERR_INVALID, "service_id is empty");
    qw_validate_printable(s, len, shown, sizeof(shown));

    const char *sep = NULL;
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] == ':' && s[i + 1] == ':') {
            sep = s + i;
            break;
        }
    }
    if (!sep)
        return qw_error_set(err, QW_ERR_INVALID,
                            "service_id '%s' has no '::' between circuit and service "
                            "(expected <5 letters/digits>-<5 letters/digits>::<4 letters/digits>)",
                            shown);
    size_t circuit_len = (size_t)(sep - s);
    if (circuit_len != CIRCUIT_LEN)
        return qw_error_set(err, QW_ERR_INVALID,
                            "service_id '%s': circuit is %zu characters, expected 11 "
                            "(<5 letters/digits>-<5 letters/digits>)",
                            shown, circuit_len);
    for (size_t i = 0; i < CIRCUIT_LEN; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 5 ? c != '-' : !is_alnum(c))
            return qw_error_set(err, QW_ERR_INVALID,
                                "service_id '%s': character %zu is %s, expected %s", shown, i + 1,
                                describe_char(c, ch), i == 5 ? "'-'" : "a letter or digit");
    }
    size_t service_len = len - CIRCUIT_LEN - 2;
    if (service_len != SERVICE_LEN)
        return qw_error_set(err, QW_ERR_INVALID,
                            "service_id '%s': service is %zu characters, expected 4 letters/digits",
                            shown, service_len);
    for (size_t i = CIRCUIT_LEN + 2; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_alnum(c))
            return qw_error_set(err, QW_ERR_INVALID,
                                "service_id '%s': character %zu is %s, expected a letter or digit",
                                shown, i + 1, describe_char(c, ch));
    }
    return QW_OK;
}

int qw_validate_batch_id(const char *s, size_t len, struct qw_error *err)
{
    /* The common case first, without building the message's copy of the id. */
    size_t i = 0;
    while (i < len && i < QW_BATCH_ID_LEN && is_lower_hex((unsigned char)s[i]))
        i++;
    if (i == QW_BATCH_ID_LEN && len == QW_BATCH_ID_LEN)
        return QW_OK;

    char shown[24];
    char ch[8];
    if (len == 0)
        return qw_error_set(err, QW_ERR_INVALID, "batch_id is empty");
    qw_validate_printable(s, len, shown, sizeof(shown));
    if (i < len && i < QW_BATCH_ID_LEN) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 'A' && c <= 'F')
            return qw_error_set(err, QW_ERR_INVALID,
                                "batch_id '%s': character %zu is upper-case %s; "
                                "batch ids are lower-case hex",
                                shown, i + 1, describe_char(c, ch));
        return qw_error_set(err, QW_ERR_INVALID,
                            "batch_id '%s': character %zu is %s, not a hex digit", shown, i + 1,
                            describe_char(c, ch));
    }
    return qw_error_set(err, QW_ERR_INVALID,
                        "batch_id '%s' is %zu characters, expected 128 lower-case hex", shown, len);
}
