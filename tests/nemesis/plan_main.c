/*
 * qw-nemesis-plan: prints the nemesis schedule for a seed (plan.h), one
 * fault per line, for tests/nemesis/run.sh to execute:
 *   seq kind target duration_ms gap_ms pick count rate_permille skew_offset_s skew_rate_permille
 * `target` is a host worker index or "-". Exit status: 0, or 2 on bad usage.
 */
#include "plan.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAULTS 100000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: qw-nemesis-plan --seed N --lease-ms MS --query-timeout-ms MS\n"
            "                       --http-timeout-ms MS --workers N\n"
            "                       (--repeat N | --count N) [--skip KIND,...] [--list-kinds]\n"
            "Prints a reproducible fault schedule: every kind --repeat times in a seeded\n"
            "order, or --count faults drawn at random. --skip leaves kinds out.\n");
}

static int parse_int(const char *text, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || !*text || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Clears the bits of the comma-separated kinds in `list`; -1 on an unknown name. */
static int skip_kinds(const char *list, unsigned *enabled)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        enum qw_nem_kind k;
        if (qw_nem_kind_parse(tok, &k) != 0) {
            fprintf(stderr, "qw-nemesis-plan: unknown fault kind '%s'\n", tok);
            return -1;
        }
        *enabled &= ~(1u << k);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longs[] = {
        {"seed", required_argument, NULL, 's'},
        {"lease-ms", required_argument, NULL, 'l'},
        {"query-timeout-ms", required_argument, NULL, 'q'},
        {"http-timeout-ms", required_argument, NULL, 't'},
        {"workers", required_argument, NULL, 'w'},
        {"repeat", required_argument, NULL, 'r'},
        {"count", required_argument, NULL, 'c'},
        {"skip", required_argument, NULL, 'x'},
        {"list-kinds", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct qw_nem_plan_opts o = {.enabled = (1u << QW_NEM_KINDS) - 1};
    int have_seed = 0;
    long v;
    for (;;) {
        int opt = getopt_long(argc, argv, "h", longs, NULL);
        if (opt == -1)
            break;
        int bad = 0;
        switch (opt) {
        case 's': {
            char *end = NULL;
            errno = 0;
            o.seed = strtoull(optarg, &end, 10);
            bad = errno || !*optarg || *end || optarg[0] == '-';
            have_seed = 1;
            break;
        }
        case 'l':
            bad = parse_int(optarg, 100, 3600000, &v);
            o.timing.lease_ms = (int)v;
            break;
        case 'q':
            bad = parse_int(optarg, 100, 600000, &v);
            o.timing.query_timeout_ms = (int)v;
            break;
        case 't':
            bad = parse_int(optarg, 100, 600000, &v);
            o.timing.http_timeout_ms = (int)v;
            break;
        case 'w':
            bad = parse_int(optarg, 1, 1000, &v);
            o.workers = (int)v;
            break;
        case 'r':
            bad = parse_int(optarg, 1, 1000, &v);
            o.repeat = (int)v;
            break;
        case 'c':
            bad = parse_int(optarg, 1, MAX_FAULTS, &v);
            o.count = (int)v;
            break;
        case 'x':
            if (skip_kinds(optarg, &o.enabled) != 0)
                return 2;
            break;
        case 'k':
            for (int k = 0; k < QW_NEM_KINDS; k++)
                printf("%s\n", qw_nem_kind_name((enum qw_nem_kind)k));
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "qw-nemesis-plan: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (optind < argc || !have_seed || !o.timing.lease_ms || !o.timing.query_timeout_ms ||
        !o.timing.http_timeout_ms || !o.workers || (o.repeat == 0) == (o.count == 0)) {
        usage(stderr);
        return 2;
    }
    struct qw_nem_fault *faults = calloc(MAX_FAULTS, sizeof(*faults));
    size_t n = 0;
    if (!faults || qw_nem_plan(&o, faults, MAX_FAULTS, &n) != 0) {
        fprintf(stderr, "qw-nemesis-plan: no schedule (no kind enabled, or too many faults)\n");
        free(faults);
        return 2;
    }
    printf("# qw-nemesis-plan seed=%" PRIu64 " faults=%zu lease_ms=%d query_timeout_ms=%d "
           "http_timeout_ms=%d workers=%d\n",
           o.seed, n, o.timing.lease_ms, o.timing.query_timeout_ms, o.timing.http_timeout_ms,
           o.workers);
    for (size_t i = 0; i < n; i++) {
        const struct qw_nem_fault *f = &faults[i];
        char target[16] = "-";
        if (f->target >= 0)
            snprintf(target, sizeof(target), "%d", f->target);
        printf("%d %s %s %d %d %" PRIu32 " %d %d %d %d\n", f->seq, qw_nem_kind_name(f->kind),
               target, f->duration_ms, f->gap_ms, f->pick, f->count, f->rate_permille,
               f->skew_offset_s, f->skew_rate_permille);
    }
    free(faults);
    return ferror(stdout) ? 2 : 0;
}
