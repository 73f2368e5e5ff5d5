-- Queue: marks the chosen batches as being submitted (submitted = true,
-- status cleared), fenced by the claim (claimant, epoch, expiry_1 > now())
-- and by the state the queuer saw (compare-and-set). Appends a
-- 'Submitting' history row with the reason. Returns the batches marked
-- with their payloads; a batch not returned must not be submitted.
-- $1 instance, $2 batch ids, $3 service ids, $4 epochs, $5 statuses seen ('' = none).
WITH q AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[])
        AS q(batch_id, service_id, epoch, seen)
), upd AS (
    UPDATE queuer.batches b
       SET submitted = true, status = NULL, status_at = now()
      FROM q
     WHERE b.batch_id = q.batch_id
       AND b.service_id = q.service_id
       AND NOT b.submitted
       AND b.status IS NOT DISTINCT FROM nullif(q.seen, '')
       -- The fence, one primary-key probe per batch. (IS NOT DISTINCT FROM
       -- means = here, as both sides are set, but it is not indexable: the
       -- planner cannot pick the claimant index on a stale estimate.)
       AND EXISTS (SELECT 1 FROM queuer.service_id_claims c
                    WHERE c.service_id = q.service_id
                      AND c.claimant IS NOT DISTINCT FROM $1 AND c.claim_epoch = q.epoch
                      AND c.expiry_1 > now())
    RETURNING b.batch_id, b.service_id, b.payload, b.attempts, q.epoch, q.seen, b.last_error
), hist AS (
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT upd.batch_id, upd.service_id, nullif(upd.seen, ''), 'Submitting', $1, upd.epoch,
           queuer.submit_reason(nullif(upd.seen, ''), upd.attempts, upd.last_error)
      FROM upd
)
SELECT upd.batch_id, upd.service_id, upd.epoch, upd.attempts, upd.payload FROM upd
