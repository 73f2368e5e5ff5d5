-- queuer prune: deletes the enqueue log's rows (queuer.enqueue_log, the
-- counts of batches stored per enqueue call and service) written before
-- $1 (timestamptz), once the run's final batches are gone. Nothing updates
-- the log and its writers only insert, so the delete waits on no one.
-- Returns the rows deleted. Needs DELETE on queuer.enqueue_log (the
-- schema owner).
WITH gone AS (
    DELETE FROM queuer.enqueue_log e
     WHERE e.at < $1::timestamptz
    RETURNING 1
)
SELECT count(*) FROM gone
