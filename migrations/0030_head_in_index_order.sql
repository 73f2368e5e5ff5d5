-- 0030: a service's head is found in index order, whatever the plan saw.
--
-- A service's head (its oldest non-final batch, by created_at then
-- batch_id) is read through batches_open, keyed (service_id, created_at)
-- since 0014. Asked for in one step, ORDER BY created_at, batch_id
-- LIMIT 1, the answer is cheap only if the planner chooses an incremental
-- sort over the index's order; a plan made while the table held few rows
-- (a worker's session plans its statements once, generically) sorts every
-- open batch of the service instead. Measured with 2,000 open batches per
-- service: ~4 ms a probe, paid once per batch, so a queue of n batches
-- cost O(n^2) to drain. The worker's statements (sql/outcomes_record.sql,
-- batches_fetch*.sql, claims_release*.sql) now take the head's created_at
-- first, in the index's own order, then the tie-break by id among the
-- batches with that created_at; queuer.head_parked does the same here.
-- Same answer; no table is touched.

CREATE OR REPLACE FUNCTION queuer.head_parked(p_service_id text) RETURNS boolean
LANGUAGE sql VOLATILE AS $fn$
    SELECT coalesce((SELECT h.status = 'Delayed' AND h.retry_at = 'infinity'::timestamptz
                       FROM queuer.batches h
                      WHERE h.service_id = p_service_id
                        AND (h.status IS NULL OR h.status IN ('Pending', 'Unknown', 'Delayed'))
                        AND h.created_at = (SELECT f.created_at FROM queuer.batches f
                                             WHERE f.service_id = p_service_id
                                               AND (f.status IS NULL
                                                    OR f.status IN ('Pending', 'Unknown',
                                                                    'Delayed'))
                                             ORDER BY f.created_at
                                             LIMIT 1)
                      ORDER BY h.batch_id
                      LIMIT 1), false)
$fn$;
