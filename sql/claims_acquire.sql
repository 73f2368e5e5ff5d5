-- Claims up to $2 free services that have work, of one priority: the
-- highest head_priority (the priority of the service's next batch,
-- migration 0013) present among them that is at most $6. The caller calls
-- again with $6 = the next lower priority present (returned with every
-- row, NULL when there is none: no call that would find nothing) when it
-- got fewer than it asked for.
-- Reads the index of free services with work (service_id_claims_free_work,
-- ordered by head_priority, then hashtext(service_id)): one entry to find
-- the priority, then that priority's range from $5, wrapping around, so
-- each worker starts at its own random place and its reads (and predicate
-- locks) cover only the rows it takes; rows another transaction has
-- locked are skipped. The update finds the rows by the ctid just locked,
-- not by key: a key lookup would predicate-lock whole primary-key pages,
-- which other workers' updates of neighbouring keys write into (false
-- serialization failures).
-- $1 instance, $2 how many, $3 lease ms, $4 hard-expiry ms, $5 start (an
-- int4), $6 highest priority to take. Returns the new claims with their
-- priority, and the next lower priority of free services with work (read
-- from the same index and snapshot as the next call would).
WITH level AS MATERIALIZED (
    SELECT c.head_priority AS p FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work AND c.head_priority <= $6::integer
     ORDER BY c.head_priority DESC
     LIMIT 1
), upper AS MATERIALIZED (
    SELECT c.ctid FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work
       AND c.head_priority = (SELECT l.p FROM level l) AND hashtext(c.service_id) >= $5::integer
     ORDER BY hashtext(c.service_id)
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
), lower AS MATERIALIZED (
    -- read only when the upper range has fewer than $2 (CTEs run on demand)
    SELECT c.ctid FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work
       AND c.head_priority = (SELECT l.p FROM level l) AND hashtext(c.service_id) < $5::integer
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
RETURNING c.service_id, c.claim_epoch, c.head_priority,
          (SELECT max(f.head_priority) FROM queuer.service_id_claims f
            WHERE f.claimant IS NULL AND f.has_work
              AND f.head_priority < (SELECT l.p FROM level l)) AS next_level
