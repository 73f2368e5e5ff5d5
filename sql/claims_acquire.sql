-- Claims up to $2 free services that have work. Reads the index of free
-- services with work (service_id_claims_free_work, ordered by
-- hashtext(service_id)) from $5, wrapping around, so each worker starts at
-- its own random place and its reads (and predicate locks) cover only the
-- rows it takes; rows another transaction has locked are skipped. The
-- update finds the rows by the ctid just locked, not by key: a key lookup
-- would predicate-lock whole primary-key pages, which other workers'
-- updates of neighbouring keys write into (false serialization failures).
-- $1 instance, $2 how many, $3 lease ms, $4 hard-expiry ms, $5 start (an
-- int4). Returns the new claims.
WITH upper AS MATERIALIZED (
    SELECT c.ctid FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work AND hashtext(c.service_id) >= $5::integer
     ORDER BY hashtext(c.service_id)
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
), lower AS MATERIALIZED (
    -- read only when the upper range has fewer than $2 (CTEs run on demand)
    SELECT c.ctid FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work AND hashtext(c.service_id) < $5::integer
     ORDER BY hashtext(c.service_id)
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = $1, claim_epoch = c.claim_epoch + 1,
       expiry_1 = now() + $3::integer * interval '1 millisecond',
       expiry_2 = now() + $4::integer * interval '1 millisecond'
 WHERE c.ctid = ANY (ARRAY(SELECT u.ctid FROM upper u
                           UNION ALL
                           SELECT l.ctid FROM lower l
                           LIMIT $2::integer))
   AND c.claimant IS NULL
RETURNING c.service_id, c.claim_epoch
