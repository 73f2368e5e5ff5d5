-- Deletes partitions of older generations that nobody uses any more: free
-- or lapsed ones, and this instance's own when $4 says its submitter has
-- stopped using them. $1 ledger, $2 current generation, $3 instance,
-- $4 boolean.
DELETE FROM queuer.capacity_partitions p
 WHERE p.ledger = $1 AND p.generation < $2::bigint
   AND (p.holder IS NULL OR p.expiry <= now() OR (p.holder = $3 AND $4::boolean))
