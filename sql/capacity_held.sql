-- This instance's partitions of the current generation with a live lease:
-- number, reservation, sizes, epoch and the lease left (ms, database
-- clock). $1 ledger, $2 generation, $3 instance.
SELECT p.partition_no, p.reserved, p.in_flight, p.per_second, p.epoch,
       (extract(epoch FROM p.expiry - now()) * 1000)::bigint AS lease_left_ms
  FROM queuer.capacity_partitions p
 WHERE p.ledger = $1 AND p.generation = $2::bigint AND p.holder = $3 AND p.expiry > now()
 ORDER BY p.partition_no
