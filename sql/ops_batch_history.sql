-- queuer batch show: the batch's full history, oldest first. $1 batch id.
-- Columns: id, time (UTC, ISO 8601), from ('' = none), to, instance ('' =
-- none, e.g. enqueue), claim epoch (NULL = none), detail ('' = none).
SELECT h.id, to_char(h.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       coalesce(h.from_status, ''), h.to_status, coalesce(h.instance_id, ''), h.claim_epoch,
       coalesce(h.detail, '')
  FROM queuer.history h
 WHERE h.batch_id = $1
 ORDER BY h.id
