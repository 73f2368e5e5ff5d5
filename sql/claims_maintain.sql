-- Maintenance: frees claims whose owner stopped renewing them. Decided per
-- service from the claim row itself: past expiry_2 always; past expiry_1
-- only when no batch of the service is mid-submission (`submitting`,
-- written with the batch by the mark and outcome statements). Every
-- change of claimant bumps claim_epoch. Rows locked by a live transaction
-- (a worker stuck mid-transaction, or a mark or outcome in progress) are
-- skipped, not waited for: the stuck session is ended by
-- idle_in_transaction_session_timeout and the next cycle frees them. A
-- row changed after this transaction's snapshot cannot be locked here
-- (SERIALIZABLE: 40001, the transaction is re-run on a fresh snapshot),
-- so a claim is never freed on a stale `submitting`. Returns the freed
-- services.
WITH expired AS MATERIALIZED (
    SELECT c.service_id
      FROM queuer.service_id_claims c
     WHERE c.claimant IS NOT NULL
       AND c.expiry_1 < now()
       AND (c.expiry_2 < now() OR NOT c.submitting)
       FOR UPDATE SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.service_id = ANY (ARRAY(SELECT e.service_id FROM expired e))
RETURNING c.service_id
