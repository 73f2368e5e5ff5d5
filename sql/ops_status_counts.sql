-- queuer status: the headline numbers, one row, from the operator views.
-- Columns: 0 database time (UTC, ISO 8601); unfinished batches by state:
-- 1 waiting, 2 submitting, 3 Pending, 4 Delayed, 5 parked, 6 Unknown,
-- 7 age of the oldest unfinished batch in seconds (NULL = none);
-- services: 8 total, 9 with work, 10 claimed (lease live), 11 with work
-- but no live claim, 12 ingest-blocked; 13 stuck batches; reached in the
-- last hour: 14 Committed, 15 Valid, 16 Invalid, 17 Cancelled,
-- 18 submissions; in the last 5 minutes: 19 Committed, 20 submissions.
WITH c AS (
    SELECT bc.state, bc.batches, bc.oldest_created_at FROM queuer.batch_counts bc
), s AS (
    SELECT count(*) AS services,
           count(*) FILTER (WHERE so.backlog > 0) AS with_work,
           count(*) FILTER (WHERE so.claim_state = 'held') AS claimed,
           count(*) FILTER (WHERE so.backlog > 0 AND so.claim_state <> 'held') AS unclaimed,
           count(*) FILTER (WHERE so.ingest_blocked) AS ingest_blocked
      FROM queuer.service_overview so
), h AS (
    SELECT sc.status, sc.last_5m, sc.last_1h FROM queuer.status_counts sc
)
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'waiting'), 0),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'submitting'), 0),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'Pending'), 0),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'Delayed'), 0),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'parked'), 0),
       coalesce((SELECT c.batches FROM c WHERE c.state = 'Unknown'), 0),
       (SELECT floor(extract(epoch FROM now() - min(c.oldest_created_at)))::bigint FROM c),
       s.services, s.with_work, s.claimed, s.unclaimed, s.ingest_blocked,
       (SELECT count(*) FROM queuer.stuck_batches),
       coalesce((SELECT h.last_1h FROM h WHERE h.status = 'Committed'), 0),
       coalesce((SELECT h.last_1h FROM h WHERE h.status = 'Valid'), 0),
       coalesce((SELECT h.last_1h FROM h WHERE h.status = 'Invalid'), 0),
       coalesce((SELECT h.last_1h FROM h WHERE h.status = 'Cancelled'), 0),
       coalesce((SELECT h.last_1h FROM h WHERE h.status = 'Submitting'), 0),
       coalesce((SELECT h.last_5m FROM h WHERE h.status = 'Committed'), 0),
       coalesce((SELECT h.last_5m FROM h WHERE h.status = 'Submitting'), 0)
  FROM s
