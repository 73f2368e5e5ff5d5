/*
 * The nemesis schedule: a pure function from a seed and the cluster's
 * timing settings to an ordered list of faults (kind, target worker,
 * duration, the quiet gap after recovery, and a few seeded parameters the
 * driver uses at run time, such as which of the live sessions to kill).
 *
 * The same seed and options always give the same list, on any machine:
 * the generator has its own PRNG (splitmix64) and does no I/O, reads no
 * clock and keeps no state between calls. tests/nemesis/run.sh executes
 * the list; `qw-nemesis-plan` prints it.
 */
#ifndef QW_NEMESIS_PLAN_H
#define QW_NEMESIS_PLAN_H

#include <stddef.h>
#include <stdint.h>

/** Every fault the nemesis knows, in table order. */
enum qw_nem_kind {
    QW_NEM_WORKER_KILL9 = 0, /* SIGKILL a worker, restart it after duration_ms */
    QW_NEM_WORKER_STOP_05,   /* SIGSTOP a worker for 0.5 x lease, then SIGCONT */
    QW_NEM_WORKER_STOP_15,   /* ... 1.5 x lease */
    QW_NEM_WORKER_STOP_5,    /* ... 5 x lease */
    QW_NEM_PG_IMMEDIATE,     /* pg_ctl stop -m immediate, start after duration_ms */
    QW_NEM_PG_FAST,          /* pg_ctl stop -m fast, start after duration_ms */
    QW_NEM_PG_TERMINATE,     /* pg_terminate_backend of `count` worker sessions */
    QW_NEM_PG_BACKEND_STOP,  /* SIGSTOP one backend of a worker past its query deadline */
    QW_NEM_LEDGER_429,       /* 429 storm for duration_ms */
    QW_NEM_LEDGER_5XX,       /* 5xx at rate_permille for duration_ms */
    QW_NEM_LEDGER_HANG,      /* requests hang (past the HTTP timeout) at rate_permille */
    QW_NEM_LEDGER_RESTART,   /* the ledger forgets every status and queue */
    QW_NEM_LEDGER_MALFORMED, /* garbled JSON bodies at rate_permille for duration_ms */
    QW_NEM_NET_PARTITION,    /* cut the namespaced worker from the database */
    QW_NEM_CLOCK_SKEW,       /* run a worker under libfaketime for duration_ms */
    QW_NEM_KINDS             /* number of kinds */
};

/** Timing settings the durations derive from, all in milliseconds. */
struct qw_nem_timing {
    int lease_ms;         /* worker.lease_ms */
    int query_timeout_ms; /* database.query_timeout_ms (client-side deadline) */
    int http_timeout_ms;  /* dlt.request_timeout_ms */
};

/** What to generate. */
struct qw_nem_plan_opts {
    uint64_t seed;               /* the whole schedule is a function of it */
    struct qw_nem_timing timing; /* durations are multiples of these */
    int workers;                 /* host workers, targets 0..workers-1 (>= 1) */
    unsigned enabled;            /* bit (1u << kind) per kind to use; 0 = none */
    int repeat;                  /* > 0: every enabled kind exactly `repeat` times, shuffled */
    int count;                   /* repeat == 0: this many faults drawn at random */
};

/** One scheduled fault. */
struct qw_nem_fault {
    int seq;                /* 1-based position in the schedule */
    enum qw_nem_kind kind;  /* what to inject */
    int target;             /* host worker index, or -1 when the fault has no target */
    int duration_ms;        /* how long the fault lasts (0 = instantaneous) */
    int gap_ms;             /* quiet time after recovery, before the next fault */
    uint32_t pick;          /* seeded choice among live candidates (sessions, backends) */
    int count;              /* PG_TERMINATE: sessions to terminate (1..3) */
    int rate_permille;      /* LEDGER_5XX / _HANG / _MALFORMED: share of requests hit */
    int skew_offset_s;      /* CLOCK_SKEW: wall-clock offset, seconds (either sign) */
    int skew_rate_permille; /* CLOCK_SKEW: clock speed, 1000 = real time */
};

/** The kind's name as the driver and the tables spell it ("worker-kill9"). */
const char *qw_nem_kind_name(enum qw_nem_kind kind);

/** Parses a kind name; returns 0 and sets `out`, or -1 for an unknown name. */
int qw_nem_kind_parse(const char *name, enum qw_nem_kind *out);

/** True when the kind targets one host worker (target >= 0). */
int qw_nem_kind_has_target(enum qw_nem_kind kind);

/**
 * Fills `out` (capacity `cap`) with the schedule and sets `*n`. With
 * `repeat` > 0 the list holds every enabled kind `repeat` times in a seeded
 * order; otherwise `count` faults of enabled kinds drawn uniformly. Returns
 * 0, or -1 when the options are invalid (no kind enabled, workers < 1,
 * a timing value <= 0) or `cap` is too small. Pure.
 */
int qw_nem_plan(const struct qw_nem_plan_opts *o, struct qw_nem_fault *out, size_t cap, size_t *n);

#endif
