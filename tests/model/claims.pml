/*
 * The claims protocol (docs/CLAIMS.md, docs/DESIGN.md sections 4-5) as a
 * Promela model for SPIN. It checks, over every interleaving of a bounded
 * configuration, that the ledger sees each service's batches in creation
 * order with at most one of them in flight: when a POST of batch k of a
 * service lands, every earlier batch of that service is final at the
 * ledger and no later one has arrived (a repeat of batch k itself is
 * allowed: the ledger recognises it).
 *
 * Every action is one atomic step and stands for one SQL statement under
 * the row locks it takes (the statement's per-row decision on the newest
 * row version) or one decision of the worker's C code; the comment above
 * each names the file or function. The model keeps what decides who may
 * write and post: claim rows (claimant, epoch, expiry_1/2), instance rows
 * (incarnation, lease_1/2, heartbeat, stopped), batch rows, the worker's
 * jobs and lease deadline, the network and the ledger. Notifications,
 * fair shares, priorities, capacity, back pressure and grouping are left
 * out: they only decide *when* a worker acts, and the model lets every
 * worker act at any moment.
 *
 * Time is a shared clock of ticks. A frozen worker takes no step while the
 * clock runs. A POST lands at the ledger (or is lost) at most FLIGHT ticks
 * after it is sent; the clock does not pass a POST's last tick before it
 * did. Worker p runs as instance INST(p): processes 0 and 2 share
 * instance 0 (process 2 is a second process started with the same
 * worker.instance_id on another host).
 *
 * Configuration (spin -D...): NP processes (2 or 3), NS services (1 or 2),
 * NB batches per service (at most 3), LEASE, HARD, FLIGHT (< HARD - LEASE,
 * as check-config demands of dlt.request_timeout_ms), CONFIRM
 * (dlt.unknown_confirm_ms), TMAX (the last tick), EMAX (epochs at most),
 * MAXREG (registrations at most), FMAX (faults at most).
 * tests/model/spin_claims.sh runs the configuration of the test suite.
 *
 * Variants that break one rule of the protocol (the check must fail):
 *   BROKEN_FENCE    the mark and outcome fences do not compare claimant and
 *                   epoch (held and incarnation still checked)
 *   BROKEN_WINDOW   the submitter posts whatever its lease deadline
 *   BROKEN_SOFT     maintenance takes a claim at its soft expiry even with
 *                   a batch mid-submission
 *   BROKEN_RESTART  a registration that replaced one whose POSTs may still
 *                   land posts at once
 *   BROKEN_STOP     a stop that abandoned POSTs gives back every claim,
 *                   mid-submission or not
 *   BROKEN_NAME     an outcome that takes its batch out of flight leaves the
 *                   claim row naming it (the check that the row names
 *                   exactly the batch in flight must fail)
 * Variants of the environment (both on in the test suite: they are what
 * the worker does):
 *   RESTART_TAKEOVER  a crashed process restarted on the same host takes
 *                     its registration over at once (instance_register.sql
 *                     with $6 true), not only after two leases
 *   STOP_ABANDONS     a graceful stop may end with POSTs still in flight
 *                     (worker.shutdown_grace_ms shorter than a POST)
 */

#ifndef NP
#define NP 3
#endif
#ifndef NS
#define NS 1
#endif
#ifndef NB
#define NB 3
#endif
#ifndef LEASE
#define LEASE 2
#endif
#ifndef HARD
#define HARD 6
#endif
#ifndef FLIGHT
#define FLIGHT 3
#endif
#ifndef CONFIRM
#define CONFIRM 1
#endif
#ifndef TMAX
#define TMAX 7
#endif
#ifndef EMAX
#define EMAX 5
#endif
#ifndef MAXREG
#define MAXREG 3
#endif
#ifndef FMAX
#define FMAX 2
#endif

#define NI 2                 /* instance ids */
#define NNET 2               /* POSTs on the wire at once */
#define LIVENESS (2 * LEASE) /* run.c register_instance(): two leases */
#define NOBODY 255

#define INST(p) ((p) == 1 -> 1 : 0)
#define BI(s, k) ((s) * NB + (k))
#define JI(p, s) ((p) * NS + (s))

/* batch rows: status and submitted together */
#define B_NEW 0   /* no status, not submitted */
#define B_SUB 1   /* submitted, no status: mid-submission */
#define B_PEND 2  /* Pending */
#define B_FINAL 3 /* Committed, Valid or Invalid */
#define B_RETRY 4 /* Delayed or Unknown, not submitted */

/* the ledger's view of a batch */
#define L_NONE 0
#define L_PEND 1
#define L_FINAL 2

/* a job of process p for service s (src/queuer/queue_txn.c, src/submitter/) */
#define J_NONE 0
#define J_READY 1       /* marked; POST due while now < jt (its lease deadline) */
#define J_POSTED 2      /* POST on the wire */
#define J_FOLLOW 3      /* status polls; jt = when Unknown was first seen, 0 = not */
#define J_REC_REQUEUE 4 /* outcomes to write (outcomes_record.sql) */
#define J_REC_DELAYED 5
#define J_REC_PENDING 6
#define J_REC_FINAL 7
#define J_REC_UNKNOWN 8

byte now = 1; /* 0 stands for NULL / -infinity in the time columns */

/* queuer.instances */
byte inc[NI];     /* incarnation, 0 = no row */
byte lease1[NI];
byte lease2[NI];
byte hb[NI];      /* heartbeat_at */
bool stopped[NI];
byte regp[NI];    /* the process the registration belongs to (its host and pid) */
byte incctr;      /* queuer.instance_incarnation */
byte faults;      /* freezes, crashes and stops so far (at most FMAX) */

/* queuer.service_id_claims */
byte claimant[NS];
byte epoch[NS];
byte e1[NS];
byte e2[NS];
byte infl[NS]; /* in_flight: the batch in flight, NB = none (migration 0043) */

/* queuer.batches: created[s] batches exist, in creation order */
byte created[NS];
byte bst[NS * NB];

/* the ledger */
byte led[NS * NB];

/* POSTs on the wire: net_by = the last tick it may land, 0 = slot free */
byte net_s[NNET];
byte net_k[NNET];
byte net_by[NNET];
byte net_p[NNET];
byte net_inc[NNET];

/* processes: the incarnation each runs as (0 = not running) */
byte pinc[NP];
bool frozen[NP];
bool crashed[NP];
byte pdl[NP];     /* queuer.c: lease_deadline_ms, our claims surely held before it */
byte pfrom[NP];   /* run.c keep_incarnation: posts_from_ms, no POST before it */

/* jobs */
byte jph[NP * NS];
byte jk[NP * NS];
byte jep[NP * NS];
byte jt[NP * NS];

/* scratch: only used inside one atomic step, never stored */
hidden byte h_k;
hidden byte h_j;

#define HELD(s, i) (e1[s] > now || lease1[i] > now)
#define LIVE(i) (lease1[i] > now && !stopped[i])
#define RUNS(p) (pinc[p] != 0 && !frozen[p])
/* claims_acquire.sql `live`: instance j may receive. The caller's own
 * lease runs: its claims cycle renewed it just before (queuer.c
 * claims_step) and a claims transaction lasts at most half a lease. */
#define PICKS(p, j) (!stopped[j] && (lease1[j] > now || \
                                     (lease1[j] == 0 && hb[j] + LEASE > now)))

#ifdef BROKEN_FENCE
#define FENCE(p, s, ep) (HELD(s, INST(p)) && inc[INST(p)] == pinc[p])
#else
/* claimant = me AND claim_epoch = my epoch AND greatest(expiry_1, lease_1) > now()
 * AND my incarnation (batches_mark.sql, outcomes_record.sql `fence`) */
#define FENCE(p, s, ep) (claimant[s] == INST(p) && epoch[s] == (ep) && HELD(s, INST(p)) && \
                         inc[INST(p)] == pinc[p])
#endif

#define SLOT_DUE(x) (net_by[x] != 0 && net_by[x] <= now)
#define MY_POST(x, p, s) (net_by[x] != 0 && net_p[x] == (p) && net_inc[x] == pinc[p] && \
                          net_s[x] == (s))

/* the claim row's `submitting`: a batch of the service is mid-submission
 * (kept exact by the trigger on batches, migrations/0020_coordination.sql
 * claims_follow_batches); and whether the service has work (n_in - n_out
 * > 0). Batch slots not yet created stay B_NEW. */
#if NB > 2
#define SUBMITTING(s) (bst[BI(s, 0)] == B_SUB || bst[BI(s, 1)] == B_SUB || bst[BI(s, 2)] == B_SUB)
#define HAS_WORK(s) ((created[s] > 0 && bst[BI(s, 0)] != B_FINAL) || \
                     (created[s] > 1 && bst[BI(s, 1)] != B_FINAL) || \
                     (created[s] > 2 && bst[BI(s, 2)] != B_FINAL))
#else
#define SUBMITTING(s) (bst[BI(s, 0)] == B_SUB || bst[BI(s, 1)] == B_SUB)
#define HAS_WORK(s) ((created[s] > 0 && bst[BI(s, 0)] != B_FINAL) || \
                     (created[s] > 1 && bst[BI(s, 1)] != B_FINAL))
#endif

/* The state of service 0 after a step, for reading a trail (spin -t):
 * claimant and epoch, expiries, the instances' leases, the batch rows
 * (0 new, 1 mid-submission, 2 Pending, 3 final, 4 Delayed/Unknown), the
 * ledger (0 none, 1 Pending, 2 final) and the jobs of processes 0 and 1
 * (phase:batch:deadline). Prints only in simulation. */
inline print_state() {
    printf("MSC:   claim=%d/%d e=%d/%d lease0=%d/%d lease1=%d/%d", claimant[0], epoch[0],
           e1[0], e2[0], lease1[0], lease2[0], lease1[1], lease2[1]);
    printf(" rows=%d%d%d ledger=%d%d%d", bst[BI(0, 0)], bst[BI(0, 1)], bst[BI(0, NB - 1)],
           led[BI(0, 0)], led[BI(0, 1)], led[BI(0, NB - 1)]);
    printf(" job0=%d:%d:%d job1=%d:%d:%d\n", jph[JI(0, 0)], jk[JI(0, 0)], jt[JI(0, 0)],
           jph[JI(1, 0)], jk[JI(1, 0)], jt[JI(1, 0)])
}

/* h_k := the service's oldest non-final batch, NB if none */
inline head(s) {
    h_k = 0;
    do
    :: h_k < created[s] && bst[BI(s, h_k)] == B_FINAL -> h_k++
    :: else -> break
    od;
    if
    :: h_k == created[s] -> h_k = NB
    :: else -> skip
    fi
}

/* h_k := a batch in flight (submitted without status, or Pending), NB if none */
inline in_flight(s) {
    h_k = 0;
    do
    :: h_k < created[s] && bst[BI(s, h_k)] != B_SUB && bst[BI(s, h_k)] != B_PEND -> h_k++
    :: else -> break
    od;
    if
    :: h_k == created[s] -> h_k = NB
    :: else -> skip
    fi
}

/* The claim row names exactly the service's batch in flight (or none):
 * checked after every step that writes batch rows. */
inline named_exact(s) {
    in_flight(s);
    assert(h_k == infl[s]);
    h_k = 0
}

/* An outcome takes batch k out of flight: the claim row no longer names it. */
#ifdef BROKEN_NAME
#define UNNAME(s, k) skip
#else
#define UNNAME(s, k) if :: infl[s] == (k) -> infl[s] = NB :: else -> skip fi
#endif

inline drop_jobs(p) {
    jph[JI(p, 0)] = J_NONE; jk[JI(p, 0)] = 0; jep[JI(p, 0)] = 0; jt[JI(p, 0)] = 0;
#if NS > 1
    jph[JI(p, 1)] = J_NONE; jk[JI(p, 1)] = 0; jep[JI(p, 1)] = 0; jt[JI(p, 1)] = 0;
#endif
}

/* a claim handed to a live instance (maintenance, pickup): epoch + 1, fresh expiries */
inline give(s, j) {
    claimant[s] = j;
    epoch[s]++;
    e1[s] = now + LEASE;
    e2[s] = now + HARD
}

/* the worker has no POST on the wire (s->posting == 0) */
#define NO_POSTS(p) (!(net_by[0] != 0 && net_p[0] == (p) && net_inc[0] == pinc[p]) && \
                     !(net_by[1] != 0 && net_p[1] == (p) && net_inc[1] == pinc[p]))

/* run.c keep_incarnation: a registration that replaced one whose POSTs
 * may still land posts nothing until a request timeout after the last
 * moment the earlier process may have posted: now, or two leases after its
 * last heartbeat h if that is sooner, or h itself if it stopped (h is the
 * stop). In ticks: a POST sent in tick t lands by tick t + FLIGHT,
 * possibly after a POST in that same tick that real time would order
 * after it; so + 1. */
#ifdef BROKEN_RESTART
#define RESTART_WAIT(h, stop) 0
#else
#define LAST_POST(h, stop) ((stop) -> (h) : ((h) + 2 * LEASE < now -> (h) + 2 * LEASE : now))
#define RESTART_WAIT(h, stop) (LAST_POST(h, stop) + FLIGHT + 1)
#endif

/* instance i holds a claim whose service has a batch mid-submission */
#if NS > 1
#define HOLDS_SUBMITTING(i) ((claimant[0] == (i) && SUBMITTING(0)) || \
                             (claimant[1] == (i) && SUBMITTING(1)))
#else
#define HOLDS_SUBMITTING(i) (claimant[0] == (i) && SUBMITTING(0))
#endif

/* claims_release_all.sql: after a stop that abandoned POSTs (submitter.c
 * posts_abandoned), a claim with a batch mid-submission stays, for
 * maintenance at the hard expiry */
#ifdef BROKEN_STOP
#define KEEPS_AT_STOP(s, abandoned) false
#else
#define KEEPS_AT_STOP(s, abandoned) ((abandoned) && SUBMITTING(s))
#endif

/* dispatch.c: a POST starts only before the job's lease deadline */
#ifdef BROKEN_WINDOW
#define IN_WINDOW(p, s) true
#else
#define IN_WINDOW(p, s) (now < jt[JI(p, s)])
#endif

/* claims_maintain.sql: past the hard expiry (greatest(expiry_2, lease_2))
 * always, past the soft one only with no batch mid-submission */
#ifdef BROKEN_SOFT
#define MAY_TAKE(s) true
#else
#define MAY_TAKE(s) (!SUBMITTING(s) || (e2[s] < now && lease2[claimant[s]] < now))
#endif

/* run.c register_instance(): the registration is this host's and its process is gone */
#ifdef RESTART_TAKEOVER
#define SAME_HOST_GONE(p) (crashed[p] && regp[INST(p)] == (p))
#else
#define SAME_HOST_GONE(p) false
#endif

/* submitter.c submitter_loop: a stop waits for the POSTs on the wire */
#ifdef STOP_ABANDONS
#define STOP_WAITS(p) true
#else
#define STOP_WAITS(p) NO_POSTS(p)
#endif

/* Process-wide steps of process p: registration, lease, stop. */
proctype Proc(byte p) {
end:
    do
    /* instance_register.sql (run.c register_instance): a new incarnation
     * when the id is free, stopped, or its heartbeat older than two leases
     * (or, with RESTART_TAKEOVER, when the registration is this host's and
     * its process is gone). The lease columns are left as they are. A
     * registration that replaced one that did not stop, or that stopped
     * keeping a claim mid-submission, waits before it posts (RESTART_WAIT). */
    :: atomic {
        pinc[p] == 0 && incctr < MAXREG && (p != 2 || inc[0] != 0) &&
        (inc[INST(p)] == 0 || stopped[INST(p)] || hb[INST(p)] + LIVENESS < now ||
         SAME_HOST_GONE(p)) ->
        if
        :: inc[INST(p)] != 0 && (!stopped[INST(p)] || HOLDS_SUBMITTING(INST(p))) ->
           pfrom[p] = RESTART_WAIT(hb[INST(p)], stopped[INST(p)])
        :: else -> pfrom[p] = 0
        fi;
        incctr++;
        inc[INST(p)] = incctr;
        hb[INST(p)] = now;
        stopped[INST(p)] = false;
        regp[INST(p)] = p;
        pinc[p] = incctr;
        pdl[p] = 0;
        crashed[p] = false
        ; printf("MSC: t%d register p%d\n", now, p); print_state()
       }
    /* claims_lease.sql (queuer.c renew_lease): matches our incarnation only.
     * The lease deadline (queuer.c claims_cycle) is at most lease_1. No row:
     * superseded (queuer.c superseded()): stop posting, exit 76. */
    :: atomic {
        RUNS(p) ->
        if
        :: inc[INST(p)] == pinc[p] ->
           lease1[INST(p)] = now + LEASE;
           lease2[INST(p)] = now + HARD;
           hb[INST(p)] = now;
           stopped[INST(p)] = false;
           pdl[p] = now + LEASE
        :: else ->
           pinc[p] = 0;
           drop_jobs(p)
        fi
        ; printf("MSC: t%d lease p%d\n", now, p); print_state()
       }
    /* Graceful stop (queuer.c queuer_shutdown): the submitter waits for its
     * POSTs (submitter.c submitter_loop; STOP_ABANDONS: its grace may end
     * first), gives back marked batches not yet posted (requeue, fenced),
     * abandons the rest; claims_release_all.sql (every claim if our
     * incarnation holds the row, but KEEPS_AT_STOP); instance_stop.sql. */
    :: atomic {
        RUNS(p) && faults < FMAX && STOP_WAITS(p) ->
        faults++;
        h_k = !NO_POSTS(p); /* posts abandoned */
        h_j = 0;
        do
        :: h_j < NS ->
           if
           :: jph[JI(p, h_j)] == J_READY && FENCE(p, h_j, jep[JI(p, h_j)]) &&
              bst[BI(h_j, jk[JI(p, h_j)])] == B_SUB ->
              bst[BI(h_j, jk[JI(p, h_j)])] = B_NEW;
              UNNAME(h_j, jk[JI(p, h_j)])
           :: else -> skip
           fi;
           if
           :: claimant[h_j] == INST(p) && inc[INST(p)] == pinc[p] && epoch[h_j] < EMAX &&
              !KEEPS_AT_STOP(h_j, h_k) ->
              claimant[h_j] = NOBODY; epoch[h_j]++; e1[h_j] = 0; e2[h_j] = 0
           :: else -> skip
           fi;
           h_j++
        :: else -> break
        od;
        if
        :: inc[INST(p)] == pinc[p] ->
           stopped[INST(p)] = true;
           hb[INST(p)] = now;
           if
           :: lease1[INST(p)] > now -> lease1[INST(p)] = now
           :: else -> skip
           fi
        :: else -> skip
        fi;
        pinc[p] = 0;
        drop_jobs(p);
        h_j = 0;
        named_exact(0);
#if NS > 1
        named_exact(1);
#endif
        h_k = 0
        ; printf("MSC: t%d stop p%d\n", now, p); print_state()
       }
    od
}

/* The steps of process p about service s: its queuer and submitter for that
 * service, and the claims statements it runs on that service's row. */
proctype Svc(byte p; byte s) {
end:
    do
    /* The queue transaction (queuer.c fetch_and_queue, queue_txn.c):
     * batches_fetch.sql reads a held service (no incarnation check); the
     * batch in flight that the claim row names, if no job follows it, is
     * adopted (followed by status); otherwise next_batch.c chooses the
     * oldest non-final batch if it has no status or is Delayed/Unknown
     * (due: at any time here), and batches_mark.sql marks it and names it
     * on the claim row: fence at the epoch just read, the row naming no
     * batch in flight, compare-and-set on the state seen. The job's
     * deadline is the queuer's lease deadline. (Fetch and mark are one
     * step here: a claim that changes hands between them makes the mark
     * match nothing.) */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] == J_NONE && claimant[s] == INST(p) && HELD(s, INST(p)) ->
        if
        :: infl[s] < NB ->
           jph[JI(p, s)] = J_FOLLOW; jk[JI(p, s)] = infl[s]; jep[JI(p, s)] = epoch[s];
           jt[JI(p, s)] = 0
        :: else ->
           head(s);
           if
           :: h_k < NB && (bst[BI(s, h_k)] == B_NEW || bst[BI(s, h_k)] == B_RETRY) &&
              FENCE(p, s, epoch[s]) && infl[s] == NB ->
              bst[BI(s, h_k)] = B_SUB;
              infl[s] = h_k;
              jph[JI(p, s)] = J_READY; jk[JI(p, s)] = h_k; jep[JI(p, s)] = epoch[s];
              jt[JI(p, s)] = pdl[p]
           :: else -> skip
           fi
        fi;
        named_exact(s)
        ; printf("MSC: t%d queue p%d s%d\n", now, p, s); print_state()
       }
    /* dispatch.c: a POST starts only before the job's lease deadline. */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] == J_READY && IN_WINDOW(p, s) && now >= pfrom[p] &&
        (net_by[0] == 0 || net_by[1] == 0) ->
        if
        :: net_by[0] == 0 -> h_j = 0
        :: else -> h_j = 1
        fi;
        net_s[h_j] = s; net_k[h_j] = jk[JI(p, s)]; net_by[h_j] = now + FLIGHT;
        net_p[h_j] = p; net_inc[h_j] = pinc[p];
        jph[JI(p, s)] = J_POSTED;
        jt[JI(p, s)] = 0;
        h_j = 0
        ; printf("MSC: t%d post p%d s%d\n", now, p, s); print_state()
       }
    /* submitter.c run_timers, dispatch.c sweep: a job whose lease deadline
     * passed before its POST is given back ("claim lease may have lapsed"). */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] == J_READY && now >= jt[JI(p, s)] ->
        jph[JI(p, s)] = J_REC_REQUEUE
        ; printf("MSC: t%d window_passed p%d s%d\n", now, p, s); print_state()
       }
    /* answers.c, outcome.c qw_outcome_plan: once the POST has landed or
     * been lost (dlt.request_timeout_ms bounds FLIGHT), the answer: 202 or
     * none (follow its status) or a refusal (Delayed). */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] == J_POSTED &&
        !MY_POST(0, p, s) && !MY_POST(1, p, s) ->
        if
        :: jph[JI(p, s)] = J_FOLLOW
        :: jph[JI(p, s)] = J_REC_DELAYED
        fi
        ; printf("MSC: t%d answer p%d s%d\n", now, p, s); print_state()
       }
    /* follow.c, monitor.c qw_monitor_plan: a status poll. Pending of a batch
     * recorded mid-submission is written; final is written; Unknown is
     * confirmed after CONFIRM ticks and then written (resubmission). */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] == J_FOLLOW &&
        !(led[BI(s, jk[JI(p, s)])] == L_PEND && bst[BI(s, jk[JI(p, s)])] != B_SUB) &&
        !(led[BI(s, jk[JI(p, s)])] == L_NONE && jt[JI(p, s)] != 0 &&
          now < jt[JI(p, s)] + CONFIRM) ->
        if
        :: led[BI(s, jk[JI(p, s)])] == L_PEND -> jph[JI(p, s)] = J_REC_PENDING
        :: led[BI(s, jk[JI(p, s)])] == L_FINAL -> jph[JI(p, s)] = J_REC_FINAL
        :: led[BI(s, jk[JI(p, s)])] == L_NONE && jt[JI(p, s)] == 0 -> jt[JI(p, s)] = now
        :: led[BI(s, jk[JI(p, s)])] == L_NONE && jt[JI(p, s)] != 0 ->
           jph[JI(p, s)] = J_REC_UNKNOWN
        fi
        ; printf("MSC: t%d status p%d s%d\n", now, p, s); print_state()
       }
    /* outcomes_record.sql: fence, compare-and-set on the state expected;
     * a batch that leaves flight is no longer named on the claim row; a
     * final outcome that goes on marks the service's next batch in the
     * same statement, when the row names no other batch in flight, and
     * names it (fast path, record.c continue_job: its deadline is the
     * claim's hold as the statement checked it). Not written: claim lost,
     * the job is dropped (record.c apply_outcome). */
    :: atomic {
        RUNS(p) && jph[JI(p, s)] >= J_REC_REQUEUE ->
        if
        :: FENCE(p, s, jep[JI(p, s)]) && jph[JI(p, s)] == J_REC_REQUEUE &&
           bst[BI(s, jk[JI(p, s)])] == B_SUB ->
           bst[BI(s, jk[JI(p, s)])] = B_NEW;
           UNNAME(s, jk[JI(p, s)]);
           jph[JI(p, s)] = J_NONE
        :: FENCE(p, s, jep[JI(p, s)]) && jph[JI(p, s)] == J_REC_DELAYED &&
           bst[BI(s, jk[JI(p, s)])] == B_SUB ->
           bst[BI(s, jk[JI(p, s)])] = B_RETRY;
           UNNAME(s, jk[JI(p, s)]);
           jph[JI(p, s)] = J_NONE
        :: FENCE(p, s, jep[JI(p, s)]) && jph[JI(p, s)] == J_REC_PENDING &&
           bst[BI(s, jk[JI(p, s)])] == B_SUB ->
           bst[BI(s, jk[JI(p, s)])] = B_PEND;
           jph[JI(p, s)] = J_FOLLOW;
           jt[JI(p, s)] = 0
        :: FENCE(p, s, jep[JI(p, s)]) && jph[JI(p, s)] == J_REC_UNKNOWN &&
           (bst[BI(s, jk[JI(p, s)])] == B_SUB || bst[BI(s, jk[JI(p, s)])] == B_PEND) ->
           bst[BI(s, jk[JI(p, s)])] = B_RETRY;
           UNNAME(s, jk[JI(p, s)]);
           jph[JI(p, s)] = J_NONE
        :: FENCE(p, s, jep[JI(p, s)]) && jph[JI(p, s)] == J_REC_FINAL &&
           (bst[BI(s, jk[JI(p, s)])] == B_SUB || bst[BI(s, jk[JI(p, s)])] == B_PEND) ->
           bst[BI(s, jk[JI(p, s)])] = B_FINAL;
           UNNAME(s, jk[JI(p, s)]);
           jph[JI(p, s)] = J_NONE;
           head(s);
           if
           :: h_k < NB && (bst[BI(s, h_k)] == B_NEW || bst[BI(s, h_k)] == B_RETRY) &&
              infl[s] == NB ->
              /* go_on (a draining service takes no fast path: either may happen) */
              if
              :: bst[BI(s, h_k)] = B_SUB;
                 infl[s] = h_k;
                 jph[JI(p, s)] = J_READY;
                 jk[JI(p, s)] = h_k;
                 if
                 :: e1[s] > lease1[INST(p)] -> jt[JI(p, s)] = e1[s]
                 :: else -> jt[JI(p, s)] = lease1[INST(p)]
                 fi
              :: skip
              fi
           :: else -> skip
           fi;
           h_k = 0
        :: else ->
           jph[JI(p, s)] = J_NONE
        fi;
        if
        :: jph[JI(p, s)] == J_NONE ->
           jk[JI(p, s)] = 0; jep[JI(p, s)] = 0; jt[JI(p, s)] = 0
        :: else -> skip
        fi;
        named_exact(s)
        ; printf("MSC: t%d record p%d s%d\n", now, p, s); print_state()
       }
    /* claims_maintain.sql, one claim row: the holder's lease and the
     * claim's own soft expiry have passed, and its hard expiry too or no
     * batch is mid-submission; to a live instance, epoch + 1. */
    :: atomic {
        RUNS(p) && claimant[s] != NOBODY && claimant[s] != INST(p) && epoch[s] < EMAX &&
        lease1[claimant[s]] < now && e1[s] < now && MAY_TAKE(s) && (LIVE(0) || LIVE(1)) ->
        if
        :: LIVE(0) -> give(s, 0)
        :: LIVE(1) -> give(s, 1)
        fi
        ; printf("MSC: t%d maintain p%d s%d\n", now, p, s); print_state()
       }
    /* claims_acquire.sql, one free row with work: to an instance with a
     * running lease, the caller's, or one registered within a lease and no
     * lease yet; epoch + 1. */
    :: atomic {
        RUNS(p) && claimant[s] == NOBODY && epoch[s] < EMAX && HAS_WORK(s) &&
        (PICKS(p, 0) || PICKS(p, 1)) ->
        if
        :: PICKS(p, 0) -> give(s, 0)
        :: PICKS(p, 1) -> give(s, 1)
        fi
        ; printf("MSC: t%d pickup p%d s%d\n", now, p, s); print_state()
       }
    /* claims_release.sql (and claims_release_idle.sql): a claim of ours with
     * no job out and no batch mid-submission goes back free, epoch + 1. */
    :: atomic {
        RUNS(p) && claimant[s] == INST(p) && jph[JI(p, s)] == J_NONE && epoch[s] < EMAX &&
        !SUBMITTING(s) ->
        claimant[s] = NOBODY; epoch[s]++; e1[s] = 0; e2[s] = 0
        ; printf("MSC: t%d release p%d s%d\n", now, p, s); print_state()
       }
    od
}

#define FAULT(p) (pinc[p] != 0 && faults < FMAX)
#define CRASH(p) pinc[p] = 0; frozen[p] = false; crashed[p] = true; drop_jobs(p); faults++

/* The clock, the producer (enqueue) and the faults. */
proctype Env() {
end:
    do
    /* time passes, but not past a POST's last tick on the wire */
    :: atomic {
        now < TMAX && !SLOT_DUE(0) && !SLOT_DUE(1) -> now++
        ; printf("MSC: t%d tick\n", now); print_state()
       }
    /* queuer.enqueue_batch() and the trigger claims_follow_batches
     * (migrations/0020_coordination.sql): the batch is created after every
     * earlier one of its service; a free service goes to a live instance,
     * epoch + 1, expiry_1 = expiry_2 = now() (or stays free with work). */
    :: atomic {
        created[0] < NB ->
        bst[BI(0, created[0])] = B_NEW;
        created[0]++;
        if
        :: claimant[0] == NOBODY && epoch[0] < EMAX && LIVE(0) ->
           claimant[0] = 0; epoch[0]++; e1[0] = now; e2[0] = now
        :: claimant[0] == NOBODY && epoch[0] < EMAX && LIVE(1) ->
           claimant[0] = 1; epoch[0]++; e1[0] = now; e2[0] = now
        :: else -> skip
        fi
        ; printf("MSC: t%d enqueue s%d\n", now, 0); print_state()
       }
#if NS > 1
    :: atomic {
        created[1] < NB ->
        bst[BI(1, created[1])] = B_NEW;
        created[1]++;
        if
        :: claimant[1] == NOBODY && epoch[1] < EMAX && LIVE(0) ->
           claimant[1] = 0; epoch[1]++; e1[1] = now; e2[1] = now
        :: claimant[1] == NOBODY && epoch[1] < EMAX && LIVE(1) ->
           claimant[1] = 1; epoch[1]++; e1[1] = now; e2[1] = now
        :: else -> skip
        fi
        ; printf("MSC: t%d enqueue s%d\n", now, 1); print_state()
       }
#endif
    /* a freeze (SIGSTOP, a paused VM) and its end */
    :: atomic { FAULT(0) && !frozen[0] -> frozen[0] = true; faults++; printf("MSC: t%d freeze p0\n", now) }
    :: atomic { frozen[0] -> frozen[0] = false; printf("MSC: t%d thaw p0\n", now) }
    :: atomic { FAULT(1) && !frozen[1] -> frozen[1] = true; faults++; printf("MSC: t%d freeze p1\n", now) }
    :: atomic { frozen[1] -> frozen[1] = false; printf("MSC: t%d thaw p1\n", now) }
#if NP > 2
    :: atomic { FAULT(2) && !frozen[2] -> frozen[2] = true; faults++; printf("MSC: t%d freeze p2\n", now) }
    :: atomic { frozen[2] -> frozen[2] = false; printf("MSC: t%d thaw p2\n", now) }
#endif
    /* a crash: the process and its jobs are gone, its POSTs stay on the wire */
    :: atomic { FAULT(0) -> CRASH(0); printf("MSC: t%d crash p0\n", now) }
    :: atomic { FAULT(1) -> CRASH(1); printf("MSC: t%d crash p1\n", now) }
#if NP > 2
    :: atomic { FAULT(2) -> CRASH(2); printf("MSC: t%d crash p2\n", now) }
#endif
    od
}

/* The ledger: a POST lands (or is lost on the wire); a Pending batch ends. */
proctype Ledger() {
end:
    do
    :: atomic {
        net_by[0] != 0 || net_by[1] != 0 ->
        if
        :: net_by[0] != 0 -> h_k = 0
        :: net_by[1] != 0 -> h_k = 1
        fi;
        if
        :: /* lands: every earlier batch of the service is final at the
            * ledger and no later one has arrived */
           printf("MSC: t%d lands s%d b%d (POST of p%d)\n", now, net_s[h_k], net_k[h_k], net_p[h_k]);
           h_j = 0;
           do
           :: h_j < net_k[h_k] -> assert(led[BI(net_s[h_k], h_j)] == L_FINAL); h_j++
           :: h_j == net_k[h_k] -> h_j++
           :: h_j > net_k[h_k] && h_j < NB -> assert(led[BI(net_s[h_k], h_j)] == L_NONE); h_j++
           :: h_j == NB -> break
           od;
           if
           :: led[BI(net_s[h_k], net_k[h_k])] == L_NONE -> led[BI(net_s[h_k], net_k[h_k])] = L_PEND
           :: else -> skip /* a repeat: the ledger recognises the id */
           fi
        :: printf("MSC: t%d lost s%d b%d (POST of p%d)\n", now, net_s[h_k], net_k[h_k], net_p[h_k])
        fi;
        net_s[h_k] = 0; net_k[h_k] = 0; net_by[h_k] = 0; net_p[h_k] = 0; net_inc[h_k] = 0;
        h_k = 0; h_j = 0;
        print_state()
       }
    :: atomic {
        led[BI(0, 0)] == L_PEND -> led[BI(0, 0)] = L_FINAL;
        printf("MSC: t%d final s0 b0\n", now); print_state()
       }
    :: atomic {
        led[BI(0, 1)] == L_PEND -> led[BI(0, 1)] = L_FINAL;
        printf("MSC: t%d final s0 b1\n", now); print_state()
       }
#if NB > 2
    :: atomic {
        led[BI(0, 2)] == L_PEND -> led[BI(0, 2)] = L_FINAL;
        printf("MSC: t%d final s0 b2\n", now); print_state()
       }
#endif
#if NS > 1
    :: atomic {
        led[BI(1, 0)] == L_PEND -> led[BI(1, 0)] = L_FINAL;
        printf("MSC: t%d final s1 b0\n", now); print_state()
       }
    :: atomic {
        led[BI(1, 1)] == L_PEND -> led[BI(1, 1)] = L_FINAL;
        printf("MSC: t%d final s1 b1\n", now); print_state()
       }
#if NB > 2
    :: atomic {
        led[BI(1, 2)] == L_PEND -> led[BI(1, 2)] = L_FINAL;
        printf("MSC: t%d final s1 b2\n", now); print_state()
       }
#endif
#endif
    od
}

init {
    atomic {
        claimant[0] = NOBODY;
        infl[0] = NB;
#if NS > 1
        claimant[1] = NOBODY;
        infl[1] = NB;
#endif
        run Env();
        run Ledger();
        run Proc(0);
        run Proc(1);
#if NP > 2
        run Proc(2);
#endif
        run Svc(0, 0);
        run Svc(1, 0);
#if NP > 2
        run Svc(2, 0);
#endif
#if NS > 1
        run Svc(0, 1);
        run Svc(1, 1);
#if NP > 2
        run Svc(2, 1);
#endif
#endif
    }
}
