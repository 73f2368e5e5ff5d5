-- The fair share for this instance: ceil(services to share / live
-- instances) + slack, capped by max_claims when > 0; and how many services
-- with work nobody holds. The services to share are the claimed ones
-- (claims are kept when their work runs out; a dead worker's count until
-- maintenance hands them over) plus the free ones with work (an index of
-- their own). The claimed ones are first summed from the counts live
-- instances report with their leases (ours is $5, the count we hold): one row
-- per instance, where a count through the claimant index reads every
-- claim, 100,000 of them at that scale, at every housekeeping of every
-- worker. The reported counts lag the claims an enqueue or a pickup just
-- gave someone, so a share read from them can be too small, and a worker
-- that believed it made workers give back what pickup handed out again;
-- so whenever the share could make us give anything back (we hold more
-- than that rough share, or as much with free services with work
-- waiting: sql/claims_release_idle.sql), or when we do not know our own
-- count, the claims are counted through the claimant index instead, and
-- the share is exact. Live: a lease that has not run out, ours, or an
-- instance registered less than $4 ms ago that has not taken a lease yet
-- (so the first of several workers started together does not take
-- everything). Advisory: read outside the claims
-- transaction. Last, whether maintenance (sql/claims_maintain.sql) has
-- anyone to take claims from: another instance that holds claims and whose
-- lease ran out (the same test as its `gone`); the worker skips it
-- otherwise. And how much room the other live instances have below their
-- share (by the counts they report with their leases, at most half a cycle
-- old): while they can take the free services with work, this instance
-- keeps its idle claims (giving them back shrank every share and drained
-- others' claims with work, which woke every worker again). $1 instance,
-- $2 slack, $3 max claims (0 = none), $4 lease ms, $5 claims we hold
-- (NULL: not known, a read of all of them follows), $6 free services with
-- work are counted up to this many (what one pickup gives out at most: a
-- load of 100,000 services enqueued while no worker ran made every
-- housekeeping count all of them, and more would not change what the
-- next pickup gives), $7 they are read up to this many (what one instance
-- may receive in a pickup), and as many as that count as $6, as pickup
-- counts them (sql/claims_acquire.sql). Their rows churn while pickups
-- give them out, so each one read is a visit to the heap: reading the
-- whole bound cost 20,000 visits, most of a 16-worker fleet's time in
-- this statement.
WITH inst AS (
    SELECT greatest(1, count(*) FILTER (
               WHERE i.lease_1 > now() OR i.instance_id = $1
                  OR (i.lease_1 IS NULL
                      AND i.heartbeat_at > now() - $4::integer * interval '1 millisecond')))
               AS live,
           -- the others' reports while their leases run; the claims of one
           -- whose lease ran out, or that stopped, are counted (its last
           -- report stays behind when maintenance hands them over, and
           -- counted twice it kept shares too large to drain anyone), in
           -- one index scan for all of them: a count per instance row cost
           -- the generic plan that count times the estimated instance rows,
           -- and for a table never analysed that estimate put the plan past
           -- PostgreSQL's JIT thresholds
           (SELECT coalesce(sum(o.claims_held), 0)
              FROM queuer.instances o
             WHERE o.instance_id <> $1 AND o.lease_1 > now() AND o.stopped_at IS NULL)
               + (SELECT count(*) FROM queuer.service_id_claims h
                   WHERE h.claimant = ANY (ARRAY(
                             SELECT o.instance_id FROM queuer.instances o
                              WHERE o.instance_id <> $1
                                AND (o.lease_1 > now() AND o.stopped_at IS NULL) IS NOT TRUE)))
               + coalesce($5::integer, 0) AS reported
      FROM queuer.instances i
     WHERE i.stopped_at IS NULL
), free AS (
    SELECT CASE WHEN c.n >= least($6::integer, $7::integer) THEN $6::integer ELSE c.n END AS n
      FROM (SELECT count(*) AS n
              FROM (SELECT 1 FROM queuer.service_id_claims c WHERE c.claimant IS NULL AND c.has_work
                     LIMIT least($6::integer, $7::integer)) c) c
), held AS (
    SELECT CASE WHEN $5::integer IS NULL
                  OR $5::integer > r.n OR ($5::integer = r.n AND free.n > 0)
                THEN (SELECT count(*) FROM queuer.service_id_claims h WHERE h.claimant IS NOT NULL)
                ELSE inst.reported END AS n
      FROM inst, free,
           LATERAL (SELECT least(ceil((inst.reported + free.n)::numeric / inst.live)::integer
                                 + $2::integer, nullif($3::integer, 0)) AS n) r
), even AS (
    SELECT ceil((held.n + free.n)::numeric / inst.live)::integer + $2::integer AS n
      FROM inst, free, held
)
-- (a cap of 0 is none: least() passes over the NULL)
SELECT least(even.n, nullif($3::integer, 0)),
       held.n + free.n, inst.live, free.n,
       EXISTS (SELECT 1 FROM queuer.instances g
                WHERE g.instance_id <> $1
                  AND coalesce(g.lease_1, '-infinity') < now()
                  AND EXISTS (SELECT 1 FROM queuer.service_id_claims h
                               WHERE h.claimant = g.instance_id)) AS lapsed,
       (SELECT coalesce(sum(greatest(0, least(even.n, nullif(o.max_claims, 0))
                                        - o.claims_held)), 0)
          FROM queuer.instances o
         WHERE o.instance_id <> $1 AND o.stopped_at IS NULL AND o.lease_1 > now())
           AS room_elsewhere
  FROM inst, free, held, even
