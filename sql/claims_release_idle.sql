-- Releases up to $2 of this instance's claims on services with nothing
-- left to do (n_open = 0: no batch waiting or in flight), read from the
-- index of held services without work. A service that gains work after
-- this transaction's snapshot has its claim row changed by the enqueue,
-- so this SERIALIZABLE update fails (40001) and is re-run instead of
-- releasing it; one that gains work after the release is free with work,
-- and claimed again. $1 instance, $2 how many. Returns the released
-- services.
WITH idle AS MATERIALIZED (
    SELECT c.ctid FROM queuer.service_id_claims c
     WHERE c.claimant = $1 AND NOT c.has_work
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 -- by the ctid just locked (see claims_acquire.sql)
 WHERE c.ctid = ANY (ARRAY(SELECT i.ctid FROM idle i))
   AND c.claimant IS NOT DISTINCT FROM $1
RETURNING c.service_id
