-- Records many batch outcomes in one statement (one COMMIT for the group).
-- Each write is fenced: the service's claim must still be ours, at the
-- job's epoch, with expiry_1 in the future, locked (FOR NO KEY UPDATE) so
-- a concurrent takeover waits for us or makes us match nothing; and the
-- batch must be in the state the submitter expects (compare-and-set):
--   expect 'posting'  : submitted, no status (our POST in progress)
--   expect 'pending'  : status Pending
--   expect 'inflight' : either of the above (adopted batches)
--
-- Fast path: when a batch's turn ends (Committed, Valid, Invalid) and the
-- outcome may continue ($13), the service's oldest remaining non-final
-- batch is marked for submission in the same statement when DESIGN §4
-- allows it (no status and not submitted, or Unknown/Delayed and due),
-- so the next POST needs no further round trip or COMMIT. The queuer's
-- cycle (src/worker/serial.c) is the general rule; this is the same rule
-- for the one service whose in-flight batch just ended.
--
-- The claim row's `submitting` (maintenance decides soft expiry from it)
-- is rewritten in the same statement where it changes: cleared when the
-- batch leaves "submitted, no status" and no next batch was marked, set
-- when a next batch was marked; the common fast path (a batch ends, the
-- next is marked) leaves it set and writes nothing more.
--
-- Returns one row per outcome written (kind 'w': batch_id) and one per
-- next batch marked (kind 'n': batch_id, service_id, epoch, attempts,
-- payload, and the claim's lease left in ms, as checked by this statement). An outcome not returned means "claim lost, drop it".
-- $1 instance, then parallel arrays: $2 batch ids, $3 service ids, $4 epochs,
-- $5 expect, $6 new status ('' = none), $7 submitted after, $8 attempts to
-- add, $9 retry_at in ms from now (NULL = none, -1 = never: parked),
-- $10 last_error ('' = keep), $11 history detail, $12 posted (sets
-- last_submitted_at), $13 may continue with the service's next batch.
WITH o AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                         $7::boolean[], $8::integer[], $9::bigint[], $10::text[], $11::text[],
                         $12::boolean[], $13::boolean[])
        AS o(batch_id, service_id, epoch, expect, status, submitted, attempts_add, retry_ms,
             last_error, detail, posted, go_on)
), fence AS (
    -- (IS NOT DISTINCT FROM means = here but is not indexable: the primary
    -- key drives the scan; claims of others are neither matched nor locked)
    SELECT c.service_id, c.claim_epoch, c.expiry_1, c.claimant
      FROM queuer.service_id_claims c
     WHERE c.service_id = ANY ($3::text[])
       AND c.claimant IS NOT DISTINCT FROM $1
       AND c.expiry_1 > now()
     ORDER BY c.service_id
       FOR NO KEY UPDATE OF c NOWAIT
), upd AS (
    UPDATE queuer.batches b
       SET status = nullif(o.status, ''),
           submitted = o.submitted,
           attempts = b.attempts + o.attempts_add,
           last_submitted_at = CASE WHEN o.posted THEN now() ELSE b.last_submitted_at END,
           retry_at = CASE WHEN o.retry_ms IS NULL THEN NULL
                           WHEN o.retry_ms < 0 THEN 'infinity'::timestamptz
                           ELSE now() + o.retry_ms * interval '1 millisecond' END,
           status_at = now(),
           last_error = CASE WHEN o.last_error = '' THEN b.last_error ELSE o.last_error END
      FROM o JOIN fence f ON f.service_id = o.service_id AND f.claim_epoch = o.epoch
                             AND f.claimant = $1
     WHERE b.batch_id = o.batch_id
       AND b.service_id = o.service_id
       AND CASE o.expect
               WHEN 'posting' THEN b.submitted AND b.status IS NULL
               WHEN 'pending' THEN b.status = 'Pending'
               ELSE (b.submitted AND b.status IS NULL) OR b.status = 'Pending'
           END
    RETURNING b.batch_id, b.service_id, o.epoch, b.status AS to_status, o.detail, o.go_on,
              f.expiry_1, b.submitted AND b.status IS NULL AS submitting
), hist AS (
    -- Every sub-statement sees the same snapshot: `old` is the row as it was.
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT upd.batch_id, upd.service_id,
           coalesce(old.status, CASE WHEN old.submitted THEN 'Submitting' END),
           coalesce(upd.to_status, 'Requeued'), $1, upd.epoch, nullif(upd.detail, '')
      FROM upd JOIN queuer.batches old ON old.batch_id = upd.batch_id
), nxt AS (
    SELECT n.batch_id, n.service_id, upd.epoch, n.status AS seen, n.submitted, n.retry_at,
           n.attempts, n.last_error, upd.expiry_1
      FROM upd
     CROSS JOIN LATERAL (
           SELECT x.batch_id, x.service_id, x.status, x.submitted, x.retry_at, x.attempts,
                  x.last_error
             FROM queuer.batches x
            WHERE x.service_id = upd.service_id
              AND x.batch_id <> upd.batch_id
              AND (x.status IS NULL OR x.status IN ('Pending', 'Unknown', 'Delayed'))
            ORDER BY x.created_at, x.batch_id
            LIMIT 1) n
     WHERE upd.go_on
       AND upd.to_status IN ('Committed', 'Valid', 'Invalid')
), go AS (
    UPDATE queuer.batches b
       SET submitted = true, status = NULL, status_at = now()
      FROM nxt
     WHERE b.batch_id = nxt.batch_id
       AND NOT nxt.submitted
       AND (nxt.seen IS NULL
            OR (nxt.seen IN ('Unknown', 'Delayed')
                AND coalesce(nxt.retry_at, '-infinity'::timestamptz) <= now()))
       AND NOT b.submitted
       AND b.status IS NOT DISTINCT FROM nxt.seen
    RETURNING b.batch_id, b.service_id, nxt.epoch, nxt.seen, b.attempts, b.payload, nxt.last_error,
              (extract(epoch FROM nxt.expiry_1 - now()) * 1000)::bigint AS lease_left_ms
), go_hist AS (
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT go.batch_id, go.service_id, go.seen, 'Submitting', $1, go.epoch,
           queuer.submit_reason(go.seen, go.attempts, go.last_error)
      FROM go
), flag AS (
    -- at most one batch of a service is in flight: the one just written, or the next marked
    UPDATE queuer.service_id_claims c
       SET submitting = s.submitting
      FROM (SELECT x.service_id, bool_or(x.submitting) AS submitting
              FROM (SELECT upd.service_id, upd.submitting FROM upd
                    UNION ALL
                    SELECT go.service_id, true FROM go) x
             GROUP BY x.service_id) s
     WHERE c.service_id = s.service_id
       AND c.submitting <> s.submitting
)
SELECT 'w' AS kind, upd.batch_id, NULL::text AS service_id, NULL::bigint AS epoch,
       NULL::integer AS attempts, NULL::bytea AS payload, NULL::bigint AS lease_left_ms
  FROM upd
UNION ALL
SELECT 'n', go.batch_id, go.service_id, go.epoch, go.attempts, go.payload, go.lease_left_ms
  FROM go
