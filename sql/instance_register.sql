-- Registers (or re-registers) this worker with a new incarnation, unless another live process
-- already runs under the same instance_id: a twin would share claimant and
-- epoch, so fencing could not tell their writes apart. An earlier
-- registration is taken over when it stopped, when its heartbeat is older
-- than the liveness window, or when the caller found its process dead on
-- this host ($6); the new incarnation fences the earlier process (its
-- lease renewal and its fenced writes name the old one and match nothing).
-- Returns the instance, its incarnation, and, when it replaced a
-- registration whose POSTs may still reach the ledger (its process died or
-- froze, maybe while posting, or it stopped keeping claims with a batch
-- mid-submission: its stop abandoned POSTs), the milliseconds since that
-- one's last heartbeat (NULL otherwise) and whether it stopped (then that
-- heartbeat is the stop): the new incarnation holds its claims at their
-- epochs and adopts its batches mid-submission at once, so the worker posts
-- nothing until the earlier POSTs have landed or never will. The new
-- registration has no batch waiting for the ledger yet (waiting_priority).
-- No row when a live twin holds the id (look at it with instance_lookup).
-- $1 instance, $2 host, $3 pid, $4 version, $5 liveness window ms,
-- $6 take over a recent registration (boolean).
WITH earlier AS (
    SELECT (extract(epoch FROM now() - e.heartbeat_at) * 1000)::bigint AS age_ms,
           e.stopped_at IS NOT NULL AS stopped
      FROM queuer.instances e
     WHERE e.instance_id = $1
       AND (e.stopped_at IS NULL
            OR EXISTS (SELECT 1 FROM queuer.service_id_claims c
                        WHERE c.claimant = $1 AND c.submitting))
)
INSERT INTO queuer.instances AS i (instance_id, host, pid, version)
VALUES ($1, $2, $3::integer, $4)
ON CONFLICT (instance_id) DO UPDATE
   SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
       started_at = now(), heartbeat_at = now(), stopped_at = NULL,
       incarnation = nextval('queuer.instance_incarnation'), waiting_priority = NULL
 WHERE i.stopped_at IS NOT NULL
    OR i.heartbeat_at < now() - $5::integer * interval '1 millisecond'
    OR $6::boolean
RETURNING i.instance_id, i.incarnation, (SELECT e.age_ms FROM earlier e),
          (SELECT e.stopped FROM earlier e)
