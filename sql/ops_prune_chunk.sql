-- queuer prune: deletes up to $2 final batches (Committed, Valid,
-- Invalid) that became final before $1 (timestamptz), oldest first, and
-- their history rows, in one short transaction. Rows locked by anyone else
-- are skipped (SKIP LOCKED), so it never waits on or blocks a worker;
-- workers never touch final batches. Returns batches deleted by status
-- (Committed, Valid, Invalid) and history rows deleted. Needs DELETE on
-- queuer.batches and queuer.batch_history (the schema owner).
WITH doomed AS (
    SELECT b.batch_id
      FROM queuer.batches b
     WHERE b.status IN ('Committed', 'Valid', 'Invalid')
       AND b.status_at < $1::timestamptz
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
    RETURNING b.status
)
SELECT count(*) FILTER (WHERE g.status = 'Committed'),
       count(*) FILTER (WHERE g.status = 'Valid'),
       count(*) FILTER (WHERE g.status = 'Invalid'),
       (SELECT count(*) FROM gone_history)
  FROM gone g
