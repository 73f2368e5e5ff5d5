-- Every partition of a ledger as this instance sees it: generation,
-- number, whether it is ours (held with a live lease), held as a
-- reservation, its sizes, and whether it is free (no holder or a lapsed
-- lease). $1 ledger, $2 this instance.
SELECT p.generation, p.partition_no,
       coalesce(p.holder = $2 AND p.expiry > now(), false) AS mine,
       p.reserved, p.in_flight, p.per_second,
       (p.holder IS NULL OR p.expiry <= now()) AS free
  FROM queuer.capacity_partitions p
 WHERE p.ledger = $1
 ORDER BY p.generation, p.partition_no
