-- The registration of an instance id: host, pid, whether it stopped and how
-- long ago its last heartbeat was (ms), for the twin check at start.
-- $1 instance.
SELECT i.host, i.pid, i.stopped_at IS NOT NULL AS stopped,
       (extract(epoch FROM now() - i.heartbeat_at) * 1000)::bigint AS heartbeat_age_ms
  FROM queuer.instances i
 WHERE i.instance_id = $1
