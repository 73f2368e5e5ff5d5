-- Claims up to $2 free services that have work, spreading workers over
-- different services (order by a per-instance hash). $1 instance, $2 how
-- many, $3 lease ms, $4 hard-expiry ms. Returns the new claims.
WITH pick AS MATERIALIZED (
    SELECT c.service_id FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL
       AND EXISTS (SELECT 1 FROM queuer.batches b
                    WHERE b.service_id = c.service_id
                      AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')))
     ORDER BY hashtext(c.service_id || $1)
     LIMIT $2::integer
     FOR UPDATE SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = $1, claim_epoch = c.claim_epoch + 1,
       expiry_1 = now() + $3::integer * interval '1 millisecond',
       expiry_2 = now() + $4::integer * interval '1 millisecond'
 WHERE c.service_id = ANY (ARRAY(SELECT p.service_id FROM pick p))
   AND c.claimant IS NULL
RETURNING c.service_id, c.claim_epoch
