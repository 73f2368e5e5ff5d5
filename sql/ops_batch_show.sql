-- queuer batch show: one batch without its payload, with its service's
-- claim and its place in the service's queue. $1 batch id. Columns:
-- 0 batch_id, 1 service_id, 2 state (waiting | submitting | Pending |
-- Delayed | parked | Unknown | Committed | Valid | Invalid), 3 submitted,
-- 4 attempts, 5 created_at, 6 last_submitted_at, 7 retry_at, 8 status_at
-- (UTC, ISO 8601; NULL = never; retry_at may be 'infinity'), 9 last_error,
-- 10 payload bytes, 11 claimant, 12 claim epoch, 13 claim state (free |
-- held | lapsed | expired), 14 unfinished batches ahead of it (NULL when
-- final), 15 unfinished batches of the service.
SELECT b.batch_id, b.service_id,
       CASE WHEN b.status = 'Delayed' AND b.retry_at = 'infinity' THEN 'parked'
            WHEN b.status IS NOT NULL THEN b.status
            WHEN b.submitted THEN 'submitting'
            ELSE 'waiting' END,
       b.submitted, b.attempts,
       to_char(b.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       to_char(b.last_submitted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       CASE WHEN b.retry_at = 'infinity' THEN 'infinity'
            ELSE to_char(b.retry_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END,
       to_char(b.status_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       b.last_error, b.payload_bytes,
       c.claimant, c.claim_epoch,
       CASE WHEN c.claimant IS NULL THEN 'free'
            WHEN c.expiry_1 > now() THEN 'held'
            WHEN c.expiry_2 > now() THEN 'lapsed'
            ELSE 'expired' END,
       CASE WHEN b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed') THEN
           (SELECT count(*) FROM queuer.batch_states o
             WHERE o.service_id = b.service_id
               AND (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))
               AND (o.created_at, o.batch_id) < (b.created_at, b.batch_id)) END,
       (SELECT count(*) FROM queuer.batch_states o
         WHERE o.service_id = b.service_id
           AND (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed')))
  FROM queuer.batch_states b
  LEFT JOIN queuer.claims c ON c.service_id = b.service_id
 WHERE b.batch_id = $1
