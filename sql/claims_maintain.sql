-- Maintenance: frees claims whose owner stopped renewing them. Decided per
-- service: past expiry_2 always; past expiry_1 only when that service has
-- no batch mid-submission (submitted, no status yet). Every change of
-- claimant bumps claim_epoch. Rows locked by a live transaction (a worker
-- stuck mid-transaction) are skipped, not waited for: the stuck session is
-- ended by idle_in_transaction_session_timeout and the next cycle frees
-- them. Returns the freed services.
WITH expired AS MATERIALIZED (
    SELECT c.service_id
      FROM queuer.service_id_claims c
     WHERE c.claimant IS NOT NULL
       AND c.expiry_1 < now()
       AND (c.expiry_2 < now()
            OR NOT EXISTS (SELECT 1 FROM queuer.batches b
                            WHERE b.service_id = c.service_id AND b.submitted
                              AND b.status IS NULL))
       FOR UPDATE SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.service_id = ANY (ARRAY(SELECT e.service_id FROM expired e))
RETURNING c.service_id
