-- queuer batch retry --invalid: a batch marked Invalid by mistake is queued
-- again, audited by queuer.batch_retry_invalid() (migration 0005).
-- $1 batch id, $2 reason (required). Returns outcome, service_id,
-- from_state, to_state, message.
SELECT r.outcome, r.service_id, r.from_state, r.to_state, r.message
  FROM queuer.batch_retry_invalid($1::text, $2::text) r
