-- Renews every claim this instance still holds. $1 instance, $2 lease ms,
-- $3 hard-expiry ms. Returns the claims still ours with their epochs; a
-- claim not returned is lost.
UPDATE queuer.service_id_claims
   SET expiry_1 = now() + $2::integer * interval '1 millisecond',
       expiry_2 = now() + $3::integer * interval '1 millisecond'
 WHERE claimant = $1
RETURNING service_id, claim_epoch
