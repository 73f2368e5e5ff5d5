-- The fair share for this instance: ceil(services with work / live
-- instances) + slack, capped by max_claims when > 0; and how many services
-- with work nobody holds. Advisory: read outside the claims transaction.
-- $1 instance, $2 liveness window ms, $3 slack, $4 max claims (0 = none).
WITH live AS (
    SELECT greatest(1, count(*)) AS n FROM queuer.instances i
     WHERE i.stopped_at IS NULL
       AND (i.heartbeat_at > now() - $2::integer * interval '1 millisecond' OR i.instance_id = $1)
), work AS (
    SELECT count(*) AS n, count(*) FILTER (WHERE c.claimant IS NULL) AS free
      FROM queuer.service_id_claims c
     WHERE EXISTS (SELECT 1 FROM queuer.batches b
                    WHERE b.service_id = c.service_id
                      AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')))
)
SELECT CASE WHEN $4::integer > 0
            THEN least($4::integer, ceil(work.n::numeric / live.n)::integer + $3::integer)
            ELSE ceil(work.n::numeric / live.n)::integer + $3::integer END,
       work.n, live.n, work.free
  FROM live, work
