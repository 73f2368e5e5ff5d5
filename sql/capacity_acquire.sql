-- Takes up to $4 free partitions (no holder, or a lapsed lease) of the
-- current generation for this instance, as its reservation when $5. Not
-- while a partition of an older generation is still held with a live
-- lease: old and new capacity are never used together. Rows locked by a
-- concurrent step are skipped; the update re-checks that each is still
-- free at its newest version (READ COMMITTED), so a partition has one
-- holder at a time. $1 ledger, $2 generation, $3 instance, $4 how many,
-- $5 reserved, $6 lease ms. Returns the partitions taken.
WITH pick AS MATERIALIZED (
    SELECT p.partition_no
      FROM queuer.capacity_partitions p
     WHERE p.ledger = $1 AND p.generation = $2::bigint
       AND (p.holder IS NULL OR p.expiry <= now())
       AND NOT EXISTS (SELECT 1 FROM queuer.capacity_partitions o
                        WHERE o.ledger = $1 AND o.generation < $2::bigint
                          AND o.holder IS NOT NULL AND o.expiry > now())
     ORDER BY p.partition_no
     LIMIT $4::integer
       FOR UPDATE SKIP LOCKED
)
UPDATE queuer.capacity_partitions p
   SET holder = $3, reserved = $5::boolean, epoch = p.epoch + 1,
       expiry = now() + $6::integer * interval '1 millisecond'
 WHERE p.ledger = $1 AND p.generation = $2::bigint
   AND p.partition_no = ANY (ARRAY(SELECT k.partition_no FROM pick k))
   AND (p.holder IS NULL OR p.expiry <= now())
RETURNING p.partition_no
