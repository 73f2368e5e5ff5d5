-- 0004: the row type of the grouped outcome write.
--
-- sql/outcomes_record.sql takes one array of queuer.outcome (one element
-- per batch outcome) instead of twelve parallel arrays matched by
-- position. `expect` is an enum, so an expectation the statement does not
-- know is refused when the array is read, never treated as the widest
-- check.

CREATE TYPE queuer.outcome_expect AS ENUM ('posting', 'pending', 'inflight');
COMMENT ON TYPE queuer.outcome_expect IS
    'What a worker expects a batch to be before it records an outcome: posting = submitted '
    'without a status (its POST in progress), pending = status Pending, inflight = either '
    '(a batch adopted from an earlier owner).';

CREATE TYPE queuer.outcome AS (
    batch_id     text,                  -- the batch
    service_id   text,                  -- its service (the fence is the service's claim)
    epoch        bigint,                -- claim epoch the worker holds
    expect       queuer.outcome_expect, -- compare-and-set on the batch
    status       text,                  -- new status; NULL = none (handed back unposted)
    submitted    boolean,               -- submitted flag after the write
    attempts_add integer,               -- added to attempts
    retry_ms     bigint,                -- retry_at = now() + ms; NULL = none, -1 = never
    last_error   text,                  -- NULL = keep the stored one
    detail       text,                  -- history detail, NULL = none
    posted       boolean,               -- sets last_submitted_at
    go_on        boolean                -- a final outcome may mark the service's next batch
);
COMMENT ON TYPE queuer.outcome IS
    'One batch outcome written by a worker through sql/outcomes_record.sql.';
