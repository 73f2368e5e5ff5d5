-- Each worker's target and held shared capacity (all ledgers when $1 is
-- NULL), live ones first. Columns: ledger, instance, state (live | gone),
-- target, cost, partitions, reserved partitions, in flight, per second
-- (NULL when that limit is not set).
SELECT i.ledger, i.instance_id, i.state, i.target, i.cost, i.partitions,
       i.reserved_partitions, i.in_flight, i.per_second
  FROM queuer.capacity_instance_overview i
 WHERE $1::text IS NULL OR i.ledger = $1
 ORDER BY i.ledger, CASE i.state WHEN 'live' THEN 0 ELSE 1 END, i.instance_id
