-- 0024: parked batches (Delayed with retry_at = infinity, waiting for an
-- operator) get a partial index of their own. A head can be parked only if
-- the service has a parked batch, and parked batches are rare, so the
-- search for idle claims (sql/claims_release_idle.sql) reads the few
-- services with one from this index once per statement and probes the head
-- (queuer.head_parked) of those only, instead of the head of every held
-- service with work (a probe of the batches index for each of thousands of
-- claims, every time a worker at its share makes room).
CREATE INDEX batches_parked ON queuer.batches (service_id)
    WHERE status = 'Delayed' AND retry_at = 'infinity';
