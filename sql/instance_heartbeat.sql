-- Heartbeat, once per cycle, outside the serializable claims transaction
-- (so workers' heartbeats never conflict with each other). $1 instance.
-- Returns the database clock in microseconds since the epoch.
UPDATE queuer.instances SET heartbeat_at = now(), stopped_at = NULL
 WHERE instance_id = $1
RETURNING (extract(epoch FROM now()) * 1000000)::bigint
