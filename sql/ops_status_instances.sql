-- queuer status: worker instances that are alive, dead, or stopped within
-- the last day, at most $1 rows, live ones first. Columns: instance_id,
-- host, pid, version, state (alive | dead | stopped), milliseconds since
-- the last heartbeat, claims held (live lease), claims lapsed, whether
-- LISTEN wake-ups reach it (delivered, not_delivered, off; "" = not reported).
SELECT i.instance_id, i.host, i.pid, i.version, i.state,
       floor(extract(epoch FROM i.heartbeat_age) * 1000)::bigint,
       i.claims_held, i.claims_lapsed, coalesce(i.notifications, '')
  FROM queuer.instance_overview i
 WHERE i.stopped_at IS NULL OR i.stopped_at > now() - interval '1 day'
 ORDER BY CASE i.state WHEN 'alive' THEN 0 WHEN 'dead' THEN 1 ELSE 2 END, i.instance_id
 LIMIT $1::integer
