-- 0036: the load functions count their own rows; other inserts into
-- queuer.batches are counted row by row.
--
-- The counters trigger on inserts (0008, 0028, 0035) was a statement
-- trigger over its transition table. PostgreSQL fills that table whatever
-- the trigger's WHEN says, so every row a load inserted was copied once
-- more, payload and all, although the load only needed each row's service
-- counted: about a tenth of a 100,000-line `queuer enqueue --tsv`
-- (bench/PERFORMANCE.md, "PostgreSQL per batch").
--
-- queuer.enqueue_staged() and queuer.enqueue_rows_unchecked() (behind
-- queuer.enqueue_rows()) now count their inserted rows in the statement
-- that inserts them (n_in on the ingest rows they hold locked), then call
-- queuer.claims_give_work() once for the services given work: claim rows,
-- free services given to a live instance or marked free with work, the
-- holders woken. Both run as queuer_loader with queuer.enqueue_counted =
-- 'on', which the insert trigger's WHEN skips, as it skipped
-- queuer.enqueue_batch()'s batch of a held service (0028).
-- queuer.enqueue_rows_unchecked() was the schema owner's; it is now
-- queuer_loader's, like the other two, so it checks every payload itself
-- (the payload trigger skips queuer_loader): a load with a malformed
-- payload is classified row by row, as before.
--
-- The insert trigger is now a row trigger with the same WHEN: every other
-- insert (queuer.enqueue_batch() for a free service, an insert by hand) is
-- counted row by row, and queuer.enqueue_batch()'s one row costs no
-- transition table either. The delete trigger keeps its statement form
-- (the prune's deletes).

-- The live instances that may be given free services, p_new of them
-- (lease running, below their worker.max_claims): those holding less than
-- an even share counting the new ones; all of them when none does; NULL
-- when none is live. The enqueues' choice; pickup and maintenance make
-- their own in the workers' statements.
CREATE FUNCTION queuer.claims_receivers(p_new bigint) RETURNS text[]
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    RETURN (SELECT coalesce(array_agg(l.instance_id ORDER BY l.instance_id)
                                FILTER (WHERE l.claims_held < l.even),
                            array_agg(l.instance_id ORDER BY l.instance_id))
              FROM (SELECT i.instance_id, i.claims_held,
                           ceil((sum(i.claims_held) OVER () + p_new) / count(*) OVER ()) AS even
                      FROM queuer.instances i
                     WHERE i.lease_1 > now() AND i.stopped_at IS NULL
                       AND (i.max_claims = 0 OR i.claims_held < i.max_claims)) l);
END
$fn$;
REVOKE EXECUTE ON FUNCTION queuer.claims_receivers(bigint) FROM PUBLIC;

-- Gives out the services a load has just given work to, p_services
-- (distinct, in "C" order; their ingest rows counted and held by the
-- enqueue), with the priority of each one's first new batch: creates a
-- missing claim row, gives each free service to one of
-- queuer.claims_receivers() (by a hash of the service) or, when none is
-- live, marks it free with work at that priority for pickup, then wakes
-- each holder. Held claim rows are read, not written.
CREATE FUNCTION queuer.claims_give_work(p_services text[], p_priorities integer[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    ids text[];  -- the instances a free service may be given to
BEGIN
    INSERT INTO queuer.service_id_claims (service_id)
    SELECT s.service_id FROM unnest(p_services) s(service_id) ORDER BY s.service_id COLLATE "C"
    ON CONFLICT DO NOTHING;
    IF EXISTS (SELECT 1 FROM queuer.service_id_claims c
                WHERE c.service_id = ANY (p_services) AND c.claimant IS NULL) THEN
        ids := queuer.claims_receivers(cardinality(p_services));
        IF ids IS NOT NULL THEN
            UPDATE queuer.service_id_claims c
               SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                   claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
             WHERE c.service_id = ANY (p_services) AND c.claimant IS NULL;
        ELSE
            UPDATE queuer.service_id_claims c
               SET has_work = true, head_priority = a.priority
              FROM unnest(p_services, p_priorities) a(service_id, priority)
             WHERE c.service_id = a.service_id AND c.claimant IS NULL AND NOT c.has_work;
        END IF;
    END IF;
    PERFORM queuer.claims_wake(p_services);
END
$fn$;
REVOKE EXECUTE ON FUNCTION queuer.claims_give_work(text[], integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.claims_give_work(text[], integer[]) TO queuer_loader;

-- Follows the insert of one batch that its enqueue did not count (row
-- trigger): as queuer.claims_give_work() for its one service, after n_in
-- on the service's ingest row, and `submitting` on its claim row for a
-- batch inserted mid-submission. Plain statements on that one service
-- (queuer.enqueue_batch() of a free service comes here; through
-- queuer.claims_give_work()'s statements over arrays such a call cost
-- about a fourth more: bench/PERFORMANCE.md, "PostgreSQL per batch").
CREATE FUNCTION queuer.claims_follow_batch_insert() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    ids text[];  -- the instances the service may be given to, when free
BEGIN
    IF NOT queuer.batch_is_work(NEW.status, NEW.retry_at) THEN
        RETURN NULL;
    END IF;
    INSERT INTO queuer.service_ingest AS i (service_id, n_in) VALUES (NEW.service_id, 1)
    ON CONFLICT (service_id) DO UPDATE SET n_in = i.n_in + 1;
    INSERT INTO queuer.service_id_claims (service_id) VALUES (NEW.service_id)
    ON CONFLICT DO NOTHING;
    IF EXISTS (SELECT 1 FROM queuer.service_id_claims c
                WHERE c.service_id = NEW.service_id AND c.claimant IS NULL) THEN
        ids := queuer.claims_receivers(1);
        UPDATE queuer.service_id_claims c
           SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
               claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
         WHERE c.service_id = NEW.service_id AND c.claimant IS NULL AND ids IS NOT NULL;
        UPDATE queuer.service_id_claims c SET has_work = true, head_priority = NEW.priority
         WHERE c.service_id = NEW.service_id AND c.claimant IS NULL AND NOT c.has_work
           AND ids IS NULL;
    END IF;
    IF NEW.submitted AND NEW.status IS NULL THEN
        UPDATE queuer.service_id_claims c SET submitting = true
         WHERE c.service_id = NEW.service_id AND NOT c.submitting;
    END IF;
    PERFORM queuer.claims_wake(ARRAY[NEW.service_id]::text[]);
    RETURN NULL;
END
$fn$;
REVOKE EXECUTE ON FUNCTION queuer.claims_follow_batch_insert() FROM PUBLIC;

-- Follows the deletes on queuer.batches (statement trigger; the prune, a
-- repair by hand): n_out and `submitting` on the claim rows of the deleted
-- batches that were work. (Inserts have their own trigger above, updates
-- 0035's.)
CREATE OR REPLACE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    UPDATE queuer.service_id_claims c
       SET n_out = c.n_out + s.d_open,
           submitting = c.submitting AND NOT s.mid_before
      FROM (SELECT o.service_id,
                   count(*) FILTER (WHERE queuer.batch_is_work(o.status, o.retry_at)) AS d_open,
                   bool_or(o.submitted AND o.status IS NULL) AS mid_before
              FROM old_rows o GROUP BY o.service_id) s
     WHERE c.service_id = s.service_id
       AND (s.d_open <> 0 OR (c.submitting AND s.mid_before));
    RETURN NULL;
END
$fn$;

DROP TRIGGER batches_claims_insert ON queuer.batches;
CREATE TRIGGER batches_claims_insert AFTER INSERT ON queuer.batches
    FOR EACH ROW
    WHEN (current_user <> 'queuer_loader'
          OR current_setting('queuer.enqueue_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION queuer.claims_follow_batch_insert();

-- 0020's function, counting its own inserts and run as queuer_loader.
CREATE OR REPLACE FUNCTION queuer.enqueue_rows_unchecked(p_rows queuer.enqueue_row[],
                                                         p_skip boolean)
RETURNS SETOF queuer.enqueue_outcome
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, queuer, pg_temp
AS $fn$
DECLARE
    s_high   integer;
    s_low    integer;
    s_max    integer;
    services text[];
    outcomes queuer.enqueue_outcome[];
    missing  bigint[];    -- ords accepted but not inserted (ON CONFLICT)
    careful  boolean := false;  -- check formats and payloads per row up front
    v_base   timestamptz; -- created_at of the first row; row n gets v_base + (n-1) us
    bad      queuer.enqueue_outcome;
    work     text[];      -- the services given work, in "C" order
    work_pri integer[];   -- the priority of each one's first new batch
BEGIN
    IF p_rows IS NULL OR cardinality(p_rows) = 0 THEN
        RETURN;
    END IF;
    SELECT s.ingest_high, s.ingest_low, s.max_payload_bytes INTO s_high, s_low, s_max
      FROM queuer.settings s;
    s_high := coalesce(nullif(current_setting('queuer.ingest_high', true), '')::integer, s_high);
    s_low := coalesce(nullif(current_setting('queuer.ingest_low', true), '')::integer, s_low);
    IF s_high < 0 OR s_low < 0 OR (s_high > 0 AND s_low >= s_high) THEN
        RAISE EXCEPTION 'ingest marks: low (%) must be below high (%), both >= 0', s_low, s_high
            USING ERRCODE = '22023';
    END IF;

    -- Lock the services (creating their ingest state and claims rows when
    -- new) in service_id order, then take the time base after the locks:
    -- later than every created_at already given to these services.
    SELECT array_agg(d.service_id ORDER BY d.service_id) INTO services
      FROM (SELECT DISTINCT r.service_id FROM unnest(p_rows) r) d
     WHERE d.service_id ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$';
    IF services IS NULL THEN
        services := '{}';
    END IF;
    WITH created AS (
        INSERT INTO queuer.service_ingest AS i (service_id)
            SELECT s FROM unnest(services) s ORDER BY s
            ON CONFLICT DO NOTHING
            RETURNING i.service_id
    )
    INSERT INTO queuer.service_id_claims (service_id)
        SELECT c.service_id FROM created c ORDER BY 1
        ON CONFLICT DO NOTHING;
    -- one statement: the rows are locked in service_id order, the column's
    -- ("C", as every other locker of these rows: queuer.enqueue_staged), one
    -- index probe and lock per service in the order of the sorted subquery
    -- (neither subquery is flattened: one sorts, the other locks), and
    -- clock_timestamp() is read once all are held
    SELECT greatest(clock_timestamp(), max(l.last_created_at) + interval '1 microsecond')
      INTO v_base
      FROM (SELECT u.service_id FROM unnest(services) u(service_id)
             ORDER BY u.service_id COLLATE "C") s
     CROSS JOIN LATERAL (SELECT i.last_created_at FROM queuer.service_ingest i
                          WHERE i.service_id = s.service_id FOR UPDATE) l;

    -- The payloads: the table's payload trigger skips queuer_loader. A load
    -- with a malformed one is classified row by row from the start.
    careful := EXISTS (SELECT 1 FROM unnest(p_rows) r
                        WHERE queuer.batchlist_defect(r.payload, r.batch_id) IS NOT NULL);
    -- This function counts its own inserts (below): the insert trigger
    -- skips them
    PERFORM set_config('queuer.enqueue_counted', 'on', true);
    LOOP
        BEGIN
            WITH src AS (
                SELECT r.line_no, r.service_id, r.batch_id, r.payload, r.ord
                  FROM unnest(p_rows) WITH ORDINALITY
                       AS r(line_no, service_id, batch_id, payload, ord)
            ), chk AS (
                -- size; in careful mode formats and payloads; with back
                -- pressure (which must not count them) batch ids already stored
                SELECT s.*,
                       CASE WHEN f.code = 4 THEN 'too_large'
                            WHEN f.code > 0 OR v.defect IS NOT NULL THEN 'invalid'
                            WHEN b.service_id = s.service_id AND b.payload = s.payload
                            THEN 'duplicate'
                            WHEN b.batch_id IS NOT NULL THEN 'conflict' END AS outcome,
                       CASE f.code
                            WHEN 1 THEN 'service_id must be <5 letters/digits>-<5 letters/digits>'
                                        '::<4 letters/digits>'
                            WHEN 2 THEN 'batch_id must be 128 lower-case hex characters'
                            WHEN 3 THEN 'payload is empty'
                            WHEN 4 THEN format('payload is %s bytes, the limit is %s',
                                               octet_length(s.payload), s_max)
                            ELSE coalesce(v.defect,
                                 CASE WHEN b.service_id = s.service_id AND b.payload = s.payload
                                      THEN 'already enqueued with the same service and payload'
                                      WHEN b.service_id = s.service_id
                                      THEN 'batch_id is already enqueued with a different payload'
                                      WHEN b.batch_id IS NOT NULL
                                      THEN 'batch_id is already enqueued for service '
                                           || b.service_id END) END AS detail
                  FROM src s
                  CROSS JOIN LATERAL (
                      SELECT CASE WHEN s.service_id IS NULL
                                       OR (careful AND s.service_id
                                           !~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$')
                                  THEN 1
                                  WHEN s.batch_id IS NULL
                                       OR (careful AND (length(s.batch_id) <> 128
                                                        OR s.batch_id !~ '^[0-9a-f]*$'))
                                  THEN 2
                                  WHEN s.payload IS NULL OR octet_length(s.payload) = 0 THEN 3
                                  WHEN octet_length(s.payload) > s_max THEN 4
                                  ELSE 0 END AS code) f
                  LEFT JOIN LATERAL (
                      SELECT queuer.batchlist_defect(s.payload, s.batch_id) AS defect
                       WHERE careful AND f.code = 0) v ON true
                  LEFT JOIN LATERAL (
                      SELECT x.batch_id, x.service_id, x.payload FROM queuer.batches x
                       WHERE (careful OR s_high > 0) AND f.code = 0
                         AND x.batch_id = s.batch_id) b ON true
            ), fresh AS (
                -- a batch_id repeated in p_rows is stored (and counted) once
                SELECT k.*,
                       first_value(k.ord) OVER w AS first_ord,
                       first_value(k.line_no) OVER w AS first_line,
                       (k.service_id = first_value(k.service_id) OVER w
                        AND k.payload = first_value(k.payload) OVER w) AS same_as_first
                  FROM chk k
                 WHERE (s_high > 0 OR careful) AND k.outcome IS NULL
                WINDOW w AS (PARTITION BY k.batch_id COLLATE "C" ORDER BY k.ord)
            ), facts AS (
                -- back pressure: the service's state and backlog, looked up on its first row
                -- (the backlog is n_in - n_out, kept by the enqueues and triggers:
                -- the same count of non-final batches, read in two rows)
                SELECT c.*, g.blocked,
                       CASE WHEN s_high > 0 THEN g.n_in - q.n_out ELSE 0 END AS backlog
                  FROM (SELECT f.*, row_number() OVER (PARTITION BY f.service_id ORDER BY f.ord)
                                    AS rnk
                          FROM fresh f WHERE f.ord = f.first_ord) c
                  LEFT JOIN queuer.service_ingest g
                         ON c.rnk = 1 AND g.service_id = c.service_id
                  LEFT JOIN queuer.service_id_claims q
                         ON c.rnk = 1 AND q.service_id = c.service_id
            ), dec AS (
                -- hysteresis: blocked from reaching high until the backlog is below low
                SELECT p.line_no, p.service_id, p.batch_id, p.payload, p.ord, p.backlog_all AS backlog,
                       e.blocked_now,
                       s_high = 0 OR (NOT e.blocked_now AND p.rnk <= s_high - p.backlog_all)
                           AS accepted
                  FROM (SELECT f.*, coalesce(max(f.backlog) OVER s, 0) AS backlog_all,
                               coalesce(bool_or(f.blocked) OVER s, false) AS blocked_all
                          FROM facts f WINDOW s AS (PARTITION BY f.service_id)) p
                  CROSS JOIN LATERAL (
                      SELECT s_high > 0 AND ((p.blocked_all AND p.backlog_all >= s_low)
                                             OR p.backlog_all >= s_high) AS blocked_now) e
                 WHERE s_high > 0 OR careful
                UNION ALL
                -- no back pressure, first try: every row that passed the checks goes in
                SELECT k.line_no, k.service_id, k.batch_id, k.payload, k.ord, 0, false, true
                  FROM chk k
                 WHERE s_high = 0 AND NOT careful AND k.outcome IS NULL
            ), ins_first AS (
                -- a batch_id already stored (by an earlier row or a concurrent
                -- load) fails this insert with unique_violation: re-run carefully
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at)
                SELECT d.batch_id, d.service_id, d.payload,
                       v_base + (d.ord - 1) * interval '1 microsecond'
                  FROM dec d WHERE d.accepted AND NOT careful ORDER BY d.ord
                RETURNING b.batch_id, b.service_id, b.created_at, b.priority
            ), ins_careful AS (
                -- only a concurrent load can still take a batch_id here
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at)
                SELECT d.batch_id, d.service_id, d.payload,
                       v_base + (d.ord - 1) * interval '1 microsecond'
                  FROM dec d WHERE d.accepted AND careful ORDER BY d.ord
                ON CONFLICT (batch_id) DO NOTHING
                RETURNING b.batch_id, b.service_id, b.created_at, b.priority
            ), ins AS (
                SELECT * FROM ins_first UNION ALL SELECT * FROM ins_careful
            ), hist AS (
                INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
                SELECT n.batch_id, n.service_id, 'Enqueued' FROM ins n
            ), ingest AS (
                -- the ingest state, and the batches stored counted as work
                UPDATE queuer.service_ingest i
                   SET blocked = s_high > 0 AND (x.blocked_now OR x.backlog + x.added >= s_high),
                       last_created_at = coalesce(x.last, i.last_created_at),
                       n_in = i.n_in + coalesce(y.n, 0)
                  FROM (SELECT d.service_id, bool_or(d.blocked_now) AS blocked_now,
                               max(d.backlog) AS backlog,
                               count(*) FILTER (WHERE d.accepted) AS added,
                               max(v_base + (d.ord - 1) * interval '1 microsecond')
                                   FILTER (WHERE d.accepted) AS last
                          FROM dec d GROUP BY d.service_id) x
                  LEFT JOIN (SELECT n.service_id, count(*) AS n,
                                    (array_agg(n.priority ORDER BY n.created_at))[1] AS first_pri
                               FROM ins n GROUP BY n.service_id) y
                         ON y.service_id = x.service_id
                 WHERE i.service_id = x.service_id
                RETURNING i.service_id, y.n, y.first_pri
            ), refused AS (
                SELECT k.line_no, k.batch_id, k.outcome, k.detail, k.ord FROM chk k
                 WHERE k.outcome IS NOT NULL
                UNION ALL
                SELECT f.line_no, f.batch_id,
                       CASE WHEN f.same_as_first THEN 'duplicate' ELSE 'conflict' END,
                       CASE WHEN f.same_as_first
                            THEN 'same batch as line ' || coalesce(f.first_line::text, '?')
                            ELSE 'batch_id repeats line ' || coalesce(f.first_line::text, '?')
                                 || ' with a different service or payload' END,
                       f.ord
                  FROM fresh f WHERE f.ord <> f.first_ord
                UNION ALL
                SELECT d.line_no, d.batch_id, 'backpressure',
                       format('service %s has %s batches waiting (high mark %s); enqueues '
                              'resume below %s waiting', d.service_id, d.backlog, s_high, s_low),
                       d.ord
                  FROM dec d WHERE NOT d.accepted
            )
            SELECT (SELECT array_agg(ROW(r.line_no, r.batch_id, r.outcome, r.detail)
                                     ::queuer.enqueue_outcome ORDER BY r.ord) FROM refused r),
                   -- accepted rows the insert skipped; only looked for when there are any
                   (SELECT array_agg(d.ord) FROM dec d
                     WHERE d.accepted
                       AND (SELECT count(*) FROM ins) < (SELECT count(*) FROM dec WHERE accepted)
                       AND NOT EXISTS (SELECT 1 FROM ins n
                                        WHERE n.batch_id = d.batch_id
                                          AND n.created_at
                                              = v_base + (d.ord - 1) * interval '1 microsecond')),
                   (SELECT array_agg(g.service_id ORDER BY g.service_id COLLATE "C")
                      FROM ingest g WHERE g.n > 0),
                   (SELECT array_agg(g.first_pri ORDER BY g.service_id COLLATE "C")
                      FROM ingest g WHERE g.n > 0)
              INTO outcomes, missing, work, work_pri;
            EXIT;
        EXCEPTION WHEN SQLSTATE 'QU400' OR check_violation OR unique_violation THEN
            -- a row failed the table's checks or its batch_id is taken:
            -- re-run, classifying every row up front and reporting such rows
            IF careful THEN
                RAISE;
            END IF;
            careful := true;
        END;
    END LOOP;
    PERFORM set_config('queuer.enqueue_counted', '', true);
    IF work IS NOT NULL THEN
        PERFORM queuer.claims_give_work(work, work_pri);
    END IF;

    IF missing IS NOT NULL THEN
        -- Batch ids stored meanwhile by an earlier row of p_rows (back
        -- pressure off) or by a concurrent load of another service.
        outcomes := coalesce(outcomes, '{}') || ARRAY(
            SELECT ROW(r.line_no, r.batch_id,
                       CASE WHEN b.service_id = r.service_id AND b.payload = r.payload
                            THEN 'duplicate' ELSE 'conflict' END,
                       CASE WHEN b.service_id = r.service_id AND b.payload = r.payload
                            THEN 'already enqueued with the same service and payload'
                            ELSE 'batch_id is already enqueued with a different service or '
                                 'payload' END)::queuer.enqueue_outcome
              FROM unnest(p_rows) WITH ORDINALITY AS r(line_no, service_id, batch_id, payload, ord)
              LEFT JOIN queuer.batches b ON b.batch_id = r.batch_id
             WHERE r.ord = ANY (missing));
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
-- The new owner must be able to create in the schema for the change of
-- owner only; the owner's wrapper queuer.enqueue_rows() still calls it (the
-- owner is a member of queuer_loader), no one else may.
GRANT CREATE ON SCHEMA queuer TO queuer_loader;
ALTER FUNCTION queuer.enqueue_rows_unchecked(queuer.enqueue_row[], boolean)
    OWNER TO queuer_loader;
REVOKE CREATE ON SCHEMA queuer FROM queuer_loader;

-- 0028's function, counting its own inserts.
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
    work     text[];      -- the services given work, in "C" order
    work_pri integer[];   -- the priority of each one's first new batch
BEGIN
    -- The load counts its own inserts (below): the insert trigger skips
    -- them while queuer.enqueue_counted is 'on'
    PERFORM set_config('queuer.enqueue_counted', 'on', true);
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
                RETURNING b.batch_id, b.service_id, b.created_at, b.priority
            ), hist AS (
                INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
                SELECT n.batch_id, n.service_id, 'Enqueued' FROM ins n
            ), ingest AS (
                -- the ingest state, and the batches stored counted as work
                UPDATE queuer.service_ingest i
                   SET blocked = false, last_created_at = x.last, n_in = i.n_in + x.n
                  FROM (SELECT n.service_id, max(n.created_at) AS last, count(*) AS n,
                               (array_agg(n.priority ORDER BY n.created_at))[1] AS first_pri
                          FROM ins n GROUP BY n.service_id) x
                 WHERE i.service_id = x.service_id
                RETURNING i.service_id, x.first_pri
            )
            SELECT (SELECT count(*) FROM ins),
                   array_agg(g.service_id ORDER BY g.service_id COLLATE "C"),
                   array_agg(g.first_pri ORDER BY g.service_id COLLATE "C")
              INTO n_stored, work, work_pri
              FROM ingest g;
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
            RETURNING b.batch_id, b.service_id, b.created_at, b.priority
        ), hist AS (
            INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
            SELECT n.batch_id, n.service_id, 'Enqueued' FROM ins n
        ), ingest AS (
            -- the ingest state, and the batches stored counted as work
            UPDATE queuer.service_ingest i
               SET blocked = s_high > 0 AND (x.blocked_now OR x.backlog + x.added >= s_high),
                   last_created_at = coalesce(x.last, i.last_created_at),
                   n_in = i.n_in + coalesce(y.n, 0)
              FROM (SELECT d.service_id, bool_or(d.blocked_now) AS blocked_now,
                           max(d.backlog) AS backlog,
                           count(*) FILTER (WHERE d.accepted) AS added,
                           max(v_base + (d.seq - p_from) * interval '1 microsecond')
                               FILTER (WHERE d.accepted) AS last
                      FROM dec d GROUP BY d.service_id) x
              LEFT JOIN (SELECT n.service_id, count(*) AS n,
                                (array_agg(n.priority ORDER BY n.created_at))[1] AS first_pri
                           FROM ins n GROUP BY n.service_id) y
                     ON y.service_id = x.service_id
             WHERE i.service_id = x.service_id
            RETURNING i.service_id, y.n, y.first_pri
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
                   AND (SELECT count(*) FROM ins) < (SELECT count(*) FROM dec WHERE accepted)),
               (SELECT array_agg(g.service_id ORDER BY g.service_id COLLATE "C")
                  FROM ingest g WHERE g.n > 0),
               (SELECT array_agg(g.first_pri ORDER BY g.service_id COLLATE "C")
                  FROM ingest g WHERE g.n > 0)
          INTO outcomes, missing, work, work_pri;
    END IF;
    PERFORM set_config('queuer.enqueue_counted', '', true);
    IF work IS NOT NULL THEN
        PERFORM queuer.claims_give_work(work, work_pri);
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
