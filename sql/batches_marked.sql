-- After a queue transaction whose COMMIT outcome was unknown (the
-- connection dropped during COMMIT): which of the marks it tried did
-- commit? A batch counts as marked by us when it is being submitted (no
-- status) and its newest history row is our 'Submitting' at the claim
-- epoch we held, with the claim still ours. Those were never handed to the
-- submitter, so nothing was posted: they go out now (as batches_mark's
-- rows) instead of waiting for adoption and an Unknown confirmation.
-- $1 instance, $2 batch ids, $3 service ids, $4 epochs (parallel arrays), $5 our
-- incarnation.
SELECT b.batch_id, b.service_id, q.epoch, b.attempts, b.payload, b.priority
  FROM unnest($2::text[], $3::text[], $4::bigint[]) AS q(batch_id, service_id, epoch)
  JOIN queuer.service_id_claims c ON c.service_id = q.service_id
                                 AND c.claimant IS NOT DISTINCT FROM $1
                                 AND c.claim_epoch = q.epoch
                                 AND greatest(c.expiry_1,
                                              (SELECT i.lease_1 FROM queuer.instances i WHERE i.instance_id = $1)) > now()
                                 AND EXISTS (SELECT 1 FROM queuer.instances i
                                              WHERE i.instance_id = $1
                                                AND i.incarnation = $5::bigint)
  JOIN queuer.batches b ON b.batch_id = q.batch_id AND b.service_id = q.service_id
 CROSS JOIN LATERAL (
       SELECT h.instance_id, h.claim_epoch, h.to_status
         FROM queuer.batch_history h
        WHERE h.batch_id = b.batch_id
        ORDER BY h.id DESC
        LIMIT 1) newest
 WHERE b.submitted AND b.status IS NULL
   AND newest.instance_id = $1
   AND newest.claim_epoch = q.epoch
   AND newest.to_status = 'Submitting'
