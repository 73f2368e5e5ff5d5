-- 0017: enqueue locks its services by index (measured under W5).
--
-- queuer.enqueue_rows_unchecked() (0015) locked the ingest rows of a
-- call's services with
--     SELECT ... FROM queuer.service_ingest i
--      WHERE i.service_id = ANY (services) ORDER BY i.service_id FOR UPDATE
-- whose plan, cached for the session, is generic: `services` is a
-- parameter the planner takes for ten elements, and for a small table
-- (W5's 1,000 services) it reads the whole table and compares every row with
-- every element of the array. Under W5's load (1,000 services, 7 or 8
-- batches a call) that statement took 0.45 ms of a 1.9 ms call, and the
-- seq scan grows with the number of services. It is now one index probe
-- and lock per service (a lateral subquery with FOR UPDATE is not
-- flattened into a join), taken in the column's "C" order like before, so
-- the lock order, and the clock read after the last lock, are unchanged.
-- Measured as bench/enqueue_sql.sh does (bench-load, no workers, 1,200
-- calls, two runs of each alternating): at 1,500 batches/s the statement
-- takes 0.04 ms instead of 0.44 and the backend's CPU per call falls from
-- 2.74 to 2.18 ms (-20 %); one-batch calls (200/s) are unchanged (1.45 ms).
--
-- Nothing else in the function changes.

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
                -- (the backlog is the claim row's n_open, kept by the batches
                -- triggers: the same count of non-final batches, read in one row)
                SELECT c.*, g.blocked,
                       CASE WHEN s_high > 0 THEN q.n_open ELSE 0 END AS backlog
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
                RETURNING b.batch_id, b.service_id, b.created_at
            ), ins_careful AS (
                -- only a concurrent load can still take a batch_id here
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at)
                SELECT d.batch_id, d.service_id, d.payload,
                       v_base + (d.ord - 1) * interval '1 microsecond'
                  FROM dec d WHERE d.accepted AND careful ORDER BY d.ord
                ON CONFLICT (batch_id) DO NOTHING
                RETURNING b.batch_id, b.service_id, b.created_at
            ), ins AS (
                SELECT * FROM ins_first UNION ALL SELECT * FROM ins_careful
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
                               max(v_base + (d.ord - 1) * interval '1 microsecond')
                                   FILTER (WHERE d.accepted) AS last
                          FROM dec d GROUP BY d.service_id) x
                 WHERE i.service_id = x.service_id
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
                                              = v_base + (d.ord - 1) * interval '1 microsecond'))
              INTO outcomes, missing;
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
    -- Wake idle workers. A small load names its services, so a worker that
    -- already holds one fetches it at once; a big one sends one empty
    -- notification (workers then run a whole cycle).
    IF cardinality(p_rows) > coalesce(cardinality(outcomes), 0) THEN
        IF cardinality(services) BETWEEN 1 AND 8 THEN
            PERFORM pg_notify('queuer_work', s) FROM unnest(services) s;
        ELSE
            PERFORM pg_notify('queuer_work', '');
        END IF;
    END IF;
    RETURN QUERY SELECT o.* FROM unnest(outcomes) o ORDER BY o.line_no NULLS LAST;
END
$fn$;
