-- 0037: a batch's Enqueued transition is its row; counts come from an
-- enqueue log.
--
-- Every enqueue wrote one 'Enqueued' row of queuer.batch_history per
-- batch: an identity value, ~200 bytes with the 128-character batch id and
-- three index entries, all of it said already by the batch's own row
-- (batch_id, service_id, created_at). In a 100,000-line `queuer enqueue
-- --tsv` those rows were about a quarter of PostgreSQL's CPU
-- (bench/PERFORMANCE.md, "PostgreSQL per batch").
--
-- 1. No enqueue stores an 'Enqueued' history row any more.
--    queuer.history, the view of the audit, shows each stored batch's
--    Enqueued transition derived from its row: id 0 (so that it sorts
--    first by id), no from_status, at = the batch's created_at, no
--    instance, epoch or detail. The history rows of a batch and its row
--    are deleted together by queuer prune, so the view loses nothing the
--    table had. Reading queuer.batch_history itself, a batch's first
--    stored row is now its first Submitting (or an operator's action).
-- 2. queuer.enqueue_log: one narrow row per enqueue call and service
--    (when, which service, how many batches were stored), written in the
--    statement that stores the batches. queuer.status_counts and
--    queuer.throughput count Enqueued from it (the sum of batches);
--    queuer prune deletes its rows older than its cutoff.
-- 3. The 'Enqueued' rows already stored are counted into the log (one row
--    per time and service) and deleted: the migration reads the history
--    once and deletes those rows (a third of it on a queue whose batches
--    are mostly final); see docs/OPERATIONS.md.

CREATE TABLE queuer.enqueue_log (
    at         timestamptz NOT NULL DEFAULT now(),
    service_id text COLLATE "C" NOT NULL,
    batches    integer NOT NULL CHECK (batches > 0)
);
COMMENT ON TABLE queuer.enqueue_log IS
    'Batches stored per enqueue call and service (Enqueued in queuer.status_counts and '
    'queuer.throughput). Written by queuer.enqueue_batch(), queuer.enqueue_rows() and '
    'queuer enqueue --tsv; rows older than queuer prune''s cutoff are deleted by it.';
CREATE INDEX enqueue_log_at ON queuer.enqueue_log (at);
ALTER TABLE queuer.enqueue_log SET (autovacuum_vacuum_insert_scale_factor = 0.05);
GRANT INSERT ON queuer.enqueue_log TO queuer_loader;
GRANT SELECT ON queuer.enqueue_log TO queuer_operator;

INSERT INTO queuer.enqueue_log (at, service_id, batches)
SELECT h.at, h.service_id, count(*)
  FROM queuer.batch_history h
 WHERE h.to_status = 'Enqueued'
 GROUP BY h.at, h.service_id;
DELETE FROM queuer.batch_history h WHERE h.to_status = 'Enqueued';

CREATE OR REPLACE VIEW queuer.history AS
    SELECT id, batch_id, service_id, from_status, to_status, instance_id, claim_epoch, at, detail
      FROM queuer.batch_history
    UNION ALL
    -- the same column types as the table's (text, not the batch row's id
    -- domains), so that a condition on the view reaches both indexes
    SELECT 0::bigint, b.batch_id::text, b.service_id::text, NULL::text, 'Enqueued'::text,
           NULL::text, NULL::bigint, b.created_at, NULL::text
      FROM queuer.batches b;
COMMENT ON VIEW queuer.history IS
    'The audit of batch transitions: queuer.batch_history (append-only) and each stored '
    'batch''s Enqueued transition from its row (id 0, at = created_at).';

CREATE OR REPLACE VIEW queuer.status_counts AS
    SELECT h.to_status AS status,
           count(*) FILTER (WHERE h.at >= now() - interval '5 minutes') AS last_5m,
           count(*) FILTER (WHERE h.at >= now() - interval '1 hour') AS last_1h,
           count(*) AS last_24h
      FROM queuer.batch_history h
     WHERE h.at >= now() - interval '24 hours'
     GROUP BY h.to_status
    UNION ALL
    SELECT 'Enqueued',
           coalesce(sum(e.batches) FILTER (WHERE e.at >= now() - interval '5 minutes'), 0)::bigint,
           coalesce(sum(e.batches) FILTER (WHERE e.at >= now() - interval '1 hour'), 0)::bigint,
           sum(e.batches)::bigint
      FROM queuer.enqueue_log e
     WHERE e.at >= now() - interval '24 hours'
    HAVING count(*) > 0;
COMMENT ON VIEW queuer.status_counts IS
    'Transitions in the last 5 minutes, hour and 24 hours, by the status reached: ledger '
    'statuses (Pending = accepted, Committed, Valid, Invalid, Delayed, Unknown) and Submitting, '
    'Requeued (handed back before POST), Retrying and Cancelled (operator actions) from the '
    'history; Enqueued (batches stored) from queuer.enqueue_log.';

CREATE OR REPLACE VIEW queuer.throughput AS
    WITH h AS (
        SELECT date_trunc('minute', x.at) AS minute, x.from_status, x.to_status
          FROM queuer.batch_history x
         WHERE x.at >= date_trunc('minute', now()) - interval '59 minutes'
    ), e AS (
        SELECT date_trunc('minute', x.at) AS minute, sum(x.batches) AS n
          FROM queuer.enqueue_log x
         WHERE x.at >= date_trunc('minute', now()) - interval '59 minutes'
         GROUP BY 1
    )
    SELECT m.minute,
           coalesce((SELECT e.n FROM e WHERE e.minute = m.minute), 0)::bigint AS enqueued,
           count(h.to_status) FILTER (WHERE h.to_status = 'Submitting') AS submissions,
           count(h.to_status) FILTER (WHERE h.to_status = 'Pending'
                                         OR (h.from_status = 'Submitting'
                                             AND h.to_status IN ('Committed', 'Valid')))
               AS accepted,
           count(h.to_status) FILTER (WHERE h.to_status = 'Committed') AS committed,
           count(h.to_status) FILTER (WHERE h.to_status = 'Valid') AS valid,
           count(h.to_status) FILTER (WHERE h.to_status = 'Invalid') AS invalid,
           count(h.to_status) FILTER (WHERE h.to_status = 'Delayed') AS delayed,
           count(h.to_status) FILTER (WHERE h.to_status = 'Unknown') AS unknown,
           count(h.to_status) FILTER (WHERE h.to_status IN ('Retrying', 'Cancelled'))
               AS operator_actions
      FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                           date_trunc('minute', now()), interval '1 minute') AS m(minute)
      LEFT JOIN h ON h.minute = m.minute
     GROUP BY m.minute;

-- 0033's function: the batch's line in the enqueue log instead of its
-- history row.
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

    -- 5. the batch and its line in the enqueue log; a batch_id already
    -- stored (before or by a concurrent enqueue) inserts neither. A held
    -- service's batch is counted and its holder woken here (step 6), and
    -- the insert sets
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
            RETURNING b.service_id
        )
        INSERT INTO queuer.enqueue_log (service_id, batches)
        SELECT b.service_id, 1 FROM b;
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

-- 0036's functions: a line of the enqueue log per service instead of a
-- history row per batch.
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
            ), logged AS (
                -- one line of the enqueue log per service given batches
                INSERT INTO queuer.enqueue_log (service_id, batches)
                SELECT g.service_id, g.n FROM ingest g WHERE g.n > 0
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
            ), ingest AS (
                -- the ingest state, and the batches stored counted as work
                UPDATE queuer.service_ingest i
                   SET blocked = false, last_created_at = x.last, n_in = i.n_in + x.n
                  FROM (SELECT n.service_id, max(n.created_at) AS last, count(*) AS n,
                               (array_agg(n.priority ORDER BY n.created_at))[1] AS first_pri
                          FROM ins n GROUP BY n.service_id) x
                 WHERE i.service_id = x.service_id
                RETURNING i.service_id, x.n, x.first_pri
            ), logged AS (
                -- one line of the enqueue log per service given batches
                INSERT INTO queuer.enqueue_log (service_id, batches)
                SELECT g.service_id, g.n FROM ingest g
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
        ), logged AS (
            -- one line of the enqueue log per service given batches
            INSERT INTO queuer.enqueue_log (service_id, batches)
            SELECT g.service_id, g.n FROM ingest g WHERE g.n > 0
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
-- (CREATE OR REPLACE sets the function's settings anew)
ALTER FUNCTION queuer.enqueue_staged(integer, integer, boolean) SET work_mem = '256MB';
