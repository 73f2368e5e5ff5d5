-- queuer batch cancel: ends a batch that is not in flight as Invalid so
-- its service moves on, fenced and audited by queuer.batch_cancel()
-- (migration 0002). $1 batch id, $2 reason. Returns outcome, service_id,
-- from_state, to_state, message.
SELECT r.outcome, r.service_id, r.from_state, r.to_state, r.message
  FROM queuer.batch_cancel($1::text, $2::text) r
