-- The fair share for this instance: ceil(services with work / live
-- instances) + slack, capped by max_claims when > 0; and how many services
-- with work nobody holds. Services with work are estimated as the claims
-- instances held at their last lease renewal (less what maintenance freed
-- since: a dead worker's claims count until they are free) plus the free
-- ones with work (an index of its own); idle claims are given back, so
-- held is close to with work. Live: a lease that has not run out, ours, or
-- an instance registered less than $4 ms ago that has not taken a lease
-- yet (so the first of several workers started together does not take
-- everything). Advisory: read outside the claims transaction. Last, whether
-- maintenance (sql/claims_maintain.sql) has anyone to take claims from:
-- another instance that holds claims and whose lease ran out (the same test
-- as its `gone`); the worker skips it otherwise. $1 instance, $2 slack, $3
-- max claims (0 = none), $4 lease ms.
WITH inst AS (
    SELECT greatest(1, count(*) FILTER (
               WHERE i.lease_1 > now() OR i.instance_id = $1
                  OR (i.lease_1 IS NULL
                      AND i.heartbeat_at > now() - $4::integer * interval '1 millisecond')))
               AS live,
           coalesce(sum(i.claims_held), 0) AS held
      FROM queuer.instances i
     WHERE i.stopped_at IS NULL
), free AS (
    SELECT count(*) AS n FROM queuer.service_id_claims c WHERE c.claimant IS NULL AND c.has_work
)
SELECT CASE WHEN $3::integer > 0
            THEN least($3::integer, ceil((inst.held + free.n)::numeric / inst.live)::integer + $2::integer)
            ELSE ceil((inst.held + free.n)::numeric / inst.live)::integer + $2::integer END,
       inst.held + free.n, inst.live, free.n,
       EXISTS (SELECT 1 FROM queuer.instances g
                WHERE g.instance_id <> $1
                  AND coalesce(g.lease_1, '-infinity') < now()
                  AND EXISTS (SELECT 1 FROM queuer.service_id_claims h
                               WHERE h.claimant = g.instance_id)) AS lapsed
  FROM inst, free
