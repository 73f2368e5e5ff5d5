-- 0006: queuer.throughput counts what the ledger accepted.
--
-- Since the fast path (a batch whose final status comes with the first
-- status answer is written straight from Submitting to its final status,
-- with no Pending row), "accepted" counted only the batches still Pending at
-- their first answer: a demo showed accepted 0 next to committed 4000. Now
-- a batch counts as accepted when it is recorded Pending, or when it goes
-- from Submitting straight to Committed or Valid (the ledger took it, 202).
-- An Invalid straight from Submitting is not counted: it is usually a 400
-- refusal (the ledger never took the batch). Same columns, same plan (one
-- range of the history by time).
CREATE OR REPLACE VIEW queuer.throughput AS
    WITH h AS (
        SELECT date_trunc('minute', x.at) AS minute, x.from_status, x.to_status
          FROM queuer.batch_history x
         WHERE x.at >= date_trunc('minute', now()) - interval '59 minutes'
    )
    SELECT m.minute,
           count(h.to_status) FILTER (WHERE h.to_status = 'Enqueued') AS enqueued,
           count(h.to_status) FILTER (WHERE h.to_status = 'Submitting') AS submissions,
           count(h.to_status) FILTER (WHERE h.to_status = 'Pending'
                                         OR (h.from_status = 'Submitting'
                                             AND h.to_status IN ('Committed', 'Valid')))
               AS accepted,
           count(h.to_status) FILTER (WHERE h.to_status = 'Committed') AS committed,
           count(h.to_status) FILTER (WHERE h.to_status = 'Valid') AS valid,
           count(h.to_status) FILTER (WHERE h.to_status = 'Invalid') AS invalid,
           count(h.to_status) FILTER (WHERE h.to_status = 'Delayed') AS delayed,
           count(h.to_status) FILTER (WHERE h.to_status = 'Unknown') AS unknown,
           count(h.to_status) FILTER (WHERE h.to_status IN ('Retrying', 'Cancelled'))
               AS operator_actions
      FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                           date_trunc('minute', now()), interval '1 minute') AS m(minute)
      LEFT JOIN h ON h.minute = m.minute
     GROUP BY m.minute;
COMMENT ON VIEW queuer.throughput IS
    'The last 60 minutes, one row per minute (the current one still filling), counted from '
    'the history: batches enqueued, submissions (POSTs started), accepted (taken by the ledger: '
    'recorded Pending, or Committed/Valid straight from Submitting when the first status '
    'answer was already final), and the statuses reached. A drop in committed with steady '
    'submissions points at the ledger.';
