-- Releases this instance's claims on services with nothing left to do, and
-- (to rebalance) claims beyond $2 (its fair share) on services with no
-- batch in flight. $1 instance, $2 share. Returns the released services.
WITH mine AS (
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
), ranked AS (
    SELECT m.service_id, m.has_work, m.in_flight,
           row_number() OVER (ORDER BY m.has_work DESC, m.in_flight DESC, m.service_id) AS rnk
      FROM mine m
), doomed AS (
    SELECT r.service_id FROM ranked r
     WHERE NOT r.has_work OR (r.rnk > $2::integer AND NOT r.in_flight)
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
  FROM doomed
 WHERE c.service_id = doomed.service_id AND c.claimant = $1
RETURNING c.service_id
