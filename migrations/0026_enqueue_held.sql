-- 0026: a lone batch of a held service costs fewer statements.
--
-- queuer.enqueue_batch() locks the service's ingest row before anything
-- else, so it can tell whether a worker holds the service, and no release
-- can free the claim until it commits. For a held service it now counts
-- the batch (n_in, in the update of the ingest row) and wakes the holder
-- itself, and the counters trigger on batches returns at once for a batch
-- it signed: the trigger's statements were about a third of the call's
-- PostgreSQL time (bench/PERFORMANCE.md, "Enqueue"). A free service's
-- batch is still counted, and the service given to a live instance, by the
-- trigger.
--
-- The signature, set as queuer.enqueue_counted for the insert, is md5 of
-- a random key and the batch id. The key is in a table that only the
-- schema owner and queuer_loader read (queuer_loader owns
-- queuer.enqueue_batch(), and only the owner can act as it, 0011), so no
-- other role can make the trigger skip a batch it inserts, whatever it
-- sets, and a signature is good for its batch only.
--
-- The trigger's first statement for an update of several batches no
-- longer joins the transition tables, and an insert's test for rows
-- mid-submission is part of its first statement.
CREATE TABLE queuer.enqueue_key (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    key     text NOT NULL
);
INSERT INTO queuer.enqueue_key (key) VALUES (gen_random_uuid()::text);
COMMENT ON TABLE queuer.enqueue_key IS
    'A random key, read by the schema owner and queuer_loader only: queuer.enqueue_batch() '
    'signs with it the batches it counted itself, and the counters trigger on queuer.batches '
    'leaves those alone.';
GRANT SELECT ON queuer.enqueue_key TO queuer_loader;
-- queuer.enqueue_batch() wakes a holder on its channel (queuer_i<incarnation>)
GRANT SELECT (instance_id, incarnation) ON queuer.instances TO queuer_loader;

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
    signed   text;         -- queuer.enqueue_counted, as set
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
    -- before this one
    IF s_high > 0 THEN
        SELECT i.n_in - c.n_out INTO backlog
          FROM queuer.service_ingest i JOIN queuer.service_id_claims c USING (service_id)
         WHERE i.service_id = p_service_id;
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
    -- or by a concurrent enqueue) inserts neither. A held service's batch
    -- is counted and its holder woken here (step 6), signed for the
    -- counters trigger, which then leaves it alone; a free service's is
    -- the trigger's (it may give the service to a live instance). No
    -- release can free the claim meanwhile: the ingest row is locked.
    IF e_svc IS NULL THEN
        SELECT c.claimant,
               set_config('queuer.enqueue_counted', md5(k.key || ':' || p_batch_id), true)
          INTO held_by, signed
          FROM queuer.service_id_claims c, queuer.enqueue_key k
         WHERE c.service_id = p_service_id AND c.claimant IS NOT NULL;
        WITH b AS (
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
            VALUES (p_batch_id, p_service_id, p_payload, created, p_priority)
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING b.batch_id, b.service_id
        )
        INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
        SELECT b.batch_id, b.service_id, 'Enqueued' FROM b;
        IF NOT FOUND THEN
            IF held_by IS NOT NULL THEN
                PERFORM set_config('queuer.enqueue_counted', '', true);
                held_by := NULL;
            END IF;
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
        RETURNING set_config('queuer.enqueue_counted', '', true) INTO signed; -- used up
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
               bool_or(n.submitted AND n.status IS NULL) OVER () AS mid,
               current_setting('queuer.enqueue_counted', true)
                   = md5((SELECT e.key FROM queuer.enqueue_key e) || ':' || n.batch_id) AS counted
          INTO one FROM new_rows n LIMIT 1;
        IF one.mid THEN
            UPDATE queuer.service_id_claims c SET submitting = true
             WHERE c.service_id IN (SELECT n.service_id FROM new_rows n
                                     WHERE n.submitted AND n.status IS NULL)
               AND NOT c.submitting;
        END IF;
        IF one.k = 1 AND one.counted THEN
            -- queuer.enqueue_batch() counted this batch of a held service
            -- and woke its holder itself
            RETURN NULL;
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
