-- Gives back these partitions of this instance (its submitter no longer
-- uses them). $1 ledger, $2 generation, $3 instance, $4 int[] partitions.
-- Returns the partitions released.
UPDATE queuer.capacity_partitions p
   SET holder = NULL, expiry = NULL, reserved = false, epoch = p.epoch + 1
 WHERE p.ledger = $1 AND p.generation = $2::bigint AND p.holder = $3
   AND p.partition_no = ANY ($4::integer[])
RETURNING p.partition_no
