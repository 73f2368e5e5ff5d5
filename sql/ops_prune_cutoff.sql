-- queuer prune: the cutoff for this run, fixed once so the run does not
-- chase batches that turn old while it works. $1 age in seconds. Returns
-- the cutoff as timestamptz text and as UTC ISO 8601 for the report.
SELECT (now() - $1::bigint * interval '1 second')::text,
       to_char((now() - $1::bigint * interval '1 second') AT TIME ZONE 'UTC',
               'YYYY-MM-DD"T"HH24:MI:SS"Z"')
