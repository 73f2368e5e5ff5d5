/*
 * scabbard-sim: main(). Parses options, starts the engine and the nodes
 * (one HTTP layer per --listen address, nodes.h), then waits for signals on the main thread with
 * sigwait() (every other thread has them blocked): SIGHUP wipes the ledger,
 * SIGTERM/SIGINT stop cleanly.
 */
#include "common/err.h"
#include "common/log.h"
#include "engine.h"
#include "evlog.h"
#include "http.h"
#include "nodes.h"
#include "options.h"
#include "simclock.h"
#include "stats.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Reads the bearer token from `path` (trailing whitespace dropped) into a
 * malloc'd string. Returns NULL with `err` set on failure. */
static char *read_token_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read --token-file %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[4097];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    bool more = fgetc(f) != EOF;
    fclose(f);
    buf[n] = '\0';
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (more || n == 0 || strlen(buf) != n) {
        snprintf(err, errlen, "--token-file %s must hold one token of 1..4096 bytes", path);
        return NULL;
    }
    char *token = strdup(buf);
    if (!token)
        snprintf(err, errlen, "out of memory");
    return token;
}

/* Writes the `n` ports to `path`, one a line, atomically (temp file + rename). */
static int write_port_file(const char *path, const int *ports, size_t n)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return QW_ERR_INVALID;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return QW_ERR_IO;
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok = fprintf(f, "%d\n", ports[i]) > 0 && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return QW_ERR_IO;
    }
    return QW_OK;
}

/* Lets many keep-alive connections in: raise the soft fd limit to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static uint64_t default_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
           ((uint64_t)getpid() << 32);
}

int main(int argc, char **argv)
{
    qw_log_init(QW_LOG_INFO, "sim");
    struct qw_sim_options opt;
    bool show_usage = false;
    char err[512];
    if (qw_sim_options_parse(argc, argv, &opt, &show_usage, err, sizeof(err)) != QW_OK) {
        fprintf(stderr, "scabbard-sim: %s\n", err);
        if (show_usage)
            qw_sim_options_usage(stderr, "scabbard-sim");
        return QW_SIM_EXIT_USAGE;
    }
    if (opt.help) {
        qw_sim_options_usage(stdout, "scabbard-sim");
        return 0;
    }
    if (opt.version) {
        printf("scabbard-sim %s\n", QW_VERSION);
        return 0;
    }
    qw_log_init(opt.log_level, "sim");

    char *token = NULL;
    if (opt.token_file) {
        token = read_token_file(opt.token_file, err, sizeof(err));
        if (!token) {
            fprintf(stderr, "scabbard-sim: %s\n", err);
            return QW_SIM_EXIT_USAGE;
        }
    } else if (opt.token) {
        token = strdup(opt.token);
    }
    if (!opt.seed_set)
        opt.seed = default_seed();

    /* Signals go to the main thread's sigwait(); block them before any
     * thread starts so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    qw_sim_clock_init();

    int exit_code = 1;
    int ports[QW_SIM_NODES_MAX] = {0};
    int rc;
    struct qw_sim_evlog *evlog = NULL;
    struct qw_sim_engine *engine = NULL;
    struct qw_sim_nodes *nodes = NULL;
    static struct qw_sim_stats stats;
    struct qw_sim_http_config hc = {
        .threads = opt.threads,
        .token = token,
        .hang_max_ms = opt.hang_max_ms,
        .stats = &stats,
        .faults = opt.faults,
        .seed = opt.seed,
    };

    if (opt.event_log && qw_sim_evlog_open(opt.event_log, qw_sim_clock_now_us, &evlog) != QW_OK) {
        qw_log_error("sim.evlog.open_failed", "path=%s error=\"%s\"", opt.event_log,
                     strerror(errno));
        goto out;
    }
    struct qw_sim_engine_config ec = {
        .ledger = opt.ledger,
        .nodes = opt.n_listen,
        .per_node = opt.history == QW_SIM_HISTORY_PER_NODE,
        .propagation_us = opt.propagation_ms * 1000,
        .unknown_settles = opt.unknown_answers,
        .wait_poll_us = opt.wait_poll_ms * 1000,
    };
    rc = qw_sim_engine_start(&ec, evlog, &stats, &engine);
    if (rc != QW_OK) {
        qw_log_error("sim.engine.start_failed", "error=\"%s\"", qw_strerror(rc));
        goto out;
    }
    hc.engine = engine;
    rc = qw_sim_nodes_start(&opt, &hc, &nodes, ports);
    if (rc != QW_OK) {
        qw_log_error("sim.http.start_failed", "error=\"%s\"", qw_strerror(rc));
        goto out;
    }
    for (size_t i = 0; i < opt.n_listen; i++)
        qw_log_info("sim.listening",
                    "node=%zu host=%s port=%d latency_ms=%lld hosts=%zu seed=%llu protocol=%d "
                    "queue_high=%zu queue_low=%zu commit_delay_ms=%lld valid_step=%d "
                    "history=%s status_memory=%zu propagation_ms=%lld unknown_wait=%s "
                    "wait_poll_ms=%lld auth=%s threads=%d",
                    i, opt.listen[i].host, ports[i], (long long)opt.listen[i].latency_ms,
                    opt.listen[i].n_hosts, (unsigned long long)opt.seed, opt.protocol,
                    opt.ledger.queue_high, opt.ledger.queue_low,
                    (long long)(opt.ledger.commit_delay_us / 1000), opt.ledger.valid_step,
                    ec.per_node ? "per-node" : "shared", opt.ledger.status_memory,
                    (long long)opt.propagation_ms, ec.unknown_settles ? "answer" : "hang",
                    (long long)opt.wait_poll_ms, token ? "bearer" : "none", opt.threads);
    if (opt.port_file && write_port_file(opt.port_file, ports, opt.n_listen) != QW_OK) {
        qw_log_error("sim.port_file.failed", "path=%s error=\"%s\"", opt.port_file,
                     strerror(errno));
        goto out;
    }

    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            qw_sim_engine_restart(engine, "sighup");
            continue;
        }
        qw_log_info("sim.stopping", "signal=%d", sig);
        break;
    }
    exit_code = 0;

out:
    if (engine)
        qw_sim_engine_shutdown(engine);
    qw_sim_nodes_stop(nodes);
    qw_sim_engine_free(engine);
    qw_sim_evlog_close(evlog);
    free(token);
    if (exit_code == 0)
        qw_log_info("sim.stopped", NULL);
    return exit_code;
}
