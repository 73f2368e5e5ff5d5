-- 0028: a lone batch of a held service fires no counters trigger.
--
-- queuer.enqueue_batch() counts a held service's batch itself (0026). It
-- signed the batch so that the counters trigger on batches returned at
-- once, but the trigger still ran: a PL/pgSQL call and a statement over
-- its transition table, about a tenth of the call's PostgreSQL time. The
-- insert trigger now has a WHEN that skips it when the insert runs as
-- queuer_loader with queuer.enqueue_counted = 'on': only
-- queuer.enqueue_batch() sets it, in its insert of a held service's batch,
-- and clears it once counted. Both functions that run as queuer_loader set
-- it themselves before they insert (queuer.enqueue_staged() clears it), so
-- a value an application sets in its session never reaches their inserts,
-- and no other role's insert is skipped whatever it sets: the key of 0026
-- is no longer needed. (A function's SET clause would restore the setting
-- on return by itself, but an owner that is not a superuser may not put a
-- custom setting there.)
--
-- queuer.enqueue_batch() reads the backlog and the holder in one
-- statement (two before). queuer.enqueue_staged() no longer notifies the
-- channel queuer_work, which nobody listens to since 0020 (the counters
-- trigger wakes the holders), and which woke every listening session.

-- First, so that the change cannot meet a call half-way: the migration
-- waits here for every transaction that read the key (an enqueue of 0026
-- counts as 0026's trigger expects), and an enqueue of 0026 that reaches
-- the key after this fails with an error (nothing is stored) instead of
-- counting its batch a second time under the new trigger.
DROP TABLE queuer.enqueue_key;

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
        -- holder's channel, as the trigger words it
        PERFORM pg_notify('queuer_i' || i.incarnation, c.service_id || ':' || c.claim_epoch)
           FROM queuer.service_id_claims c JOIN queuer.instances i ON i.instance_id = c.claimant
          WHERE c.service_id = p_service_id;
    ELSIF (s_high > 0 AND backlog + 1 >= s_high) <> blocked THEN
        UPDATE queuer.service_ingest i SET blocked = NOT i.blocked
         WHERE i.service_id = p_service_id;
    END IF;
    RETURN 'enqueued';
END
$fn$;

CREATE OR REPLACE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    touched text[];   -- services given work: their holders are woken
    one     record;   -- the statement's first row, and how many it has
    ids     text[];   -- instances a free service may be given to
    n_new   bigint;   -- services an insert may give out
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT n.service_id, n.status, n.retry_at, n.priority, n.submitted,
               count(*) OVER () AS k,
               bool_or(n.submitted AND n.status IS NULL) OVER () AS mid
          INTO one FROM new_rows n LIMIT 1;
        IF one.mid THEN
            UPDATE queuer.service_id_claims c SET submitting = true
             WHERE c.service_id IN (SELECT n.service_id FROM new_rows n
                                     WHERE n.submitted AND n.status IS NULL)
               AND NOT c.submitting;
        END IF;
        -- the live instances a free service may go to: lease running, below
        -- their worker.max_claims, holding less than an even share
        -- (counting the services this statement may give out); all of
        -- those when none does; NULL when none is live (one batch of a held
        -- service, the common case, needs none of this)
        n_new := CASE WHEN one.k = 1 THEN 1
                      ELSE (SELECT count(DISTINCT n.service_id) FROM new_rows n) END;
        IF one.k > 1 OR NOT EXISTS (SELECT 1 FROM queuer.service_id_claims c
                                     WHERE c.service_id = one.service_id
                                       AND c.claimant IS NOT NULL) THEN
            SELECT coalesce(array_agg(l.instance_id ORDER BY l.instance_id)
                                FILTER (WHERE l.claims_held < l.even),
                            array_agg(l.instance_id ORDER BY l.instance_id))
              INTO ids
              FROM (SELECT i.instance_id, i.claims_held,
                           ceil((sum(i.claims_held) OVER () + n_new) / count(*) OVER ()) AS even
                      FROM queuer.instances i
                     WHERE i.lease_1 > now() AND i.stopped_at IS NULL
                       AND (i.max_claims = 0 OR i.claims_held < i.max_claims)) l;
        END IF;
        IF one.k = 1 THEN
            IF NOT queuer.batch_is_work(one.status, one.retry_at) THEN
                RETURN NULL;
            END IF;
            INSERT INTO queuer.service_ingest AS i (service_id, n_in) VALUES (one.service_id, 1)
            ON CONFLICT (service_id) DO UPDATE SET n_in = i.n_in + 1;
            INSERT INTO queuer.service_id_claims (service_id) VALUES (one.service_id)
            ON CONFLICT DO NOTHING;
            UPDATE queuer.service_id_claims c
               SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                   claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
             WHERE c.service_id = one.service_id AND c.claimant IS NULL AND ids IS NOT NULL;
            UPDATE queuer.service_id_claims c SET has_work = true, head_priority = one.priority
             WHERE c.service_id = one.service_id AND c.claimant IS NULL AND NOT c.has_work
               AND ids IS NULL;
            touched := ARRAY[one.service_id];
        ELSIF one.k > 1 THEN
            WITH added AS MATERIALIZED (
                SELECT n.service_id, count(*) AS n
                  FROM new_rows n
                 WHERE queuer.batch_is_work(n.status, n.retry_at)
                 GROUP BY n.service_id
            ), counted AS (
                INSERT INTO queuer.service_ingest AS i (service_id, n_in)
                SELECT a.service_id, a.n FROM added a ORDER BY a.service_id
                ON CONFLICT (service_id) DO UPDATE SET n_in = i.n_in + EXCLUDED.n_in
            )
            INSERT INTO queuer.service_id_claims (service_id)
            SELECT a.service_id FROM added a ORDER BY a.service_id
            ON CONFLICT DO NOTHING;
            -- (a statement of its own: it sees the claim rows just created)
            WITH added AS MATERIALIZED (
                SELECT n.service_id,
                       (array_agg(n.priority ORDER BY n.created_at, n.batch_id))[1]
                           AS first_priority
                  FROM new_rows n
                 WHERE queuer.batch_is_work(n.status, n.retry_at)
                 GROUP BY n.service_id
            ), given AS (
                UPDATE queuer.service_id_claims c
                   SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                       claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
                  FROM added a
                 WHERE c.service_id = a.service_id AND c.claimant IS NULL AND ids IS NOT NULL
            ), marked AS (
                -- no instance is live (or below its cap): free with work,
                -- for pickup
                UPDATE queuer.service_id_claims c
                   SET has_work = true, head_priority = a.first_priority
                  FROM added a
                 WHERE c.service_id = a.service_id AND c.claimant IS NULL AND ids IS NULL
                   AND NOT c.has_work
            )
            SELECT array_agg(a.service_id) INTO touched FROM added a;
        END IF;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT n.service_id, n.priority,
               queuer.batch_is_work(n.status, n.retry_at)::int
                   - queuer.batch_is_work(o.status, o.retry_at)::int AS d_work,
               n.submitted AND n.status IS NULL AS mid_now,
               o.submitted AND o.status IS NULL AS mid_before,
               (SELECT count(*) FROM new_rows) AS k
          INTO one FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id LIMIT 1;
        IF one.k = 1 THEN
            UPDATE queuer.service_id_claims c
               SET n_out = c.n_out - one.d_work,
                   submitting = one.mid_now OR (c.submitting AND NOT one.mid_before),
                   has_work = c.has_work OR (c.claimant IS NULL AND one.d_work > 0),
                   head_priority = CASE WHEN c.claimant IS NULL AND NOT c.has_work
                                         AND one.d_work > 0
                                        THEN one.priority ELSE c.head_priority END
             WHERE c.service_id = one.service_id
               AND (one.d_work <> 0
                    OR c.submitting <> (one.mid_now OR (c.submitting AND NOT one.mid_before)));
            IF one.d_work > 0 THEN
                touched := ARRAY[one.service_id];
            END IF;
        ELSIF one.k > 1 THEN
            WITH up AS (
                UPDATE queuer.service_id_claims c
                   SET n_out = c.n_out - s.d_open,
                       submitting = s.mid_now OR (c.submitting AND NOT s.mid_before),
                       has_work = c.has_work OR (c.claimant IS NULL AND s.d_open > 0),
                       head_priority = CASE WHEN c.claimant IS NULL AND NOT c.has_work
                                             AND s.d_open > 0
                                            THEN s.priority ELSE c.head_priority END
                  FROM (SELECT n.service_id,
                               sum(queuer.batch_is_work(n.status, n.retry_at)::int
                                   - queuer.batch_is_work(o.status, o.retry_at)::int) AS d_open,
                               max(n.priority) AS priority,
                               bool_or(n.submitted AND n.status IS NULL) AS mid_now,
                               bool_or(o.submitted AND o.status IS NULL) AS mid_before
                          FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id
                         GROUP BY n.service_id) s
                 WHERE c.service_id = s.service_id
                   AND (s.d_open <> 0
                        OR c.submitting <> (s.mid_now OR (c.submitting AND NOT s.mid_before)))
                RETURNING c.service_id, s.d_open
            )
            SELECT array_agg(u.service_id) INTO touched FROM up u WHERE u.d_open > 0;
        END IF;
    ELSE
        UPDATE queuer.service_id_claims c
           SET n_out = c.n_out + s.d_open,
               submitting = c.submitting AND NOT s.mid_before
          FROM (SELECT o.service_id,
                       count(*) FILTER (WHERE queuer.batch_is_work(o.status, o.retry_at)) AS d_open,
                       bool_or(o.submitted AND o.status IS NULL) AS mid_before
                  FROM old_rows o GROUP BY o.service_id) s
         WHERE c.service_id = s.service_id
           AND (s.d_open <> 0 OR (c.submitting AND s.mid_before));
    END IF;
    -- Wake the holders of the services given work: one notification per
    -- holder on its channel, "<service>:<epoch>" items separated by spaces,
    -- or "*" when there are more than eight (read your claims, fetch them
    -- all); delivered when the transaction commits. A fresh snapshot: it
    -- sees a claim another transaction took while this one waited on the
    -- row, and so wakes the real holder.
    IF touched IS NOT NULL THEN
        PERFORM pg_notify('queuer_i' || i.incarnation, x.payload)
           FROM (SELECT c.claimant,
                        CASE WHEN count(*) <= 8
                             THEN string_agg(c.service_id || ':' || c.claim_epoch, ' ')
                             ELSE '*' END AS payload
                   FROM queuer.service_id_claims c
                  WHERE c.service_id = ANY (touched) AND c.claimant IS NOT NULL
                  GROUP BY c.claimant) x
           JOIN queuer.instances i ON i.instance_id = x.claimant;
    END IF;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE TRIGGER batches_claims_insert AFTER INSERT ON queuer.batches
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    WHEN (current_user <> 'queuer_loader'
          OR current_setting('queuer.enqueue_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION queuer.claims_follow_batches();

CREATE OR REPLACE FUNCTION queuer.enqueue_staged(p_from integer, p_to integer, p_skip boolean)
RETURNS SETOF queuer.enqueue_outcome
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, queuer, pg_temp
AS $fn$
DECLARE
    s_high   integer;
    s_low    integer;
    s_max    integer;
    services text[];
    n_rows   bigint;
    n_stored bigint;
    outcomes queuer.enqueue_outcome[];
    missing  integer[];   -- seq of rows accepted but not inserted (ON CONFLICT)
    careful  boolean := false;  -- classify every row before inserting
    v_base   timestamptz; -- created_at of seq p_from; seq n gets v_base + (n - p_from) us
    bad      queuer.enqueue_outcome;
BEGIN
    -- The load's inserts are counted by the counters trigger on batches,
    -- which does not fire while queuer.enqueue_counted is 'on' (the
    -- caller's value, if it set one, does not count here)
    PERFORM set_config('queuer.enqueue_counted', '', true);
    -- The staging table is the caller's, and this function reads it as
    -- queuer_loader: only a plain temporary table with the expected column
    -- types is read, so that nothing the caller defined (a view or a rule
    -- calling its functions, row security policies, a child table, a
    -- domain) runs with this role's rights.
    IF NOT EXISTS (
        SELECT 1 FROM pg_class c
         WHERE c.oid = to_regclass('pg_temp.queuer_load')
           AND c.relkind = 'r' AND c.relpersistence = 't'
           AND NOT c.relhasrules AND NOT c.relrowsecurity AND NOT c.relhassubclass
           AND NOT c.relispartition
           AND ARRAY(SELECT a.atttypid::regtype FROM pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                      ORDER BY a.attnum)
               = '{integer,integer,text,text,bytea,integer}'::regtype[]) THEN
        RAISE EXCEPTION 'pg_temp.queuer_load must be a plain temporary table (seq integer, '
                        'line_no integer, service_id text, batch_id text, payload bytea, '
                        'priority integer)'
            USING ERRCODE = '42501';
    END IF;
    SELECT s.ingest_high, s.ingest_low, s.max_payload_bytes INTO s_high, s_low, s_max
      FROM queuer.settings s;
    -- session marks: the owner's sessions only (migration 0007)
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
    s_high := coalesce(nullif(current_setting('queuer.ingest_high', true), '')::integer, s_high);
    s_low := coalesce(nullif(current_setting('queuer.ingest_low', true), '')::integer, s_low);
    IF s_high < 0 OR s_low < 0 OR (s_high > 0 AND s_low >= s_high) THEN
        RAISE EXCEPTION 'ingest marks: low (%) must be below high (%), both >= 0', s_low, s_high
            USING ERRCODE = '22023';
    END IF;

    -- Lock every service of the load (creating its ingest state and claims
    -- row when new) in service_id order, then take the time base after the
    -- locks: later than every created_at already given to these services.
    -- The format check runs on the distinct services only: OFFSET 0 keeps
    -- the planner from pushing it below the DISTINCT, onto every line.
    SELECT array_agg(d.service_id ORDER BY d.service_id COLLATE "C") INTO services
      FROM (SELECT DISTINCT l.service_id FROM pg_temp.queuer_load l OFFSET 0) d
     WHERE d.service_id LIKE '_____-_____::____'
       AND d.service_id ~ '^[A-Za-z0-9]+-[A-Za-z0-9]+::[A-Za-z0-9]+$';
    services := coalesce(services, '{}');
    WITH created AS (
        INSERT INTO queuer.service_ingest AS i (service_id)
            SELECT s FROM unnest(services) s ORDER BY s
            ON CONFLICT DO NOTHING
            RETURNING i.service_id
    )
    INSERT INTO queuer.service_id_claims (service_id)
        SELECT c.service_id FROM created c ORDER BY 1
        ON CONFLICT DO NOTHING;
    -- one index probe and lock per service, in the sorted subquery's order,
    -- and the clock read once all are held (as queuer.enqueue_rows_unchecked,
    -- 0017)
    SELECT greatest(clock_timestamp(), max(l.last_created_at) + interval '1 microsecond')
      INTO v_base
      FROM (SELECT u.service_id FROM unnest(services) u(service_id)
             ORDER BY u.service_id COLLATE "C") s
     CROSS JOIN LATERAL (SELECT i.last_created_at FROM queuer.service_ingest i
                          WHERE i.service_id = s.service_id FOR UPDATE) l;

    SELECT count(*) INTO n_rows FROM pg_temp.queuer_load l
     WHERE l.seq >= p_from AND l.seq < p_to;
    IF n_rows = 0 THEN
        RETURN;
    END IF;

    IF s_high = 0 THEN
        BEGIN
            -- No back pressure: insert the whole range; a repeated or stored
            -- batch_id, or a malformed id, fails the statement.
            WITH ins AS (
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at,
                                                 priority)
                SELECT l.batch_id, l.service_id, l.payload,
                       v_base + (l.seq - p_from) * interval '1 microsecond', l.priority
                  FROM pg_temp.queuer_load l
                 WHERE l.seq >= p_from AND l.seq < p_to
                   AND octet_length(l.payload) BETWEEN 1 AND s_max
                RETURNING b.batch_id, b.service_id, b.created_at
            ), hist AS (
                INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
                SELECT n.batch_id, n.service_id, 'Enqueued' FROM ins n
            ), ingest AS (
                UPDATE queuer.service_ingest i
                   SET blocked = false, last_created_at = x.last
                  FROM (SELECT n.service_id, max(n.created_at) AS last
                          FROM ins n GROUP BY n.service_id) x
                 WHERE i.service_id = x.service_id
            )
            SELECT count(*) INTO n_stored FROM ins;
        EXCEPTION WHEN check_violation OR unique_violation OR not_null_violation THEN
            careful := true;
        END;
        IF NOT careful AND n_stored = n_rows THEN
            outcomes := '{}';
        ELSIF NOT careful THEN
            -- only empty or too large payloads were left out
            SELECT array_agg(CASE WHEN coalesce(octet_length(l.payload), 0) = 0
                                  THEN ROW(l.line_no, l.batch_id, 'invalid', 'payload is empty')
                                  ELSE ROW(l.line_no, l.batch_id, 'too_large',
                                           format('payload is %s bytes, the limit is %s',
                                                  octet_length(l.payload), s_max))
                             END::queuer.enqueue_outcome ORDER BY l.seq)
              INTO outcomes
              FROM pg_temp.queuer_load l
             WHERE l.seq >= p_from AND l.seq < p_to
               AND NOT coalesce(octet_length(l.payload) BETWEEN 1 AND s_max, false);
        END IF;
    ELSE
        careful := true;
    END IF;

    IF careful THEN
        WITH src AS (
            -- ids and sizes only: payloads stay in the staging table
            SELECT l.seq, l.line_no, l.service_id, l.batch_id,
                   coalesce(octet_length(l.payload), 0) AS bytes
              FROM pg_temp.queuer_load l
             WHERE l.seq >= p_from AND l.seq < p_to
        ), chk AS (
            SELECT s.*,
                   CASE WHEN f.code = 4 THEN 'too_large'
                        WHEN f.code > 0 THEN 'invalid'
                        WHEN b.service_id = s.service_id AND b.payload = l.payload
                        THEN 'duplicate'
                        WHEN b.batch_id IS NOT NULL THEN 'conflict' END AS outcome,
                   CASE f.code
                        WHEN 1 THEN 'service_id must be <5 letters/digits>-<5 letters/digits>'
                                    '::<4 letters/digits>'
                        WHEN 2 THEN 'batch_id must be 128 lower-case hex characters'
                        WHEN 3 THEN 'payload is empty'
                        WHEN 4 THEN format('payload is %s bytes, the limit is %s', s.bytes, s_max)
                        ELSE CASE WHEN b.service_id = s.service_id AND b.payload = l.payload
                                  THEN 'already enqueued with the same service and payload'
                                  WHEN b.batch_id IS NOT NULL
                                  THEN 'batch_id is already enqueued with a different service '
                                       'or payload' END END AS detail
              FROM src s
              CROSS JOIN LATERAL (
                  SELECT CASE WHEN s.service_id IS NULL
                                   OR s.service_id NOT LIKE '_____-_____::____'
                                   OR s.service_id !~ '^[A-Za-z0-9]+-[A-Za-z0-9]+::[A-Za-z0-9]+$'
                              THEN 1
                              WHEN s.batch_id IS NULL OR length(s.batch_id) <> 128
                                   OR s.batch_id !~ '^[0-9a-f]*$'
                              THEN 2
                              WHEN s.bytes = 0 THEN 3
                              WHEN s.bytes > s_max THEN 4
                              ELSE 0 END AS code) f
              LEFT JOIN queuer.batches b ON f.code = 0 AND b.batch_id = s.batch_id
              LEFT JOIN pg_temp.queuer_load l ON b.batch_id IS NOT NULL AND l.seq = s.seq
        ), fresh AS (
            -- a batch_id repeated in the load is stored (and counted) once
            SELECT k.*,
                   first_value(k.seq) OVER w AS first_seq,
                   first_value(k.line_no) OVER w AS first_line,
                   first_value(k.service_id) OVER w AS first_service
              FROM chk k
             WHERE k.outcome IS NULL
            WINDOW w AS (PARTITION BY k.batch_id COLLATE "C" ORDER BY k.seq)
        ), facts AS (
            -- back pressure: the service's state and backlog, looked up on its first row
            SELECT c.*, i.blocked, i.backlog
              FROM (SELECT f.*, row_number() OVER (PARTITION BY f.service_id ORDER BY f.seq)
                                AS rnk
                      FROM fresh f WHERE f.seq = f.first_seq) c
              LEFT JOIN LATERAL (
                  SELECT g.blocked,
                         CASE WHEN s_high > 0 THEN
                             (SELECT count(*) FROM queuer.batches b
                               WHERE b.service_id = g.service_id
                                 AND (b.status IS NULL
                                      OR b.status IN ('Pending', 'Unknown', 'Delayed')))::integer
                         ELSE 0 END AS backlog
                    FROM queuer.service_ingest g
                   WHERE c.rnk = 1 AND g.service_id = c.service_id) i ON true
        ), dec AS (
            -- hysteresis: blocked from reaching high until the backlog is below low
            SELECT p.line_no, p.service_id, p.batch_id, p.seq, p.backlog_all AS backlog,
                   e.blocked_now,
                   s_high = 0 OR (NOT e.blocked_now AND p.rnk <= s_high - p.backlog_all)
                       AS accepted
              FROM (SELECT f.*, coalesce(max(f.backlog) OVER s, 0) AS backlog_all,
                           coalesce(bool_or(f.blocked) OVER s, false) AS blocked_all
                      FROM facts f WINDOW s AS (PARTITION BY f.service_id)) p
              CROSS JOIN LATERAL (
                  SELECT s_high > 0 AND ((p.blocked_all AND p.backlog_all >= s_low)
                                         OR p.backlog_all >= s_high) AS blocked_now) e
        ), ins AS (
            -- only a concurrent load can still take a batch_id here
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
            SELECT d.batch_id, d.service_id, l.payload,
                   v_base + (d.seq - p_from) * interval '1 microsecond', l.priority
              FROM dec d JOIN pg_temp.queuer_load l ON l.seq = d.seq
             WHERE d.accepted
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING b.batch_id, b.service_id, b.created_at
        ), hist AS (
            INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
            SELECT n.batch_id, n.service_id, 'Enqueued' FROM ins n
        ), ingest AS (
            UPDATE queuer.service_ingest i
               SET blocked = s_high > 0 AND (x.blocked_now OR x.backlog + x.added >= s_high),
                   last_created_at = coalesce(x.last, i.last_created_at)
              FROM (SELECT d.service_id, bool_or(d.blocked_now) AS blocked_now,
                           max(d.backlog) AS backlog,
                           count(*) FILTER (WHERE d.accepted) AS added,
                           max(v_base + (d.seq - p_from) * interval '1 microsecond')
                               FILTER (WHERE d.accepted) AS last
                      FROM dec d GROUP BY d.service_id) x
             WHERE i.service_id = x.service_id
        ), refused AS (
            SELECT k.line_no, k.batch_id, k.outcome, k.detail, k.seq FROM chk k
             WHERE k.outcome IS NOT NULL
            UNION ALL
            -- a repeat within the load: the same batch if service and payload match
            SELECT f.line_no, f.batch_id, CASE WHEN same THEN 'duplicate' ELSE 'conflict' END,
                   CASE WHEN same
                        THEN 'same batch as line ' || coalesce(f.first_line::text, '?')
                        ELSE 'batch_id repeats line ' || coalesce(f.first_line::text, '?')
                             || ' with a different service or payload' END,
                   f.seq
              FROM fresh f
              JOIN pg_temp.queuer_load a ON a.seq = f.seq
              JOIN pg_temp.queuer_load a1 ON a1.seq = f.first_seq
              CROSS JOIN LATERAL (
                  SELECT f.service_id = f.first_service AND a.payload = a1.payload AS same) m
             WHERE f.seq <> f.first_seq
            UNION ALL
            SELECT d.line_no, d.batch_id, 'backpressure',
                   format('service %s has %s batches waiting (high mark %s); enqueues '
                          'resume below %s waiting', d.service_id, d.backlog, s_high, s_low),
                   d.seq
              FROM dec d WHERE NOT d.accepted
        )
        SELECT (SELECT array_agg(ROW(r.line_no, r.batch_id, r.outcome, r.detail)
                                 ::queuer.enqueue_outcome ORDER BY r.seq) FROM refused r),
               -- accepted rows the insert skipped; only looked for when there are any
               (SELECT array_agg(d.seq) FROM dec d LEFT JOIN ins n ON n.batch_id = d.batch_id
                 WHERE d.accepted AND n.batch_id IS NULL
                   AND (SELECT count(*) FROM ins) < (SELECT count(*) FROM dec WHERE accepted))
          INTO outcomes, missing;
    END IF;

    IF missing IS NOT NULL THEN
        -- Batch ids a concurrent load stored meanwhile (seen by this new
        -- statement's snapshot).
        outcomes := coalesce(outcomes, '{}') || ARRAY(
            SELECT ROW(l.line_no, l.batch_id,
                       CASE WHEN b.service_id = l.service_id AND b.payload = l.payload
                            THEN 'duplicate' ELSE 'conflict' END,
                       CASE WHEN b.service_id = l.service_id AND b.payload = l.payload
                            THEN 'already enqueued with the same service and payload'
                            ELSE 'batch_id is already enqueued with a different service or '
                                 'payload' END)::queuer.enqueue_outcome
              FROM pg_temp.queuer_load l
              LEFT JOIN queuer.batches b ON b.batch_id = l.batch_id
             WHERE l.seq = ANY (missing));
    END IF;

    IF NOT p_skip THEN
        SELECT o.* INTO bad FROM unnest(outcomes) o
         WHERE o.outcome <> 'duplicate' ORDER BY o.line_no LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'line %: %', coalesce(bad.line_no::text, '?'), bad.detail
                USING ERRCODE = CASE bad.outcome WHEN 'conflict' THEN 'QU409'
                                                 WHEN 'backpressure' THEN 'QU429'
                                                 WHEN 'too_large' THEN 'QU413'
                                                 ELSE 'QU400' END,
                      DETAIL = 'batch_id ' || coalesce(bad.batch_id, '(none)');
        END IF;
    END IF;
    RETURN QUERY SELECT o.* FROM unnest(outcomes) o ORDER BY o.line_no NULLS LAST;
END
$fn$;
-- (CREATE OR REPLACE sets the function's settings anew: 0014's room to
-- keep a load in memory again)
ALTER FUNCTION queuer.enqueue_staged(integer, integer, boolean) SET work_mem = '256MB';
