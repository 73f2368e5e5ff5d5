/*
 * Command-line options of scabbard-sim: defaults, parsing and usage text.
 * Parsing is pure (no file is read; --token-file is only recorded).
 */
#ifndef QW_SIM_OPTIONS_H
#define QW_SIM_OPTIONS_H

#include "common/log.h"
#include "faults.h"
#include "ledger.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Exit status for bad usage (BSD EX_USAGE). */
#define QW_SIM_EXIT_USAGE 64
/** Most nodes (--listen addresses) one simulator serves. */
#define QW_SIM_NODES_MAX 16
/** Most circuits or services one --node-hosts names for a node. */
#define QW_SIM_HOSTS_MAX 32

/** One node: an address of the same ledger. */
struct qw_sim_listen {
    char host[256];     /* address to bind, brackets stripped */
    int port;           /* 0..65535, 0 = any free port */
    int64_t latency_ms; /* extra latency of every answer of this node, ms */
    char hosts[QW_SIM_HOSTS_MAX][QW_SIM_SERVICE_KEY_MAX]; /* circuits ("ccccc-ccccc") or services
                                                             ("ccccc-ccccc::ssss") it runs */
    size_t n_hosts;                                       /* entries in hosts; 0 = every service */
};

/** Whose batch history a status query reads (--history). */
enum qw_sim_history_mode {
    QW_SIM_HISTORY_PER_NODE = 0, /* the node's own: what was posted to it, and peers' commits */
    QW_SIM_HISTORY_SHARED,       /* one status memory that every node reports */
};

struct qw_sim_options {
    struct qw_sim_listen listen[QW_SIM_NODES_MAX]; /* nodes, in --listen order */
    size_t n_listen;                               /* nodes, >= 1 */
    const char *port_file;              /* write the bound ports here (one a line), NULL = don't */
    struct qw_sim_ledger_config ledger; /* queue limits, delay, steps, memory */
    const char *token;                  /* required bearer token, NULL = none */
    const char *token_file;             /* file holding the token, NULL = none */
    uint64_t seed;                      /* fault PRNG seed */
    bool seed_set;                      /* --seed was given */
    struct qw_sim_fault_config faults;  /* initial fault settings */
    const char *event_log;              /* NDJSON event log path, NULL = none */
    int threads;                        /* HTTP worker threads */
    int64_t hang_max_ms;                /* longest a hung request is held, milliseconds */
    enum qw_log_level log_level;        /* stderr log threshold */
    int64_t node_latency_ms[QW_SIM_NODES_MAX]; /* --node-latency-ms values by node index */
    bool node_latency_set[QW_SIM_NODES_MAX];   /* ... given for that index */
    const char *node_hosts[QW_SIM_NODES_MAX];  /* --node-hosts lists by node index (into argv) */
    enum qw_sim_history_mode history;          /* --history */
    int64_t propagation_ms;                    /* a commit reaches the other nodes this late, ms */
    bool unknown_answers;                      /* --unknown-wait answer: a wait ends when no
                                                  listed id is queued (Unknown counts as settled) */
    int64_t wait_poll_ms;                      /* a long poll looks at the history this often,
                                                  ms; 0 = reacts to every change at once */
    int protocol;                              /* scabbard protocol version: 1 (never 429) or 2 */
    bool help;                                 /* --help: print usage, exit 0 */
    bool version;                              /* --version: print version, exit 0 */
};

/** Fills `o` with the defaults. */
void qw_sim_options_defaults(struct qw_sim_options *o);

/**
 * Parses `argv` into `o` (defaults first). Returns QW_OK, or
 * QW_ERR_INVALID with a one-line reason in `err`; `*show_usage` is set when
 * the usage text should follow (unknown option, missing argument, stray
 * argument). Strings in `o` point into `argv`. Not thread-safe (getopt).
 */
int qw_sim_options_parse(int argc, char **argv, struct qw_sim_options *o, bool *show_usage,
                         char *err, size_t errlen);

/** Prints the usage text. */
void qw_sim_options_usage(FILE *out, const char *prog);

#endif
