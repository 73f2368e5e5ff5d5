-- queuer status: the oldest snapshot that holds back vacuum
-- (queuer.snapshot_holders past its thresholds), at most one row.
-- Columns: how many snapshots are past the thresholds, kind, pid (0 = none),
-- role ('' = not known), application ('' = none), state ('' = not visible),
-- transactions begun since the snapshot, seconds open (NULL = not visible).
SELECT count(*) OVER (), h.kind, coalesce(h.pid, 0), coalesce(h.role, ''),
       coalesce(h.application, ''), coalesce(h.state, ''), h.xids_behind,
       floor(extract(epoch FROM h.open_for))::bigint
  FROM queuer.snapshot_holders h
 WHERE h.holds_back
 ORDER BY h.xids_behind DESC
 LIMIT 1
