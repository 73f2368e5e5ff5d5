-- 0012: the bulk path stores each staged row's own priority.
--
-- queuer.enqueue_staged() (0011) inserted without naming the priority
-- column, so its rows took the column's default, the transaction's
-- queuer.enqueue_priority (0010): one priority per call. A load whose
-- lines change priority had to be cut into one call per run of equal
-- priority, and every call re-reads the services of the whole staging
-- table: 5,000 lines alternating two priorities took 109 s instead of
-- 0.2 s. The staging table now has a sixth column, priority integer,
-- and both inserts take it from there; one call stores a whole load,
-- whatever its priorities.
--
-- The function is 0011's with only that change: the same checks that the
-- staging table is a plain temporary table with exactly the expected
-- column types (now ending in priority integer; a table of the old shape
-- is refused, 42501), the same rules of 0007 (session marks for the
-- owner only, a conflict names no service, p_skip = false raises), the
-- same outcomes and back pressure. The table's CHECK refuses a priority
-- out of -1000..1000 (the client checks it first). CREATE OR REPLACE
-- keeps its owner (queuer_loader), so its inserts still skip the payload
-- trigger, and its grants.
--
-- Staging table:
--   pg_temp.queuer_load (seq integer, line_no integer, service_id text,
--                        batch_id text, payload bytea, priority integer)
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
    SELECT array_agg(d.service_id ORDER BY d.service_id) INTO services
      FROM (SELECT DISTINCT l.service_id FROM pg_temp.queuer_load l) d
     WHERE d.service_id ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$';
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
    PERFORM 1 FROM queuer.service_ingest i
      WHERE i.service_id = ANY (services)
      ORDER BY i.service_id FOR UPDATE;
    SELECT greatest(clock_timestamp(), max(i.last_created_at) + interval '1 microsecond')
      INTO v_base
      FROM queuer.service_ingest i WHERE i.service_id = ANY (services);

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
                                   OR s.service_id
                                      !~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$'
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
    -- Wake idle workers, as queuer.enqueue_rows() does.
    IF n_rows > coalesce(cardinality(outcomes), 0) THEN
        IF cardinality(services) BETWEEN 1 AND 8 THEN
            PERFORM pg_notify('queuer_work', s) FROM unnest(services) s;
        ELSE
            PERFORM pg_notify('queuer_work', '');
        END IF;
    END IF;
    RETURN QUERY SELECT o.* FROM unnest(outcomes) o ORDER BY o.line_no NULLS LAST;
END
$fn$;
