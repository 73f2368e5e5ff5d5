-- Records many batch outcomes in one statement (one COMMIT for the group).
-- Each write is fenced: the service's claim must still be ours, at the
-- job's epoch, held (its own expiry_1 or our instance lease in the
-- future), locked (FOR NO KEY UPDATE: `cnt` below writes it) so
-- a concurrent takeover waits for us or makes us match nothing; and the
-- batch must be in the state the submitter expects (compare-and-set):
--   expect 'posting'  : submitted, no status (our POST in progress)
--   expect 'pending'  : status Pending
--   expect 'inflight' : either of the above (adopted batches)
-- (queuer.outcome_expect is an enum: any other value is refused.)
--
-- Fast path: when a batch's turn ends (Committed, Valid, Invalid) and the
-- outcome may continue (go_on), the service's oldest remaining non-final
-- batch is marked for submission in the same statement when docs/DESIGN.md
-- §5.2 allows it (no status and not submitted, or Unknown/Delayed and due),
-- so the next POST needs no further round trip or COMMIT. The queuer's
-- cycle (src/queuer/next_batch.c) is the general rule; this is the same rule
-- for the one service whose in-flight batch just ended.
--
-- The claim row's counters (n_out, of which queuer.claims.n_open is made,
-- and submitting: maintenance decides soft expiry from it) follow in the
-- same statement (`cnt` below), and the statement sets
-- queuer.batches_counted for its transaction so that the counters trigger
-- on batches does not count again (migration 0032; an outcome write is its
-- transaction's only statement, or one of several outcome writes).
--
-- $1 instance, $2 the outcomes: queuer.outcome[] (migrations/0004_outcome_type.sql), one
-- element per batch; `ord` below is an element's position (from 1); $3 our
-- incarnation (a later registration of our instance_id fences us out).
-- Returns one row per outcome written (kind 'w': batch_id, ord) and one
-- per next batch marked (kind 'n': batch_id, service_id, epoch, attempts,
-- payload, the claim's lease left in ms as checked by this statement, the
-- ord of the outcome whose job goes on with it, and the batch's priority), and one per
-- outcome whose claim row another transaction had locked (kind 's': ord; the claim is
-- still ours, so the outcome goes in the next group), and one per outcome that went on
-- and found its service's next batch but could not mark it (kind 'm': batch_id, ord; not
-- due yet, or changed meanwhile): without a 'n' or 'm' row such an outcome's service has
-- no non-final batch left. An outcome not returned means "claim lost, drop it".
WITH o AS (
    -- (the setting, before any batch is updated: migration 0032)
    SELECT * FROM unnest($2::queuer.outcome[]) WITH ORDINALITY
        AS o(batch_id, service_id, epoch, expect, status, submitted, attempts_add, retry_ms,
             last_error, detail, posted, go_on, ord)
     WHERE set_config('queuer.batches_counted', 'on', true) IS NOT NULL
), fence AS (
    -- Only claims that are ours at the outcome's epoch are locked, and a
    -- claim row another transaction has locked (our own claims transaction
    -- giving claims back, an operator action) is skipped, not waited for:
    -- its outcome goes in the next group (`skipped` below), and the rest of
    -- this group is written now. A claim that moved to another worker is
    -- not touched; its outcome simply matches nothing below.
    -- Each claim row is read by one backward probe of the primary key that
    -- stops at the first version this statement sees (the range means =
    -- here; an equality would let the planner drop the order and the
    -- LIMIT's early stop). Behind an open snapshot every version of a claim
    -- row keeps its own entry in the primary key (migration 0045 keeps them
    -- apart), in the order of the versions' places in the table, and a new
    -- version that leaves its page takes one at the end of the table: the
    -- newest entries come first backwards, one page a claim where a scan by
    -- equality reads every version's.
    -- A claim row changed by a transaction that committed after this
    -- statement's snapshot was taken is locked in its newest version, which
    -- the snapshot does not see; its service is left out, as a locked row
    -- is, and its outcome goes in the next group. So the version locked is
    -- the one every sub-statement sees, and `cnt` writes it by its address.
    SELECT c.tid, c.service_id, c.claim_epoch, c.claimant, c.open_from, c.in_flight, c.expiry_1
      FROM (SELECT DISTINCT o.service_id COLLATE "C" AS service_id, o.epoch FROM o
             ORDER BY 1, 2) s
     CROSS JOIN LATERAL (
           SELECT c.ctid AS tid, c.service_id, c.claim_epoch, c.claimant, c.open_from,
                  c.in_flight,
                  greatest(c.expiry_1,
                           (SELECT i.lease_1 FROM queuer.instances i
                             WHERE i.instance_id = $1)) AS expiry_1
             FROM queuer.service_id_claims c
            WHERE c.service_id >= s.service_id AND c.service_id <= s.service_id
              AND c.claimant IS NOT DISTINCT FROM $1
              AND c.claim_epoch = s.epoch
              AND greatest(c.expiry_1,
                           (SELECT i.lease_1 FROM queuer.instances i
                             WHERE i.instance_id = $1)) > now()
              AND EXISTS (SELECT 1 FROM queuer.instances i
                           WHERE i.instance_id = $1 AND i.incarnation = $3::bigint)
            ORDER BY c.service_id DESC
            LIMIT 1
              FOR NO KEY UPDATE OF c SKIP LOCKED) c
     WHERE c.tid = (SELECT v.ctid FROM queuer.service_id_claims v
                     WHERE v.service_id >= s.service_id AND v.service_id <= s.service_id
                     ORDER BY v.service_id DESC
                     LIMIT 1)
), skipped AS (
    -- outcomes whose claim is ours at their epoch (as the statement's
    -- snapshot shows it) but was not locked above: another transaction
    -- holds the row (the claim rows are found by key, as in `fence`: a
    -- join on o alone lets a generic plan walk the whole primary key).
    -- When `fence` locked as many claims as the group has outcomes (it has
    -- one row per service, each one of o's), none was skipped, and the
    -- first condition, evaluated once, spares the join: the plan made for a
    -- few outcomes compares every outcome with every locked claim.
    SELECT o.ord
      FROM o JOIN queuer.service_id_claims c
                  ON c.service_id = o.service_id AND c.claim_epoch = o.epoch
                 AND c.claimant IS NOT DISTINCT FROM $1
     WHERE (SELECT count(*) FROM fence) < cardinality($2::queuer.outcome[])
       AND c.service_id = ANY (ARRAY(SELECT o.service_id FROM o))
       AND NOT EXISTS (SELECT 1 FROM fence f WHERE f.service_id = o.service_id)
       AND greatest(c.expiry_1,
                    (SELECT i.lease_1 FROM queuer.instances i WHERE i.instance_id = $1)) > now()
       AND EXISTS (SELECT 1 FROM queuer.instances i
                    WHERE i.instance_id = $1 AND i.incarnation = $3::bigint)
), upd AS (
    UPDATE queuer.batches b
       SET status = o.status,
           submitted = o.submitted,
           attempts = b.attempts + o.attempts_add,
           last_submitted_at = CASE WHEN o.posted THEN now() ELSE b.last_submitted_at END,
           retry_at = CASE WHEN o.retry_ms IS NULL THEN NULL
                           WHEN o.retry_ms < 0 THEN 'infinity'::timestamptz
                           ELSE now() + o.retry_ms * interval '1 millisecond' END,
           status_at = now(),
           last_error = coalesce(o.last_error, b.last_error)
      FROM o JOIN fence f ON f.service_id = o.service_id AND f.claim_epoch = o.epoch
                             AND f.claimant = $1
     WHERE b.batch_id = o.batch_id
       AND b.service_id = o.service_id
       AND CASE o.expect
               WHEN 'posting' THEN b.submitted AND b.status IS NULL
               WHEN 'pending' THEN b.status = 'Pending'
               WHEN 'inflight' THEN (b.submitted AND b.status IS NULL) OR b.status = 'Pending'
           END
    RETURNING b.batch_id, b.service_id, o.epoch, b.status AS to_status, o.detail, o.go_on,
              f.expiry_1, o.ord, o.expect, b.submitted, b.retry_at, b.created_at,
              f.open_from, f.in_flight
), hist AS (
    -- The state the row left is the one the compare-and-set above matched
    -- (posting: submitted without a status; pending: Pending), so only an
    -- adopted batch ('inflight': either) is looked up again; every
    -- sub-statement sees the same snapshot, so `old` is the row as it was.
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT upd.batch_id, upd.service_id,
           CASE upd.expect
               WHEN 'posting' THEN 'Submitting'
               WHEN 'pending' THEN 'Pending'
               ELSE (SELECT coalesce(old.status, CASE WHEN old.submitted THEN 'Submitting' END)
                       FROM queuer.batches old WHERE old.batch_id = upd.batch_id)
           END,
           coalesce(upd.to_status, 'Requeued'), $1, upd.epoch, upd.detail
      FROM upd
), nxt AS (
    -- One row per outcome that goes on, with the next batch found (n.*
    -- NULL when its service has no other open batch). The look starts at
    -- the service's open_from (migrations 0041, 0042) as the row locked in
    -- `fence` has it; `cnt` moves open_from to what the look found. A bound
    -- is raised only by outcome statements like this one, which the claim
    -- row's lock puts one after another, and a final batch made open again
    -- clears it (NULL); the row `fence` locked is the version this
    -- statement's snapshot has, so a reopening that commits between the
    -- snapshot and the lock leaves the service to the next group and is
    -- never passed over.
    SELECT n.tid, n.batch_id, upd.service_id, upd.epoch, n.status AS seen, n.submitted,
           n.retry_at, n.attempts, n.last_error, upd.expiry_1, upd.ord,
           upd.batch_id AS ended, upd.in_flight,
           coalesce(n.created_at, upd.created_at) AS open_from
      FROM upd
      LEFT JOIN LATERAL (
           SELECT x.ctid AS tid, x.batch_id, x.status, x.submitted, x.retry_at,
                  x.attempts, x.last_error, x.created_at
             FROM queuer.batches x
            WHERE x.service_id = upd.service_id
              AND x.batch_id <> upd.batch_id
              AND (x.status IS NULL OR x.status IN ('Pending', 'Unknown', 'Delayed'))
              -- the oldest: its created_at first, read in the index's order
              -- (see batches_fetch.sql), then the tie-break by id
              AND x.created_at = (SELECT h.created_at FROM queuer.batches h
                                   WHERE h.service_id = upd.service_id
                                     AND h.batch_id <> upd.batch_id
                                     AND (h.status IS NULL
                                          OR h.status IN ('Pending', 'Unknown', 'Delayed'))
                                     AND h.created_at >= coalesce(upd.open_from,
                                                                  '-infinity'::timestamptz)
                                   ORDER BY h.created_at
                                   LIMIT 1)
            ORDER BY x.batch_id
            LIMIT 1) n ON true
     WHERE upd.go_on
       AND upd.to_status IN ('Committed', 'Valid', 'Invalid')
), go AS (
    UPDATE queuer.batches b
       SET submitted = true, status = NULL, status_at = now()
      FROM nxt
     -- the row version found above, by its address: no second primary-key
     -- descent (a concurrent update is followed and the checks below re-run
     -- on the newest version, as with any READ COMMITTED update)
     WHERE b.ctid = nxt.tid
       AND b.batch_id = nxt.batch_id
       AND NOT nxt.submitted
       AND (nxt.seen IS NULL
            OR (nxt.seen IN ('Unknown', 'Delayed')
                AND coalesce(nxt.retry_at, '-infinity'::timestamptz) <= now()))
       AND NOT b.submitted
       AND b.status IS NOT DISTINCT FROM nxt.seen
       -- the locked claim row names no other batch in flight (migration
       -- 0043): none, or the one whose turn just ended
       AND (nxt.in_flight IS NULL OR nxt.in_flight = nxt.ended)
    RETURNING b.batch_id, b.service_id, nxt.epoch, nxt.seen, b.attempts, b.payload, nxt.last_error,
              (extract(epoch FROM nxt.expiry_1 - now()) * 1000)::bigint AS lease_left_ms, nxt.ord,
              b.priority
), go_hist AS (
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT go.batch_id, go.service_id, go.seen, 'Submitting', $1, go.epoch,
           queuer.submit_reason(go.seen, go.attempts, go.last_error)
      FROM go
), cnt AS (
    -- The claim rows' counters. An outcome's batch was in flight (the
    -- compare-and-set above), and so work: it is counted out when it is no
    -- longer work (final, or parked). It was its service's one batch in
    -- flight, so the service has a batch mid-submission exactly when this
    -- statement leaves one so: the outcome's batch (still being posted) or
    -- the next one marked in `go`. in_flight (migration 0043) names the
    -- batch `go` marked, or else the outcome's batch if it stays in flight
    -- (Pending, or still being posted); an outcome's batch that left
    -- flight is no longer named.
    -- open_from moves to where `nxt` found the service's open batches
    -- begin (a look is made only for a final outcome: one counted out).
    -- (one pass over all three, grouped: a group of many outcomes is not
    -- matched against `go` outcome by outcome)
    UPDATE queuer.service_id_claims c
       SET n_out = c.n_out + x.n_done,
           submitting = x.mid,
           open_from = coalesce(x.open_from, c.open_from),
           in_flight = CASE WHEN x.flies IS NOT NULL THEN x.flies
                            WHEN c.in_flight = x.recorded THEN NULL
                            ELSE c.in_flight END
      FROM (SELECT s.service_id, sum(s.done) AS n_done, bool_or(s.mid) AS mid,
                   min(s.open_from) AS open_from,
                   max(s.flies) AS flies, max(s.recorded) AS recorded
              FROM (SELECT upd.service_id,
                           (NOT queuer.batch_is_work(upd.to_status, upd.retry_at))::int AS done,
                           upd.submitted AND upd.to_status IS NULL AS mid,
                           NULL::timestamptz AS open_from,
                           CASE WHEN coalesce(upd.to_status = 'Pending', upd.submitted)
                                THEN upd.batch_id END AS flies,
                           upd.batch_id AS recorded
                      FROM upd
                    UNION ALL
                    SELECT go.service_id, 0, true, NULL, go.batch_id, NULL FROM go
                    UNION ALL
                    SELECT nxt.service_id, 0, false, nxt.open_from, NULL, NULL
                      FROM nxt) s
             GROUP BY s.service_id) x
      JOIN fence f ON f.service_id = x.service_id
     -- the version `fence` locked, by its address: no walk over the row's
     -- older versions
     WHERE c.ctid = f.tid
       AND c.service_id = x.service_id
       AND (x.n_done <> 0 OR c.submitting <> x.mid
            OR c.in_flight IS DISTINCT FROM x.flies)
)
SELECT 'w' AS kind, upd.batch_id, NULL::text AS service_id, NULL::bigint AS epoch,
       NULL::integer AS attempts, NULL::bytea AS payload, NULL::bigint AS lease_left_ms, upd.ord,
       NULL::integer AS priority
  FROM upd
UNION ALL
SELECT 'n', go.batch_id, go.service_id, go.epoch, go.attempts, go.payload, go.lease_left_ms,
       go.ord, go.priority
  FROM go
UNION ALL
SELECT 's', NULL, NULL, NULL, NULL, NULL, NULL, s.ord, NULL
  FROM skipped s
UNION ALL
SELECT 'm', nxt.batch_id, NULL, NULL, NULL, NULL, NULL, nxt.ord, NULL
  FROM nxt
 -- (`go` marks each of nxt's batches at most once, so when it marked as
 -- many as nxt found, it marked them all: the first condition, evaluated
 -- once, spares comparing every batch found with every batch marked)
 WHERE (SELECT count(*) FROM go) < (SELECT count(nxt.batch_id) FROM nxt)
   AND nxt.batch_id IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM go WHERE go.batch_id = nxt.batch_id)
