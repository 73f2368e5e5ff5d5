-- Marks this worker stopped on a clean exit. $1 instance.
UPDATE queuer.instances SET stopped_at = now(), heartbeat_at = now() WHERE instance_id = $1
