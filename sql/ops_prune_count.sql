-- queuer prune --dry-run: final batches that became final before the
-- cutoff, by status. $1 cutoff (timestamptz). Returns Committed, Valid,
-- Invalid counts. Uses the batches_final_at index.
SELECT count(*) FILTER (WHERE b.status = 'Committed'),
       count(*) FILTER (WHERE b.status = 'Valid'),
       count(*) FILTER (WHERE b.status = 'Invalid')
  FROM queuer.batches b
 WHERE b.status IN ('Committed', 'Valid', 'Invalid')
   AND b.status_at < $1::timestamptz
