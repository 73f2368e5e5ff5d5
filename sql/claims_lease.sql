-- Renews this instance's lease, once per cycle, outside the serializable
-- claims transaction (one row, ours: it never conflicts with other
-- workers): every claim we hold is held until greatest(its own expiry_1,
-- lease_1) and hard-expires at greatest(its expiry_2, lease_2). Also the
-- heartbeat and the number of claims we hold (for the fair share). $1
-- instance, $2 lease ms, $3 hard-expiry ms, $4 claims held. Returns the
-- database clock in microseconds since the epoch; no row when the
-- instance is not registered.
UPDATE queuer.instances
   SET heartbeat_at = now(), stopped_at = NULL,
       lease_1 = now() + $2::integer * interval '1 millisecond',
       lease_2 = now() + $3::integer * interval '1 millisecond',
       claims_held = $4::integer
 WHERE instance_id = $1
RETURNING (extract(epoch FROM now()) * 1000000)::bigint
