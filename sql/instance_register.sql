-- Registers (or re-registers) this worker. $1 instance, $2 host, $3 pid, $4 version.
INSERT INTO queuer.instances (instance_id, host, pid, version)
VALUES ($1, $2, $3::integer, $4)
ON CONFLICT (instance_id) DO UPDATE
   SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
       started_at = now(), heartbeat_at = now(), stopped_at = NULL
