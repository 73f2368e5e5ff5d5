-- queuer batch: finds the batch a full id or a unique prefix names. $1 a
-- lower-case hex prefix (16..128 characters). Returns at most two ids, so
-- the caller can tell "unique" from "ambiguous". The range keeps it an
-- index scan on the primary key (batch ids hold only 0-9a-f, all below 'g').
SELECT b.batch_id
  FROM queuer.batch_states b
 WHERE b.batch_id >= $1::text
   AND b.batch_id < $1::text || 'g'
   AND left(b.batch_id, length($1::text)) = $1::text
 ORDER BY b.batch_id
 LIMIT 2
