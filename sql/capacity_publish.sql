-- Publishes this instance's target for a ledger and keeps it counted as
-- live for one lease. $1 ledger, $2 instance, $3 target (cost units),
-- $4 cost kind, $5 lease ms.
INSERT INTO queuer.capacity_instances AS i (ledger, instance_id, target, cost, expiry, updated_at)
VALUES ($1, $2, $3::bigint, $4, now() + $5::integer * interval '1 millisecond', now())
ON CONFLICT (ledger, instance_id) DO UPDATE
   SET target = excluded.target, cost = excluded.cost, expiry = excluded.expiry,
       updated_at = excluded.updated_at
