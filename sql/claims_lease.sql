-- Renews this instance's lease, once per cycle, outside the serializable
-- claims transaction (one row, ours: it never conflicts with other
-- workers): every claim we hold is held until greatest(its own expiry_1,
-- lease_1) and hard-expires at greatest(its expiry_2, lease_2). Also the
-- heartbeat and the number of claims we hold (for the fair share). $1
-- instance, $2 lease ms, $3 hard-expiry ms, $4 claims held, $5 our
-- incarnation, $6 our worker.max_claims (0 = none; an enqueue gives no new
-- service to an instance at its cap), $7 whether LISTEN/NOTIFY wake-ups
-- reach us (delivered, not_delivered or off; NULL = not reported), $8 the
-- highest priority of our batches that waited for room at a ledger node
-- pushing back since the last renewal (NULL = none). Returns the database
-- clock in microseconds since the epoch, the milliseconds until the first
-- lease of another running instance runs out (NULL when none runs): live
-- workers renew theirs every cycle, so one that ends within a cycle is a
-- worker that stopped renewing, and maintenance is run at that moment, not
-- up to a cycle later; and the highest priority another running instance
-- reported waiting so (NULL = none): ours below it yield the ledger's room
-- (both from one read of the other instances).
-- No row when the instance is not registered under that incarnation (a
-- later registration of the same instance_id superseded us).
UPDATE queuer.instances i
   SET heartbeat_at = now(), stopped_at = NULL,
       lease_1 = now() + $2::integer * interval '1 millisecond',
       lease_2 = now() + $3::integer * interval '1 millisecond',
       claims_held = $4::integer, max_claims = $6::integer, notifications = $7::text,
       waiting_priority = $8::integer
  FROM (SELECT ceil(extract(epoch FROM min(o.lease_1) - now()) * 1000)::bigint AS lease_ms,
               max(o.waiting_priority) AS waiting
          FROM queuer.instances o
         WHERE o.instance_id <> $1 AND o.lease_1 > now() AND o.stopped_at IS NULL) peers
 WHERE i.instance_id = $1 AND i.incarnation = $5::bigint
RETURNING (extract(epoch FROM now()) * 1000000)::bigint, peers.lease_ms, peers.waiting
