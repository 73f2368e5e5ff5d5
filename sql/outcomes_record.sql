-- Records many batch outcomes in one statement (one COMMIT for the group).
-- Each write is fenced: the service's claim must still be ours, at the
-- job's epoch, with expiry_1 in the future, locked FOR SHARE so a
-- concurrent takeover waits for us or makes us match nothing; and the
-- batch must be in the state the submitter expects (compare-and-set):
--   expect 'posting'  : submitted, no status (our POST in progress)
--   expect 'pending'  : status Pending
--   expect 'inflight' : either of the above (adopted batches)
-- Returns the batch ids written; a missing id means "claim lost, drop it".
-- $1 instance, then parallel arrays: $2 batch ids, $3 service ids, $4 epochs,
-- $5 expect, $6 new status ('' = none), $7 submitted after, $8 attempts to
-- add, $9 retry_at in ms from now (NULL = none, -1 = never: parked),
-- $10 last_error ('' = keep), $11 history detail, $12 posted (sets
-- last_submitted_at).
WITH o AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                         $7::boolean[], $8::integer[], $9::bigint[], $10::text[], $11::text[],
                         $12::boolean[])
        AS o(batch_id, service_id, epoch, expect, status, submitted, attempts_add, retry_ms,
             last_error, detail, posted)
), fence AS (
    SELECT c.service_id, c.claim_epoch
      FROM queuer.service_id_claims c
     WHERE c.service_id = ANY ($3::text[])
       AND c.claimant = $1
       AND c.expiry_1 > now()
     ORDER BY c.service_id
       FOR SHARE OF c NOWAIT
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
     WHERE b.batch_id = o.batch_id
       AND b.service_id = o.service_id
       AND CASE o.expect
               WHEN 'posting' THEN b.submitted AND b.status IS NULL
               WHEN 'pending' THEN b.status = 'Pending'
               ELSE (b.submitted AND b.status IS NULL) OR b.status = 'Pending'
           END
    RETURNING b.batch_id, b.service_id, o.epoch, b.status AS to_status, o.detail
), hist AS (
    -- Every sub-statement sees the same snapshot: `old` is the row as it was.
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT upd.batch_id, upd.service_id,
           coalesce(old.status, CASE WHEN old.submitted THEN 'Submitting' END),
           coalesce(upd.to_status, 'Requeued'), $1, upd.epoch, nullif(upd.detail, '')
      FROM upd JOIN queuer.batches old ON old.batch_id = upd.batch_id
)
SELECT upd.batch_id FROM upd
