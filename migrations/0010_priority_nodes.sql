-- 0010: batch priority and the ledger nodes a worker reports (issue 14).
--
-- Priority. Every batch has an integer priority, -1000..1000, default 0,
-- higher first, set when it is enqueued: queuer.enqueue_batch() and
-- queuer.enqueue_rows() take it as a last parameter (default 0, so older
-- callers keep working; one priority per call: a load with several
-- priorities is enqueued in runs of equal priority, which keeps each
-- service's creation order). Order within a service never changes: a
-- service's batches go one at a time in creation order whatever their
-- priorities. Priority decides, when ledger capacity is short, which
-- services' next batches go first (a worker's ready queue, with aging:
-- dlt.priority_aging_ms), and which services with work a worker claims
-- first. The column is added with a constant default: no table rewrite.
ALTER TABLE queuer.batches ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE queuer.batches ADD CONSTRAINT batches_priority_range
    CHECK (priority BETWEEN -1000 AND 1000) NOT VALID;
COMMENT ON COLUMN queuer.batches.priority IS
    'Priority of the batch, -1000..1000, higher first (default 0): when ledger capacity is '
    'short, services whose next batch has a higher priority go first (a waiting service gains '
    'one step per dlt.priority_aging_ms). Never reorders a service''s own batches.';

-- The enqueue functions gain the priority parameter. The implementation
-- (0001's, renamed queuer.enqueue_rows_unchecked by 0007) is re-created
-- with the priority stored; the wrapper queuer.enqueue_rows (0007's: session
-- marks for the owner only, no foreign service named, p_skip = false
-- raises) and queuer.enqueue_batch (0001's) pass it on. A new parameter
-- list makes a new function, so the old ones are dropped first (a call
-- with the old arguments resolves to the new ones through the default).
DROP FUNCTION queuer.enqueue_batch(text, text, bytea);
DROP FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean);
DROP FUNCTION queuer.enqueue_rows_unchecked(queuer.enqueue_row[], boolean);

CREATE FUNCTION queuer.enqueue_rows_unchecked(p_rows queuer.enqueue_row[], p_skip boolean,
                                              p_priority integer DEFAULT 0)
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
    IF p_priority IS NULL OR p_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'priority must be an integer from -1000 to 1000, not %',
                        coalesce(p_priority::text, 'NULL')
            USING ERRCODE = 'QU400';
    END IF;
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
    PERFORM 1 FROM queuer.service_ingest i
      WHERE i.service_id = ANY (services)
      ORDER BY i.service_id FOR UPDATE;
    SELECT greatest(clock_timestamp(), max(i.last_created_at) + interval '1 microsecond')
      INTO v_base
      FROM queuer.service_ingest i WHERE i.service_id = ANY (services);

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
                SELECT c.*, i.blocked, i.backlog
                  FROM (SELECT f.*, row_number() OVER (PARTITION BY f.service_id ORDER BY f.ord)
                                    AS rnk
                          FROM fresh f WHERE f.ord = f.first_ord) c
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
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
                SELECT d.batch_id, d.service_id, d.payload,
                       v_base + (d.ord - 1) * interval '1 microsecond', p_priority
                  FROM dec d WHERE d.accepted AND NOT careful ORDER BY d.ord
                RETURNING b.batch_id, b.service_id, b.created_at
            ), ins_careful AS (
                -- only a concurrent load can still take a batch_id here
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
                SELECT d.batch_id, d.service_id, d.payload,
                       v_base + (d.ord - 1) * interval '1 microsecond', p_priority
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

REVOKE ALL ON FUNCTION queuer.enqueue_rows_unchecked(queuer.enqueue_row[], boolean, integer)
    FROM PUBLIC, queuer_worker, queuer_enqueuer;

CREATE FUNCTION queuer.enqueue_rows(p_rows queuer.enqueue_row[], p_skip boolean,
                                    p_priority integer DEFAULT 0)
RETURNS SETOF queuer.enqueue_outcome
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, queuer, pg_temp
AS $fn$
DECLARE
    outcomes queuer.enqueue_outcome[];
    bad      queuer.enqueue_outcome;
BEGIN
    -- current_user is the owner here (SECURITY DEFINER); session_user is the caller
    IF (coalesce(current_setting('queuer.ingest_high', true), '') <> ''
        OR coalesce(current_setting('queuer.ingest_low', true), '') <> '')
       AND NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'role % may not set queuer.ingest_high / queuer.ingest_low; '
                        'the back-pressure marks are queuer.settings (the owner changes them)',
                        session_user
            USING ERRCODE = '42501',
                  HINT = 'RESET queuer.ingest_high; RESET queuer.ingest_low (queuer enqueue: '
                         'leave ingest.high and ingest.low at -1)';
    END IF;
    SELECT array_agg(CASE WHEN o.outcome = 'conflict'
                               AND o.detail LIKE 'batch_id is already enqueued%'
                          THEN ROW(o.line_no, o.batch_id, o.outcome,
                                   'batch_id is already enqueued with a different service or '
                                   'payload')::queuer.enqueue_outcome
                          ELSE o END)
      INTO outcomes
      FROM queuer.enqueue_rows_unchecked(p_rows, true, p_priority) o;
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
COMMENT ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean, integer) IS
    'Enqueues rows in array order at one priority (-1000..1000, default 0); returns one row per '
    'row not stored (see queuer.enqueue_rows_unchecked in migrations 0001 and 0010). Session '
    'marks queuer.ingest_high/low are honoured for the schema owner only.';


CREATE FUNCTION queuer.enqueue_batch(p_service_id text, p_batch_id text, p_payload bytea,
                                     p_priority integer DEFAULT 0)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    res queuer.enqueue_outcome;
BEGIN
    SELECT * INTO res FROM queuer.enqueue_rows(
        ARRAY[ROW(NULL, p_service_id, p_batch_id, p_payload)::queuer.enqueue_row], true,
        p_priority);
    IF NOT FOUND THEN
        RETURN 'enqueued';
    END IF;
    IF res.outcome = 'duplicate' THEN
        RETURN 'duplicate';
    END IF;
    RAISE EXCEPTION '%', res.detail
        USING ERRCODE = CASE res.outcome WHEN 'conflict' THEN 'QU409'
                                         WHEN 'backpressure' THEN 'QU429'
                                         WHEN 'too_large' THEN 'QU413'
                                         ELSE 'QU400' END,
              DETAIL = 'batch_id ' || coalesce(p_batch_id, '(none)');
END
$fn$;

REVOKE ALL ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean, integer),
                       queuer.enqueue_batch(text, text, bytea, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean, integer),
                          queuer.enqueue_batch(text, text, bytea, integer)
      TO queuer_worker, queuer_enqueuer;

-- Operators see the priority with the batch.
CREATE OR REPLACE VIEW queuer.batch_states AS
    SELECT batch_id, service_id, created_at, submitted, status, attempts, last_submitted_at,
           retry_at, status_at, last_error, octet_length(payload) AS payload_bytes, priority
      FROM queuer.batches;

-- Ledger nodes. dlt.url may list several nodes of one ledger; each worker
-- reports what it sees of them (state up/suspect/down, latency, channels
-- in use, requests and failures) into its instance row when a node
-- changes state and every few seconds (src/worker/submitter.c,
-- sql/instance_nodes.sql), for `queuer status` and operators.
ALTER TABLE queuer.instances ADD COLUMN ledger_nodes jsonb;
ALTER TABLE queuer.instances ADD COLUMN ledger_nodes_at timestamptz;
COMMENT ON COLUMN queuer.instances.ledger_nodes IS
    'The ledger nodes as this worker last reported them: an array of objects '
    '(node, url, state, latency_ms, posts_in_flight, posts, polls, failures, suspect); '
    'read it through queuer.ledger_nodes.';

CREATE VIEW queuer.ledger_nodes AS
    SELECT i.instance_id, n.node, n.url, n.state, n.latency_ms, n.posts_in_flight, n.posts,
           n.polls, n.failures, n.suspect, i.ledger_nodes_at AS reported_at
      FROM queuer.instances i
     CROSS JOIN LATERAL jsonb_to_recordset(coalesce(i.ledger_nodes, '[]'::jsonb))
           AS n(node integer, url text, state text, latency_ms numeric, posts_in_flight integer,
                posts bigint, polls bigint, failures bigint, suspect bigint)
     WHERE i.stopped_at IS NULL;
COMMENT ON VIEW queuer.ledger_nodes IS
    'Each running worker''s view of each ledger node (dlt.url): state up (in use), suspect '
    '(failing: probed, no requests) or down (probes keep failing), latency (moving average '
    'of answered requests, ms), POSTs in flight (channels in use, at most dlt.channels), '
    'requests started and failed, times it turned suspect; reported_at = when it was written.';
GRANT SELECT ON queuer.ledger_nodes TO queuer_operator;
