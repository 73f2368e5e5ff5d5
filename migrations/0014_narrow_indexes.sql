-- 0014: less work for PostgreSQL per batch and per enqueued line:
-- narrower index entries, bulk ingest kept in memory, a cheaper owner check.
--
-- Every batch costs PostgreSQL index entries keyed by its 128-character id:
-- one in the history's batch index per history row (three or more per
-- batch: Enqueued, Submitting, the final status) and one in batches_open
-- per row version while the batch is unfinished (at enqueue and at every
-- mark, as no update of a batch can be HOT: its status is in the indexes'
-- predicates). Such an entry is ~150 bytes, and inserting it compares
-- long keys all the way down a B-tree. Measured on 100,000 enqueued
-- batches: batch_history_batch 23 MB, batches_open 32 MB, against 22 MB
-- for the batches primary key (bench/PERFORMANCE.md, "Bulk enqueue").
--
-- 1. batch_history_batch becomes a hash index on batch_id: an entry holds
--    a 4-byte hash code, whatever the id's length. Every reader of the
--    history by batch looks a batch up by equality and then orders its few
--    rows by id (`queuer batch history`, the Submitting row of
--    queuer.stuck_batches, the worker's re-checks after an ambiguous
--    commit, `queuer prune`), so a small sort replaces the B-tree order.
-- 2. batches_open loses its last column, batch_id: (service_id, created_at).
--    Readers still order by (created_at, batch_id), DESIGN's tie-break; the
--    ids only decide between batches of one service with the same
--    created_at, which enqueue never hands out (each service's batches get
--    strictly increasing created_at, migration 0001) and which an
--    incremental sort settles if one is ever written by hand.
--
-- The primary key on batch_id stays as it is: it enforces the id's
-- uniqueness and is how operators and workers name a batch.
-- Existing data is converted by rebuilding both indexes here.

DROP INDEX queuer.batch_history_batch;
CREATE INDEX batch_history_batch ON queuer.batch_history USING hash (batch_id);

DROP INDEX queuer.batches_open;
CREATE INDEX batches_open ON queuer.batches (service_id, created_at)
    WHERE status IS NULL OR status IN ('Pending', 'Unknown', 'Delayed');

-- 3. queuer.enqueue_staged() gets room to keep a load in memory. One call
--    stores a whole load (src/ingest/enqueue.c) and keeps several row
--    sets of it in tuplestores: the RETURNING rows, and the transition
--    tables of the statement triggers on queuer.batches (whole rows,
--    payloads included: ~1.1 kB a line) and queuer.batch_history. At the
--    default work_mem (4 MB) they spill to temporary files: 137 MB written
--    for 100,000 lines. Measured on 50,000 lines, PostgreSQL's CPU per line
--    went from 39-48 us to 31-32 us with 256 MB (64 MB: 36-41 us). The
--    memory is taken only as a load needs it, per call; a load larger than
--    ~200,000 lines spills its largest set again. An administrator can
--    lower it: ALTER FUNCTION queuer.enqueue_staged(integer, integer, boolean)
--    SET work_mem = '...'.
ALTER FUNCTION queuer.enqueue_staged(integer, integer, boolean) SET work_mem = '256MB';

-- 4. queuer.role_is_owner() (migration 0007), asked by the history writer
--    check once per statement that appends history (every mark and every
--    outcome group), keeps its query plan for the session: the SQL-language
--    body with a FROM clause was not inlined and was planned again on every
--    call, ~160 us each. Same answer: whether the current role is a member
--    of the queuer schema's owner (NULL without the schema).
CREATE OR REPLACE FUNCTION queuer.role_is_owner() RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN (SELECT pg_has_role(current_user, n.nspowner, 'MEMBER')
              FROM pg_catalog.pg_namespace n WHERE n.nspname = 'queuer');
END
$fn$;
