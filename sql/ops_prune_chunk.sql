-- queuer prune: deletes up to $2 final batches (Committed, Valid,
-- Invalid) that became final before $1 (timestamptz) and not before $3
-- (timestamptz, NULL = no lower bound), oldest first, and their history
-- rows, in one short transaction. The caller passes the previous chunk's
-- newest status_at as $3, so each chunk starts where the last one ended
-- instead of stepping over the index entries it just deleted. Rows locked
-- by anyone else are skipped (SKIP LOCKED): it never waits on or blocks a
-- worker, and workers never touch final batches. Returns batches deleted
-- by status (Committed, Valid, Invalid), history rows deleted, and the
-- newest status_at deleted (timestamptz text, NULL when none). Needs
-- DELETE on queuer.batches and queuer.batch_history (the schema owner).
WITH doomed AS (
    SELECT b.batch_id, b.status_at
      FROM queuer.batches b
     WHERE b.status IN ('Committed', 'Valid', 'Invalid')
       AND b.status_at < $1::timestamptz
       AND b.status_at >= coalesce($3::timestamptz, '-infinity')
     ORDER BY b.status_at
     LIMIT $2::integer
       FOR UPDATE SKIP LOCKED
), gone_history AS (
    DELETE FROM queuer.batch_history h
     USING doomed d
     WHERE h.batch_id = d.batch_id
    RETURNING h.id
), gone AS (
    DELETE FROM queuer.batches b
     USING doomed d
     WHERE b.batch_id = d.batch_id
    RETURNING b.status, b.status_at
)
SELECT count(*) FILTER (WHERE g.status = 'Committed'),
       count(*) FILTER (WHERE g.status = 'Valid'),
       count(*) FILTER (WHERE g.status = 'Invalid'),
       (SELECT count(*) FROM gone_history),
       max(g.status_at)::text
  FROM gone g
