-- The ledger's shared capacity, if set: limits, partition size, reserved
-- units per instance, number of partitions and the current generation.
-- No row = no capacity set (no limit). $1 ledger.
SELECT c.max_in_flight, c.per_second, c.partition_size, c.reserved_per_instance,
       c.partitions, c.generation
  FROM queuer.capacity c
 WHERE c.ledger = $1
