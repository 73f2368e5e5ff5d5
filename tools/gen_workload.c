/*
 * queuer-gen: prints a bulk-enqueue workload (TSV lines for `queuer enqueue
 * --tsv`) with valid sample payloads, for tests, the demo and benchmarks.
 *
 * Service i (0-based) is <prefix>-<5 base-36 digits of i / 36^4>::<4
 * base-36 digits of i % 36^4>. Lines are interleaved by service (batch 0
 * of every service, then batch 1, ...), so each service's batches appear
 * in batch order. Everything is a function of --seed.
 */
#include "common/hex.h"
#include "common/number.h"
#include "ingest/batchlist.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVICES_PER_CIRCUIT (36L * 36 * 36 * 36)

static void usage(FILE *out)
{
    fprintf(out, "usage: queuer-gen --services N --batches K [--seed S] [--circuit-prefix ABCDE]\n"
                 "Prints N*K lines 'service_id<TAB>batch_id<TAB>hex(BatchList)' to stdout,\n"
                 "interleaved by service so each service's batches come in order.\n"
                 "  --services N         services, 1..100000000\n"
                 "  --batches K          batches per service, 1..100000000\n"
                 "  --seed S             64-bit seed for ids and payloads (default 1)\n"
                 "  --circuit-prefix P   first half of the circuit id: 5 letters/digits"
                 " (default qwgen)\n");
}

static void base36(long v, char *out, int digits)
{
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (int i = digits - 1; i >= 0; i--) {
        out[i] = alphabet[v % 36];
        v /= 36;
    }
}

/*
 * A per-batch seed, distinct for every (service, batch) under one seed:
 * both fit in 27 bits, and xor with a function of the seed is a bijection.
 */
static uint64_t batch_seed(uint64_t seed, long service, long batch)
{
    return (seed * UINT64_C(0x9e3779b97f4a7c15)) ^ ((uint64_t)service << 27 | (uint64_t)batch);
}

int main(int argc, char **argv)
{
    long services = 0;
    long batches = 0;
    uint64_t seed = 1;
    const char *prefix = "qwgen";
    static const struct option longopts[] = {
        {"services", required_argument, NULL, 'n'},
        {"batches", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},
        {"circuit-prefix", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char why[80];
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (qw_number_parse("--services", optarg, 1, 100000000, &services, why, sizeof(why)) !=
                0) {
                fprintf(stderr, "queuer-gen: %s\n", why);
                return 64;
            }
            break;
        case 'k':
            if (qw_number_parse("--batches", optarg, 1, 100000000, &batches, why, sizeof(why)) !=
                0) {
                fprintf(stderr, "queuer-gen: %s\n", why);
                return 64;
            }
            break;
        case 's': {
            char *end = NULL;
            seed = strtoull(optarg, &end, 0);
            if (!*optarg || *end) {
                fprintf(stderr, "queuer-gen: --seed must be an integer\n");
                return 64;
            }
            break;
        }
        case 'p':
            prefix = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 64;
        }
    }
    if (optind != argc || services == 0 || batches == 0) {
        usage(stderr);
        return 64;
    }
    if (strlen(prefix) != 5 || strspn(prefix, "0123456789abcdefghijklmnopqrstuvwxyz"
                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != 5) {
        fprintf(stderr, "queuer-gen: --circuit-prefix must be 5 letters/digits\n");
        return 64;
    }

    static char outbuf[1 << 20];
    setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
    char service_id[18];
    memcpy(service_id, prefix, 5);
    service_id[5] = '-';
    service_id[11] = ':';
    service_id[12] = ':';
    service_id[17] = '\0';
    char batch_id[129];
    char *hex = NULL;
    size_t hex_cap = 0;
    for (long k = 0; k < batches; k++) {
        for (long i = 0; i < services; i++) {
            base36(i / SERVICES_PER_CIRCUIT, service_id + 6, 5);
            base36(i % SERVICES_PER_CIRCUIT, service_id + 13, 4);
            uint64_t s = batch_seed(seed, i, k);
            qw_batchlist_sample_id(s, batch_id);
            uint8_t *payload = NULL;
            size_t len = 0;
            if (qw_batchlist_sample(batch_id, s, &payload, &len) != 0) {
                fprintf(stderr, "queuer-gen: out of memory\n");
                return 70;
            }
            if (2 * len + 1 > hex_cap) {
                hex_cap = 2 * len + 1;
                char *grown = realloc(hex, hex_cap);
                if (!grown) {
                    fprintf(stderr, "queuer-gen: out of memory\n");
                    return 70;
                }
                hex = grown;
            }
            qw_hex_encode(payload, len, hex);
            free(payload);
            if (printf("%s\t%s\t%s\n", service_id, batch_id, hex) < 0) {
                perror("queuer-gen: stdout");
                return 74;
            }
        }
    }
    free(hex);
    if (fflush(stdout) != 0) {
        perror("queuer-gen: stdout");
        return 74;
    }
    return 0;
}
