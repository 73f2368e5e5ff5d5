-- queuer capacity show: each ledger with a capacity (all when $1 is NULL),
-- its settings and its partitions by state. Columns: ledger, max in
-- flight, per second, partition size, reserved per instance, partitions,
-- generation, updated_at, updated_by, held, free, lapsed, retiring.
SELECT c.ledger, c.max_in_flight, c.per_second, c.partition_size, c.reserved_per_instance,
       c.partitions, c.generation,
       to_char(c.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), c.updated_by,
       count(*) FILTER (WHERE o.state = 'held'),
       count(*) FILTER (WHERE o.state = 'free'),
       count(*) FILTER (WHERE o.state = 'lapsed'),
       count(*) FILTER (WHERE o.state = 'retiring')
  FROM queuer.capacity c
  LEFT JOIN queuer.capacity_overview o ON o.ledger = c.ledger
 WHERE $1::text IS NULL OR c.ledger = $1
 GROUP BY c.ledger
 ORDER BY c.ledger
