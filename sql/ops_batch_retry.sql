-- queuer batch retry: a Delayed, Unknown or parked batch becomes due now,
-- fenced and audited by queuer.batch_retry() (migration 0002).
-- $1 batch id, $2 reason (NULL = none). Returns outcome, service_id,
-- from_state, to_state, message.
SELECT r.outcome, r.service_id, r.from_state, r.to_state, r.message
  FROM queuer.batch_retry($1::text, $2::text) r
