-- Renews this instance's partitions of the current generation that are
-- past half their lease, except those about to be given back. A lapsed
-- lease is not renewed (someone may have taken it meanwhile).
-- $1 ledger, $2 generation, $3 instance, $4 lease ms, $5 int[] not renewed.
UPDATE queuer.capacity_partitions p
   SET expiry = now() + $4::integer * interval '1 millisecond'
 WHERE p.ledger = $1 AND p.generation = $2::bigint AND p.holder = $3
   AND p.expiry > now()
   AND p.expiry < now() + ($4::integer / 2) * interval '1 millisecond'
   AND p.partition_no <> ALL ($5::integer[])
