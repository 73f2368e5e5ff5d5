-- After a grouped outcome write whose outcome is unknown (the connection
-- dropped while it ran, so it may have committed), which of these
-- outcomes did it record? The retry matched nothing for them; an outcome
-- counts as recorded when its batch's newest history row is ours: written
-- by $1 at the outcome's claim epoch, with the outcome's status
-- ('Requeued' when it had none). Re-read by key and epoch, as txn.h asks.
-- $1 instance, $2 the outcomes (queuer.outcome[]). Returns the ord
-- (position from 1) of each outcome found recorded.
SELECT o.ord
  FROM unnest($2::queuer.outcome[]) WITH ORDINALITY
       AS o(batch_id, service_id, epoch, expect, status, submitted, attempts_add, retry_ms,
            last_error, detail, posted, go_on, ord)
 CROSS JOIN LATERAL (
       SELECT h.instance_id, h.claim_epoch, h.to_status
         FROM queuer.batch_history h
        WHERE h.batch_id = o.batch_id
        ORDER BY h.id DESC
        LIMIT 1) newest
 WHERE newest.instance_id = $1
   AND newest.claim_epoch = o.epoch
   AND newest.to_status = coalesce(o.status, 'Requeued')
