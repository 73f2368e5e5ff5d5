-- 0033: a lone enqueue's wake-up names the batch.
--
-- The holder of a service that queuer.enqueue_batch() gave one batch was
-- woken with "<service>:<epoch>", fetched the service's head (one
-- statement and one round trip) and then marked it. The wake-up is now
-- "<service>:<epoch>/<batch_id>", and the holder marks that batch without
-- a fetch: the mark (sql/batches_mark.sql) checks itself that the batch is
-- its service's oldest open one and that none is in flight, and leaves
-- the batch alone otherwise (the holder then fetches the service, as
-- before). The counters trigger still names services alone (a statement
-- that gives a service several batches, or a free service to a new
-- holder). A worker of an earlier version logs the new items as malformed
-- and reads all its claims instead: nothing is lost, but upgrade the
-- workers with the schema.

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
    held_by  text;         -- the service's holder, when it has one
    kept     text;         -- queuer.enqueue_counted, as set
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

    -- 4. back pressure, from the service's count of work (n_in on the
    -- ingest row locked above, less n_out on its claim row; kept by the
    -- batches triggers), so it holds every batch enqueued for the service
    -- before this one; the same read finds the service's holder
    SELECT i.n_in - c.n_out, c.claimant INTO backlog, held_by
      FROM queuer.service_ingest i JOIN queuer.service_id_claims c USING (service_id)
     WHERE i.service_id = p_service_id;
    backlog := coalesce(backlog, 0);
    IF s_high > 0 THEN
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
    -- or by a concurrent enqueue) inserts neither. A held service's batch
    -- is counted and its holder woken here (step 6), and the insert sets
    -- queuer.enqueue_counted to 'on' (every other insert: '', whatever the
    -- caller set) so that the counters trigger does not fire for it; a
    -- free service's batch is the trigger's (it may give the service to a
    -- live instance). No release can free the claim meanwhile: the ingest
    -- row is locked.
    IF e_svc IS NULL THEN
        WITH k AS MATERIALIZED (
            SELECT set_config('queuer.enqueue_counted',
                              CASE WHEN held_by IS NOT NULL THEN 'on' ELSE '' END, true)
        ), b AS (
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
            SELECT p_batch_id, p_service_id, p_payload, created, p_priority FROM k
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING b.batch_id, b.service_id
        )
        INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
        SELECT b.batch_id, b.service_id, 'Enqueued' FROM b;
        IF NOT FOUND THEN
            PERFORM set_config('queuer.enqueue_counted', '', true);
            held_by := NULL;
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

    -- 6. for a held service: its count, the ingest state and the wake-up;
    -- otherwise the ingest state, written only when it changes (a free
    -- service's count and wake-up were the insert trigger's)
    IF held_by IS NOT NULL THEN
        UPDATE queuer.service_ingest i
           SET n_in = i.n_in + 1, blocked = (s_high > 0 AND backlog + 1 >= s_high)
         WHERE i.service_id = p_service_id
        RETURNING set_config('queuer.enqueue_counted', '', true) INTO kept; -- used up
        -- its holder, as the claim row is now (a fresh snapshot), on the
        -- holder's channel, naming the batch
        PERFORM pg_notify('queuer_i' || i.incarnation,
                          c.service_id || ':' || c.claim_epoch || '/' || p_batch_id)
           FROM queuer.service_id_claims c JOIN queuer.instances i ON i.instance_id = c.claimant
          WHERE c.service_id = p_service_id;
    ELSIF (s_high > 0 AND backlog + 1 >= s_high) <> blocked THEN
        UPDATE queuer.service_ingest i SET blocked = NOT i.blocked
         WHERE i.service_id = p_service_id;
    END IF;
    RETURN 'enqueued';
END
$fn$;
