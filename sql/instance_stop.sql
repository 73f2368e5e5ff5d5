-- Marks this worker stopped on a clean exit, and ends its soft lease: a
-- claim it could not give back (an enqueue of the service was in progress)
-- is handed over by the next maintenance, not a lease later. $1 instance,
-- $2 our incarnation.
UPDATE queuer.instances
   SET stopped_at = now(), heartbeat_at = now(), lease_1 = least(lease_1, now())
 WHERE instance_id = $1 AND incarnation = $2::bigint
