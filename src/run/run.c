/* `queuer run` process setup: instance, signals, threads; see run.h. */
#include "run/run.h"
#include "common/clock.h"
#include "common/log.h"
#include "db/db.h"
#include "db/migrate.h"
#include "dlt/dlt_client.h"
#include "queuer/claims.h"
#include "shared/job.h"
#include "queuer/queuer.h"
#include "shared/shared.h"
#include "submitter/submitter.h"
#include "run/reload.h"
#include "run/worker_admin.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

/* The worker the signal handler stops; set once before threads start. */
static struct qw_worker *signal_worker;

/* Only sets a flag and writes the wake fd: async-signal-safe. */
static void on_signal(int sig)
{
    struct qw_worker *w = signal_worker;
    if (sig == SIGHUP) {
        if (w) {
            atomic_store(&w->reload, 1);
            qw_worker_wake(w);
        }
        return;
    }
    if (!w)
        _exit(130);
    if (atomic_exchange(&w->stop, 1) != 0)
        _exit(130); /* second signal: exit now */
    qw_worker_wake(w);
}

static int install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: a reload must not make a blocking call fail with EINTR. */
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigaction(SIGHUP, &sa, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void make_instance_id(const struct qw_config *cfg, char *out, size_t len)
{
    if (cfg->worker_instance_id && cfg->worker_instance_id[0]) {
        snprintf(out, len, "%s", cfg->worker_instance_id);
        return;
    }
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    uint64_t r = (uint64_t)qw_clock_wall_ms() * 2654435761u ^ (uint64_t)getpid();
    snprintf(out, len, "%.40s-%d-%04x", host, (int)getpid(), (unsigned)(r & 0xffff));
}

/*
 * Keeps the incarnation a registration returned. When it replaced a
 * registration whose POSTs may still land (its process died or froze,
 * maybe while posting, or its stop abandoned POSTs), ours posts nothing
 * for a while: it holds that registration's claims at their epochs and
 * adopts its batches mid-submission at once, and a POST lands, if ever,
 * within dlt.request_timeout_ms of being sent. The earlier process sent
 * its last POST before each of: now (it is gone, or frozen past its
 * claims' deadlines, since we registered two leases after its heartbeat);
 * two leases after its last heartbeat (a claim another worker handed it
 * runs a lease past that worker's check of its lease); its stop, if it
 * stopped.
 */
static void keep_incarnation(struct qw_worker *w, struct qw_db_res *res)
{
    snprintf(w->incarnation, sizeof(w->incarnation), "%s", qw_db_res_get(res, 0, 1));
    if (qw_db_res_isnull(res, 0, 2))
        return;
    int64_t timeout_ms = w->cfg->dlt_request_timeout_ms, age_ms = qw_db_res_int(res, 0, 2);
    int64_t last_post_ms = strcmp(qw_db_res_get(res, 0, 3), "t") == 0
                               ? -age_ms
                               : 2 * (int64_t)w->cfg->worker_lease_ms - age_ms;
    if (last_post_ms > 0)
        last_post_ms = 0;
    int64_t wait_ms = last_post_ms + timeout_ms;
    if (wait_ms <= 0)
        return;
    w->posts_from_ms = qw_clock_mono_ms() + wait_ms;
    qw_log_info("instance.replaced",
                "posts_wait_ms=%lld heartbeat_age_ms=%lld reason=\"POSTs of the process this "
                "registration replaced may still reach the ledger\"",
                (long long)wait_ms, (long long)age_ms);
}

/*
 * Registers the instance with a new incarnation, refusing a live twin:
 * when the id is held by a registration with a fresh heartbeat, it is
 * taken over only if that registration is this host's and its process is
 * gone (a restart after a crash, or a container restarted with the same
 * pid). A registration older than two leases is taken over; its process,
 * if it was only frozen, finds itself superseded at its next lease renewal
 * and exits, and its fenced writes match nothing meanwhile.
 */
static int register_instance(struct qw_worker *w, struct qw_db *db, struct qw_error *err)
{
    char pid[16], liveness[16];
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(liveness, sizeof(liveness), "%d", 2 * w->cfg->worker_lease_ms);
    char host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    const char *params[] = {w->instance_id, host, pid, QW_VERSION, liveness, "false"};
    struct qw_db_res *res = NULL;
    int rc = qw_db_query(db, "instance_register", 6, params, &res, err);
    int registered = rc == QW_OK ? qw_db_res_rows(res) : 0;
    if (registered == 1)
        keep_incarnation(w, res);
    qw_db_res_free(res);
    if (rc != QW_OK || registered == 1)
        return rc;
    const char *lookup[] = {w->instance_id};
    rc = qw_db_query(db, "instance_lookup", 1, lookup, &res, err);
    if (rc != QW_OK)
        return rc;
    bool ours = false;
    char other_host[64] = "?";
    long long other_pid = 0, age_ms = 0;
    if (qw_db_res_rows(res) == 1) {
        snprintf(other_host, sizeof(other_host), "%s", qw_db_res_get(res, 0, 0));
        other_pid = qw_db_res_int(res, 0, 1);
        age_ms = qw_db_res_int(res, 0, 3);
        ours = strcmp(other_host, host) == 0 &&
               (other_pid == getpid() || (kill((pid_t)other_pid, 0) != 0 && errno == ESRCH));
    }
    qw_db_res_free(res);
    if (!ours)
        return qw_error_set(err, QW_ERR_CONFIG,
                            "worker.instance_id '%s' is in use by a live worker (host %s, pid "
                            "%lld, heartbeat %lld ms ago): give every worker its own id, or "
                            "wait until that one stops",
                            w->instance_id, other_host, other_pid, age_ms);
    params[5] = "true";
    rc = qw_db_query(db, "instance_register", 6, params, &res, err);
    if (rc == QW_OK && qw_db_res_rows(res) == 1)
        keep_incarnation(w, res);
    else if (rc == QW_OK)
        rc = qw_error_set(err, QW_ERR_DB, "instance %s: the registration returned no row",
                          w->instance_id);
    qw_db_res_free(res);
    if (rc == QW_OK)
        qw_log_info("instance.taken_over", "pid=%lld reason=\"its process on this host is gone\"",
                    other_pid);
    return rc;
}

/*
 * The connection that only LISTENs (database.listen_conninfo): a direct or
 * session-pooled one when the main conninfo goes through a transaction
 * pooler. It runs no statement of ours (none is prepared on it) and holds no
 * transaction, so it needs no server-side limits.
 */
static int connect_listener(const struct qw_config *cfg, struct qw_db **out, struct qw_error *err)
{
    struct qw_db_opts opts = {
        .conninfo = cfg->db_listen_conninfo,
        .password = cfg->db_password,
        .app_name = "queuer-listen",
        .connect_timeout_s = cfg->db_connect_timeout_s,
        .query_timeout_ms = cfg->db_query_timeout_ms,
    };
    int rc = qw_db_connect(out, &opts, err);
    if (rc != QW_OK && err)
        snprintf(err->msg + strlen(err->msg), sizeof(err->msg) - strlen(err->msg),
                 " (database.listen_conninfo)");
    return rc;
}

static int connect_queuer_db(struct qw_worker *w, struct qw_db **db, struct qw_db **listener,
                             struct qw_error *err)
{
    struct qw_db_opts opts;
    qw_worker_db_opts(w->cfg, "queuer-worker", &opts);
    int rc = qw_db_connect(db, &opts, err);
    if (rc != QW_OK)
        return rc;
    rc = qw_migrate_check(*db, NULL, err);
    if (rc == QW_OK)
        rc = register_instance(w, *db, err);
    bool listen = w->cfg->worker_listen;
    if (rc == QW_OK && listen && w->cfg->db_listen_conninfo[0])
        rc = connect_listener(w->cfg, listener, err);
    /* Our own channel (claims given to us, work for the services we hold)
     * and the claims changes that concern every worker. Listening after
     * registering loses nothing: we hold no claim yet, and the first
     * claims cycle reads them all. */
    struct qw_db *ldb = *listener ? *listener : *db;
    char channel[64];
    snprintf(channel, sizeof(channel), QW_CLAIMS_CHANNEL_PREFIX "%s", w->incarnation);
    if (rc == QW_OK && listen)
        rc = qw_db_listen(ldb, channel, err);
    if (rc == QW_OK && listen)
        rc = qw_db_listen(ldb, QW_CLAIMS_CHANNEL, err);
    if (rc == QW_OK)
        qw_claims_announce(*db); /* the others' share shrank: their surplus comes to us now */
    if (rc != QW_OK) {
        qw_db_close(*db);
        qw_db_close(*listener);
        *db = *listener = NULL;
    }
    return rc;
}

int qw_worker_run(const struct qw_config *cfg, const struct qw_worker_reload *reload,
                  struct qw_error *err)
{
    struct qw_worker *w = calloc(1, sizeof(*w));
    if (!w)
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    w->cfg = cfg;
    w->wake_fd = -1;
    if (reload) {
        w->reload_load = reload->load;
        w->reload_ctx = reload->ctx;
    }
    w->apply_reload = qw_worker_apply_reload;
    atomic_store(&w->pause_base_ms, cfg->dlt_pause_base_ms);
    atomic_store(&w->pause_max_ms, cfg->dlt_pause_max_ms);
    atomic_store(&w->waiting_priority, QW_PRIORITY_NONE);
    atomic_store(&w->yield_below, QW_PRIORITY_NONE);
    w->admin_cfg = *cfg;
    w->admin_cfg.admin_listen = strdup(cfg->admin_listen);
    if (!w->admin_cfg.admin_listen) {
        free(w);
        return qw_error_set(err, QW_ERR_NOMEM, "out of memory");
    }
    make_instance_id(cfg, w->instance_id, sizeof(w->instance_id));
    enum qw_log_level level = QW_LOG_INFO;
    if (qw_log_level_parse(cfg->log_level, &level) != QW_OK)
        level = QW_LOG_INFO; /* config.c accepts only the four names */
    qw_log_init(level, w->instance_id);
    qw_log_set_thread("queuer");

    struct qw_db *db = NULL, *listener = NULL;
    int rc = qw_dlt_global_init();
    if (rc != QW_OK)
        qw_error_set(err, rc, "cannot initialise libcurl");
    if (rc == QW_OK) {
        w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (w->wake_fd < 0)
            rc = qw_error_set(err, QW_ERR_IO, "eventfd: %s", strerror(errno));
    }
    size_t jobs_cap =
        (size_t)(cfg->worker_queue_capacity > cfg->dlt_max_in_flight ? cfg->worker_queue_capacity
                                                                     : cfg->dlt_max_in_flight);
    if (rc == QW_OK)
        rc = qw_handoff_create(&w->jobs, jobs_cap, err);
    if (rc == QW_OK)
        rc = qw_handoff_create(&w->done, jobs_cap + (size_t)cfg->dlt_max_in_flight + 16, err);
    if (rc == QW_OK)
        rc = connect_queuer_db(w, &db, &listener, err);
    if (rc == QW_OK) {
        signal_worker = w;
        if (install_signals() != 0)
            rc = qw_error_set(err, QW_ERR_IO, "cannot install signal handlers");
    }
    if (rc == QW_OK)
        rc = qw_worker_admin_start(&w->admin_cfg, w, &w->stats.ops, &w->admin, err);
    pthread_t submitter;
    if (rc == QW_OK)
        rc = qw_submitter_start(w, &submitter, err);
    if (rc == QW_OK) {
        qw_log_info("worker.started",
                    "version=%s incarnation=%s lease_ms=%d hard_expiry_ms=%d cycle_ms=%d "
                    "listen=%d listener=%d max_in_flight=%d",
                    QW_VERSION, w->incarnation, cfg->worker_lease_ms, cfg->worker_hard_expiry_ms,
                    cfg->worker_cycle_ms, cfg->worker_listen, listener != NULL,
                    cfg->dlt_max_in_flight);
        rc = qw_queuer_run(w, db, listener, submitter, err);
        struct qw_worker_stats *st = &w->stats;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        qw_log_info("worker.summary",
                    "accepted=%lld committed=%lld valid=%lld invalid=%lld backpressure=%lld "
                    "retries=%lld unknown=%lld lost=%lld flushes=%lld outcomes=%lld "
                    "serialization_retries=%lld cycles=%lld cpu_user_ms=%ld cpu_sys_ms=%ld "
                    "max_rss_kb=%ld",
                    (long long)st->posts_accepted, (long long)st->final_committed,
                    (long long)st->final_valid, (long long)st->final_invalid,
                    (long long)st->posts_backpressure, (long long)st->posts_retry,
                    (long long)st->unknown_confirmed, (long long)st->lost, (long long)st->flushes,
                    (long long)st->outcomes, (long long)st->serialization_retries,
                    (long long)st->cycles,
                    (long)(ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000),
                    (long)(ru.ru_stime.tv_sec * 1000 + ru.ru_stime.tv_usec / 1000), ru.ru_maxrss);
    }
    qw_worker_admin_stop(w->admin);
    qw_db_close(db);
    qw_db_close(listener);
    if (w->jobs)
        qw_handoff_destroy(w->jobs, (void (*)(void *))qw_job_free);
    if (w->done)
        qw_handoff_destroy(w->done, (void (*)(void *))qw_job_free);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    signal_worker = NULL;
    free(w->admin_cfg.admin_listen);
    free(w);
    return rc;
}
