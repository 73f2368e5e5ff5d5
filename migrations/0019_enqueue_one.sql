-- 0019: the one-batch enqueue, queuer.enqueue_batch(), in a few plain
-- statements of its own.
--
-- queuer.enqueue_batch() wrapped its batch in an array and went through
-- queuer.enqueue_rows() and queuer.enqueue_rows_unchecked(): three
-- SECURITY DEFINER calls, a set_config() pair, and one statement of a
-- dozen CTEs (checks, duplicates, back pressure with window functions,
-- the insert, the history row, the ingest state, the refusals) whose
-- plan, made for any number of rows, cost about 1.4 ms per call for one.
-- Its payload was checked by the row trigger, and its history row by the
-- writer check (role_is_owner()). Measured with an application's calls
-- (bench/enqueue_sql.sh SINGLE=1: 200 calls/s over 1,000 services, no
-- workers, unnamed statements) it took 2.1 to 2.7 ms of backend CPU per
-- call.
--
-- Now the function does one batch's work directly, each step a statement
-- on one row whose plan is the same whatever the values:
--   1. the ids' formats, the payload's size, and a stored batch with the
--      same id (the same batch again is 'duplicate' without checking its
--      payload a second time; other content is QU409);
--   2. the payload, once, with queuer.batchlist_defect();
--   3. the service's ingest row is locked by the UPDATE that takes the
--      batch's created_at from it (created on the service's first batch,
--      with its claims row, as before), then the backlog is read from the
--      claim row's n_open and the hysteresis of 0001 applied;
--   4. the batch and its 'Enqueued' history row are inserted, the ingest
--      row's blocked flag is written only when it changes, and the
--      service's workers are woken by NOTIFY as before.
-- The outcomes, messages, SQLSTATEs, marks (queuer.ingest_high/low for
-- the schema owner's sessions only, 0007) and the created_at order are
-- those of queuer.enqueue_rows(); a concurrent enqueue of the same id is
-- settled by ON CONFLICT and classified like a stored one.
--
-- The function is owned by queuer_loader, like queuer.enqueue_staged()
-- (0011), so its insert skips the payload trigger and its history row the
-- writer check: the function checks the payload itself (step 2), and the
-- history row it writes is its own 'Enqueued' row. current_user is
-- queuer_loader inside these two functions only; one checks every payload
-- it stores and the other stores only rows its caller staged after
-- checking them (0011). queuer.enqueue_rows() is unchanged.

CREATE OR REPLACE FUNCTION queuer.enqueue_batch(p_service_id text, p_batch_id text,
                                                p_payload bytea, p_priority integer DEFAULT 0)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    s_high   integer;
    s_low    integer;
    s_max    integer;
    defect   text;
    blocked  boolean;      -- the service's ingest state before this batch
    backlog  integer := 0; -- its non-final batches before this batch
    created  timestamptz;  -- the batch's created_at
    e_svc    text;         -- a stored batch with this id: its service
    e_same   boolean;      -- and whether its payload is this one
BEGIN
    -- session marks: the owner's sessions only (0007)
    IF (coalesce(current_setting('queuer.ingest_high', true), '') <> ''
        OR coalesce(current_setting('queuer.ingest_low', true), '') <> '')
       AND NOT pg_has_role(session_user,
                           (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'queuer'),
                           'MEMBER') THEN
        RAISE EXCEPTION 'role % may not set queuer.ingest_high / queuer.ingest_low; '
                        'the back-pressure marks are queuer.settings (the owner changes them)',
                        session_user
            USING ERRCODE = '42501',
                  HINT = 'RESET queuer.ingest_high; RESET queuer.ingest_low (queuer enqueue: '
                         'leave ingest.high and ingest.low at -1)';
    END IF;
    IF p_priority IS NULL OR p_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'priority must be an integer from -1000 to 1000, not %',
                        coalesce(p_priority::text, 'NULL')
            USING ERRCODE = 'QU400';
    END IF;
    -- 1. the ids
    IF p_service_id IS NULL
       OR p_service_id !~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$' THEN
        defect := 'service_id must be <5 letters/digits>-<5 letters/digits>::<4 letters/digits>';
    ELSIF p_batch_id IS NULL OR length(p_batch_id) <> 128 OR p_batch_id !~ '^[0-9a-f]*$' THEN
        defect := 'batch_id must be 128 lower-case hex characters';
    ELSIF p_payload IS NULL OR octet_length(p_payload) = 0 THEN
        defect := 'payload is empty';
    END IF;
    IF defect IS NOT NULL THEN
        RAISE EXCEPTION '%', defect
            USING ERRCODE = 'QU400', DETAIL = 'batch_id ' || coalesce(p_batch_id, '(none)');
    END IF;

    -- 2. lock the service and take created_at after the lock: later than
    -- every created_at already given to the service; the settings come
    -- with it
    LOOP
        UPDATE queuer.service_ingest i
           SET last_created_at = greatest(clock_timestamp(),
                                          i.last_created_at + interval '1 microsecond')
          FROM queuer.settings s
         WHERE i.service_id = p_service_id
        RETURNING i.blocked, i.last_created_at, s.ingest_high, s.ingest_low, s.max_payload_bytes
             INTO blocked, created, s_high, s_low, s_max;
        EXIT WHEN FOUND;
        -- the service's first batch (a concurrent first enqueue may win
        -- the insert; the UPDATE then finds its row)
        INSERT INTO queuer.service_ingest AS i (service_id, last_created_at)
        SELECT p_service_id, clock_timestamp()
        ON CONFLICT DO NOTHING
        RETURNING i.blocked, i.last_created_at INTO blocked, created;
        IF FOUND THEN
            INSERT INTO queuer.service_id_claims (service_id) VALUES (p_service_id)
            ON CONFLICT DO NOTHING;
            SELECT s.ingest_high, s.ingest_low, s.max_payload_bytes INTO s_high, s_low, s_max
              FROM queuer.settings s;
            EXIT;
        END IF;
    END LOOP;
    s_high := coalesce(nullif(current_setting('queuer.ingest_high', true), '')::integer, s_high);
    s_low := coalesce(nullif(current_setting('queuer.ingest_low', true), '')::integer, s_low);
    IF s_high < 0 OR s_low < 0 OR (s_high > 0 AND s_low >= s_high) THEN
        RAISE EXCEPTION 'ingest marks: low (%) must be below high (%), both >= 0', s_low, s_high
            USING ERRCODE = '22023';
    END IF;

    -- 3. the payload: its size, then its content, once
    IF octet_length(p_payload) > s_max THEN
        RAISE EXCEPTION 'payload is % bytes, the limit is %', octet_length(p_payload), s_max
            USING ERRCODE = 'QU413', DETAIL = 'batch_id ' || p_batch_id;
    END IF;
    defect := queuer.batchlist_defect(p_payload, p_batch_id);
    IF defect IS NOT NULL THEN
        RAISE EXCEPTION '%', defect USING ERRCODE = 'QU400', DETAIL = 'batch_id ' || p_batch_id;
    END IF;

    -- 4. back pressure, from the claim row's count of non-final batches
    -- (kept by the batches triggers), read after the lock, so it holds
    -- every batch enqueued for the service before this one
    IF s_high > 0 THEN
        SELECT c.n_open INTO backlog FROM queuer.service_id_claims c
         WHERE c.service_id = p_service_id;
        backlog := coalesce(backlog, 0);
        -- hysteresis: blocked from reaching high until the backlog is below low
        IF (blocked AND backlog >= s_low) OR backlog >= s_high THEN
            -- the same batch again is a duplicate, whatever the backlog
            SELECT b.service_id, b.payload = p_payload INTO e_svc, e_same
              FROM queuer.batches b WHERE b.batch_id = p_batch_id;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'service % has % batches waiting (high mark %); enqueues '
                                'resume below % waiting', p_service_id, backlog, s_high, s_low
                    USING ERRCODE = 'QU429', DETAIL = 'batch_id ' || p_batch_id;
            END IF;
        END IF;
    END IF;

    -- 5. the batch and its history row; a batch_id already stored (before
    -- or by a concurrent enqueue) inserts neither
    IF e_svc IS NULL THEN
        WITH b AS (
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
            VALUES (p_batch_id, p_service_id, p_payload, created, p_priority)
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING b.batch_id, b.service_id
        )
        INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
        SELECT b.batch_id, b.service_id, 'Enqueued' FROM b;
        IF NOT FOUND THEN
            SELECT b.service_id, b.payload = p_payload INTO e_svc, e_same
              FROM queuer.batches b WHERE b.batch_id = p_batch_id;
        END IF;
    END IF;
    IF e_svc IS NOT NULL THEN
        IF e_svc = p_service_id AND e_same THEN
            RETURN 'duplicate';
        END IF;
        RAISE EXCEPTION 'batch_id is already enqueued with a different service or payload'
            USING ERRCODE = 'QU409', DETAIL = 'batch_id ' || p_batch_id;
    END IF;

    -- 6. the ingest state (written only when it changes) and the wake-up
    IF (s_high > 0 AND backlog + 1 >= s_high) <> blocked THEN
        UPDATE queuer.service_ingest i SET blocked = NOT i.blocked
         WHERE i.service_id = p_service_id;
    END IF;
    PERFORM pg_notify('queuer_work', p_service_id);
    RETURN 'enqueued';
END
$fn$;
COMMENT ON FUNCTION queuer.enqueue_batch(text, text, bytea, integer) IS
    'Enqueues one batch at a priority (-1000..1000, default 0). Returns ''enqueued'', or '
    '''duplicate'' when the same batch (id, service, payload) is already stored; raises QU400 '
    '(invalid), QU409 (batch_id taken by other content), QU413 (payload too large), QU429 '
    '(back pressure: retry once the service''s backlog is below the low mark). Session marks '
    'queuer.ingest_high/low are honoured for the schema owner only.';

-- The new owner must be able to create in the schema for the change of
-- owner only (as in 0011).
GRANT CREATE ON SCHEMA queuer TO queuer_loader;
ALTER FUNCTION queuer.enqueue_batch(text, text, bytea, integer) OWNER TO queuer_loader;
REVOKE CREATE ON SCHEMA queuer FROM queuer_loader;
GRANT SELECT, UPDATE ON queuer.service_ingest TO queuer_loader;
GRANT SELECT ON queuer.service_id_claims TO queuer_loader;
GRANT EXECUTE ON FUNCTION queuer.batchlist_defect(bytea, text),
                          queuer.batchlist_defect_walk(bytea, text) TO queuer_loader;
REVOKE ALL ON FUNCTION queuer.enqueue_batch(text, text, bytea, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.enqueue_batch(text, text, bytea, integer)
    TO queuer_worker, queuer_enqueuer;
