/*
 * Fault injection for the simulator: the fault settings, their parsers
 * (command line and JSON), a seeded PRNG and the per-request decision.
 * Pure: the caller passes the time and owns the PRNG; it serialises calls
 * that share one PRNG.
 */
#ifndef QW_SIM_FAULTS_H
#define QW_SIM_FAULTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Every fault is off when its rate is 0. Rates are probabilities 0..1. */
struct qw_sim_fault_config {
    double rate_5xx;        /* answer 500 or 503 */
    double rate_drop;       /* close the connection without answering */
    double rate_429;        /* extra 429 on batch submissions */
    int64_t burst_every_ms; /* 429 storm period, 0 = off */
    int64_t burst_len_ms;   /* storm length at the end of each period, <= every */
    double rate_slow;       /* answer late */
    int64_t slow_ms;        /* how late, milliseconds */
    double rate_hang;       /* never answer; hold the connection */
    double rate_malformed;  /* truncated/garbage JSON bodies (202 and statuses) */
};

/** xoshiro256** state. */
struct qw_sim_prng {
    uint64_t s[4]; /* never all zero */
};

/** Seeds `p` from `seed` (any value, 0 included) with splitmix64. */
void qw_sim_prng_seed(struct qw_sim_prng *p, uint64_t seed);

/** Next 64 random bits. */
uint64_t qw_sim_prng_next(struct qw_sim_prng *p);

/** Uniform double in [0, 1). */
double qw_sim_prng_unit(struct qw_sim_prng *p);

enum qw_sim_fault_action {
    QW_SIM_FAULT_NONE = 0, /* answer normally (maybe slow / malformed) */
    QW_SIM_FAULT_DROP,     /* close without answer */
    QW_SIM_FAULT_HANG,     /* hold the connection, never answer */
    QW_SIM_FAULT_5XX,      /* answer `http_status` 500 or 503 */
    QW_SIM_FAULT_429,      /* answer 429 with an empty body (submissions only) */
};

/** What to do with one request. */
struct qw_sim_fault_decision {
    enum qw_sim_fault_action action; /* main fault */
    int http_status;                 /* 500/503 for 5XX, 429 for 429, else 0 */
    bool burst;                      /* the 429 comes from a storm */
    bool accept_first;               /* DROP/HANG on a submission: ledger takes it first */
    int64_t slow_ms;                 /* delay before answering, 0 = none */
    bool malformed;                  /* garble the JSON body */
    uint64_t garble;                 /* random bits choosing how to garble */
};

/**
 * Decides the faults for one request. `is_submission` enables the 429
 * faults; `since_ms` is the time since the fault settings were last changed
 * (the storm phase). Draws the same number of PRNG values whatever the
 * outcome, so a seed replays the same sequence of decisions.
 */
void qw_sim_fault_decide(const struct qw_sim_fault_config *cfg, struct qw_sim_prng *prng,
                         bool is_submission, int64_t since_ms, struct qw_sim_fault_decision *out);

/** True while a 429 storm is on at `since_ms` (see README: end of each period). */
bool qw_sim_fault_in_burst(const struct qw_sim_fault_config *cfg, int64_t since_ms);

/**
 * Parses a rate "0".."1" (decimal). Returns QW_OK or QW_ERR_INVALID.
 */
int qw_sim_fault_parse_rate(const char *text, double *out);

/** Parses "RATE:MS" for --fault-slow. Returns QW_OK or QW_ERR_INVALID. */
int qw_sim_fault_parse_slow(const char *text, double *rate, int64_t *ms);

/**
 * Parses "EVERY_MS:LEN_MS" for --fault-429-burst (LEN <= EVERY; "0:0"
 * turns it off). Returns QW_OK or QW_ERR_INVALID.
 */
int qw_sim_fault_parse_burst(const char *text, int64_t *every_ms, int64_t *len_ms);

/**
 * Applies a JSON object of changes to `cfg`: keys are the option names
 * without the leading dashes ("fault-5xx", "fault-drop", "fault-429",
 * "fault-429-burst", "fault-slow", "fault-hang", "fault-malformed"), values
 * numbers or the option's string form; "reset": true first turns every
 * fault off; "seed" is returned in `*seed`/`*seed_set` for the caller.
 * All-or-nothing: on error `cfg` is unchanged, `err` (size `errlen`) says
 * why and QW_ERR_INVALID is returned.
 */
int qw_sim_fault_apply_json(struct qw_sim_fault_config *cfg, const json_t *changes, uint64_t *seed,
                            bool *seed_set, char *err, size_t errlen);

/** Renders `cfg` as a JSON object with the same keys; NULL on allocation failure. */
json_t *qw_sim_fault_to_json(const struct qw_sim_fault_config *cfg);

#endif
