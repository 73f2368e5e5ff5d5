-- queuer status: the longest-stuck batches, at most $1. Columns: batch_id,
-- service_id, state, reasons (comma-separated), attempts, seconds stuck,
-- batches waiting behind it, claimant ('' = none), last error ('' = none).
SELECT s.batch_id, s.service_id, s.state, array_to_string(s.reasons, ','), s.attempts,
       floor(extract(epoch FROM s.stuck_for))::bigint, s.waiting_behind,
       coalesce(s.claimant, ''), coalesce(s.last_error, '')
  FROM queuer.stuck_batches s
 ORDER BY s.stuck_for DESC, s.batch_id
 LIMIT $1::integer
