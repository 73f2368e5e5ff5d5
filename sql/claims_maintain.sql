-- Maintenance: frees claims whose owner stopped renewing them. Decided per
-- service: past expiry_2 always; past expiry_1 only when that service has
-- no batch mid-submission (submitted, no status yet). Every change of
-- claimant bumps claim_epoch. Returns the freed services.
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.claimant IS NOT NULL
   AND c.expiry_1 < now()
   AND (c.expiry_2 < now()
        OR NOT EXISTS (SELECT 1 FROM queuer.batches b
                        WHERE b.service_id = c.service_id AND b.submitted AND b.status IS NULL))
RETURNING c.service_id
