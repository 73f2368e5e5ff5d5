-- Graceful shutdown: gives every claim of this instance back at once so
-- another worker takes over without waiting for expiry. $1 instance.
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.claimant = $1
RETURNING c.service_id
