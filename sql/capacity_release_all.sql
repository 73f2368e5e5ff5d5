-- A stopping instance gives back every partition it holds (of any ledger
-- and generation) and stops counting as live. $1 instance. Returns the
-- partitions released.
WITH gone AS (DELETE FROM queuer.capacity_instances i WHERE i.instance_id = $1)
UPDATE queuer.capacity_partitions p
   SET holder = NULL, expiry = NULL, reserved = false, epoch = p.epoch + 1
 WHERE p.holder = $1
RETURNING p.partition_no
