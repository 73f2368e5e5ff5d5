-- Notes why a batch in flight cannot be followed (its status polls keep
-- failing) in its last_error, without changing its state or its history.
-- Fenced like every worker write: the claim must be ours at the epoch,
-- held (its own expiry_1 or our instance lease in the future). $1 instance, $2 batch id, $3 service id,
-- $4 epoch, $5 the note, $6 our incarnation.
UPDATE queuer.batches b
   SET last_error = $5
  FROM queuer.service_id_claims c
 WHERE c.service_id = $3
   AND c.claimant = $1
   AND c.claim_epoch = $4::bigint
   AND greatest(c.expiry_1,
                (SELECT i.lease_1 FROM queuer.instances i WHERE i.instance_id = $1)) > now()
   AND EXISTS (SELECT 1 FROM queuer.instances i
                WHERE i.instance_id = $1 AND i.incarnation = $6::bigint)
   AND b.batch_id = $2
   AND b.service_id = $3
   AND ((b.submitted AND b.status IS NULL) OR b.status = 'Pending')
