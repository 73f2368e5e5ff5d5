-- Releases this instance's claims on services with nothing left to do, and
-- (to rebalance) claims beyond $2 (its fair share) on services with no
-- batch in flight. $1 instance, $2 share. Returns the released services.
-- The CTEs are MATERIALIZED and the update reads the primary key with an
-- array computed once: no plan, however stale its statistics, re-runs the
-- ranking per claim row (one such plan once made this quadratic).
WITH mine AS MATERIALIZED (
    SELECT c.service_id,
           EXISTS (SELECT 1 FROM queuer.batches b
                    WHERE b.service_id = c.service_id
                      AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')))
               AS has_work,
           EXISTS (SELECT 1 FROM queuer.batches b
                    WHERE b.service_id = c.service_id
                      AND ((b.submitted AND b.status IS NULL) OR b.status = 'Pending'))
               AS in_flight
      FROM queuer.service_id_claims c
     WHERE c.claimant = $1
), ranked AS MATERIALIZED (
    SELECT m.service_id, m.has_work, m.in_flight,
           row_number() OVER (ORDER BY m.has_work DESC, m.in_flight DESC, m.service_id) AS rnk
      FROM mine m
), doomed AS MATERIALIZED (
    SELECT r.service_id FROM ranked r
     WHERE NOT r.has_work OR (r.rnk > $2::integer AND NOT r.in_flight)
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.service_id = ANY (ARRAY(SELECT d.service_id FROM doomed d))
   AND c.claimant IS NOT DISTINCT FROM $1
RETURNING c.service_id
