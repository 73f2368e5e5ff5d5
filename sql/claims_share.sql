-- The fair share for this instance: ceil(services with work / live
-- instances) + slack, capped by max_claims when > 0; and how many services
-- with work nobody holds. Services with work are estimated as the claims
-- live instances held at their last lease renewal (they give idle claims
-- back) plus the free ones with work (an index of its own). Live: a lease
-- that has not run out, or ours. Advisory: read outside the claims
-- transaction. $1 instance, $2 slack, $3 max claims (0 = none).
WITH live AS (
    SELECT greatest(1, count(*)) AS n, coalesce(sum(i.claims_held), 0) AS held
      FROM queuer.instances i
     WHERE i.stopped_at IS NULL
       AND (i.lease_1 > now() OR i.instance_id = $1)
), free AS (
    SELECT count(*) AS n FROM queuer.service_id_claims c WHERE c.claimant IS NULL AND c.has_work
)
SELECT CASE WHEN $3::integer > 0
            THEN least($3::integer, ceil((live.held + free.n)::numeric / live.n)::integer + $2::integer)
            ELSE ceil((live.held + free.n)::numeric / live.n)::integer + $2::integer END,
       live.held + free.n, live.n, free.n
  FROM live, free
