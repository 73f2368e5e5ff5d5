-- queuer capacity set: replaces a ledger's shared capacity. $1 ledger,
-- $2 max in flight, $3 per second, $4 partition size (NULL = default),
-- $5 reserved per instance. Returns the row as stored.
SELECT c.ledger, c.max_in_flight, c.per_second, c.partition_size, c.reserved_per_instance,
       c.partitions, c.generation
  FROM queuer.capacity_set($1, $2::bigint, $3::bigint, $4::bigint, coalesce($5::bigint, 0)) c
