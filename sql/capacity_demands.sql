-- The live workers of a ledger and their targets, in the order every
-- worker uses for the split (instance id, byte order). $1 ledger, $2 this
-- instance (listed even when its row lapsed).
SELECT i.instance_id, i.target
  FROM queuer.capacity_instances i
 WHERE i.ledger = $1
   AND (i.expiry > now() OR i.instance_id = $2)
 ORDER BY i.instance_id COLLATE "C"
