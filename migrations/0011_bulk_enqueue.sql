-- 0011: bulk enqueue from a staging table, without checking each payload
-- a second time.
--
-- `queuer enqueue --tsv` checks every line in the client (identifier
-- formats, hex, and the BatchList with protobuf-c: src/ingest/batchlist.c,
-- which takes the same decisions as queuer.batchlist_defect(); a test
-- holds the two together). It then binary-COPYs the valid lines into its
-- own temporary table pg_temp.queuer_load and calls
-- queuer.enqueue_staged(), which settles duplicates, conflicts and back
-- pressure like queuer.enqueue_rows() and moves the rows into
-- queuer.batches with set-based statements.
--
-- Why the payload trigger can skip those rows, and only those: the trigger
-- is now skipped (its WHEN clause, evaluated without calling PL/pgSQL) for
-- rows inserted while current_user is queuer_loader. queuer_loader is a
-- NOLOGIN role that owns exactly one function, queuer.enqueue_staged(), so
-- inside that SECURITY DEFINER function, and nowhere else, current_user is
-- queuer_loader. Nothing a caller can set changes current_user (a
-- transaction-local setting could be set by anyone before calling
-- queuer.enqueue_rows(), so no flag is trusted). Every other write path
-- keeps the database's own check: queuer.enqueue_batch() and
-- queuer.enqueue_rows() (owned by the schema owner), and any role an
-- operator lets insert into queuer.batches directly. Only the schema
-- owner is a member of queuer_loader (it must be, to hand it the
-- function), and the owner can drop the trigger anyway; never grant the
-- role to anyone else.
--
-- The rules of migration 0007 hold on this path as on queuer.enqueue_rows():
-- session marks queuer.ingest_high/low are honoured only when the login
-- role is the schema owner (or a member), and a conflict never names the
-- service that holds the batch id. The history rows it writes are its own
-- 'Enqueued' rows; the history writer check of 0007 (for roles other than
-- the owner) is skipped for queuer_loader as the payload trigger is.
--
-- What the bulk path trusts instead: the rows its caller staged. EXECUTE
-- on queuer.enqueue_staged() goes to the roles that may enqueue
-- (queuer_enqueuer, queuer_worker), like queuer.enqueue_rows(); the
-- `queuer` CLI is the client that stages rows, and it validates every one
-- first. An application that wants the database to check its payloads
-- calls queuer.enqueue_batch() or queuer.enqueue_rows(). The table's CHECK
-- constraints (id formats, status) hold for every path, this one included.
--
-- Creating queuer_loader needs CREATEROLE, as 0001's roles do; where an
-- administrator creates it instead, they also grant it to the owner
-- (docs/OPERATIONS.md, Roles).

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queuer_loader') THEN
        CREATE ROLE queuer_loader NOLOGIN;
    END IF;
END
$roles$;
-- PostgreSQL 15 lets a role hand an object to another role only when it is
-- a member of it (superusers always may).
DO $member$
BEGIN
    IF NOT pg_has_role(current_user, 'queuer_loader', 'MEMBER') THEN
        GRANT queuer_loader TO CURRENT_USER;
    END IF;
END
$member$;

-- `queuer enqueue` checks the schema version before it loads; an enqueuer
-- could not read it (permission denied for table schema_migrations).
GRANT SELECT ON queuer.schema_migrations TO queuer_enqueuer;

GRANT USAGE ON SCHEMA queuer TO queuer_loader;
GRANT SELECT ON queuer.settings TO queuer_loader;
GRANT SELECT, INSERT ON queuer.batches TO queuer_loader;
GRANT INSERT ON queuer.batch_history TO queuer_loader;
GRANT SELECT, INSERT, UPDATE ON queuer.service_ingest TO queuer_loader;
GRANT SELECT, INSERT ON queuer.service_id_claims TO queuer_loader;

DROP TRIGGER batches_check_payload ON queuer.batches;
CREATE TRIGGER batches_check_payload BEFORE INSERT OR UPDATE OF payload, batch_id
    ON queuer.batches FOR EACH ROW
    WHEN (current_user <> 'queuer_loader')
    EXECUTE FUNCTION queuer.batches_check_payload();
CREATE OR REPLACE TRIGGER batch_history_check_writer AFTER INSERT ON queuer.batch_history
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT
    WHEN (current_user <> 'queuer_loader')
    EXECUTE FUNCTION queuer.history_check_writer();

-- Enqueues the rows of the caller's staging table
--   pg_temp.queuer_load (seq integer, line_no integer, service_id text,
--                        batch_id text, payload bytea)
-- whose seq is in [p_from, p_to), in seq order, and returns one row for
-- each one not stored, with the outcomes of queuer.enqueue_rows():
-- 'duplicate' (the same batch is stored or came earlier in the load: an
-- idempotent no-op), 'conflict', 'backpressure', 'invalid' (a malformed id;
-- the payload itself is not checked here, see above) and 'too_large'
-- (over queuer.settings.max_payload_bytes). With p_skip = false any outcome
-- but 'duplicate' raises instead (QU400, QU409, QU413, QU429; the message
-- names the first such line) and nothing is stored.
--
-- The caller creates the table (ON COMMIT DROP), fills it, lets
-- queuer_loader read it (GRANT SELECT ... TO queuer_loader) and calls this
-- function once per range of seq in the same transaction. The first call
-- locks the ingest state of every service in the whole table, in
-- service_id order, so a load made of several calls cannot deadlock with
-- another load. Back pressure, locking and created_at follow
-- queuer.enqueue_rows(): batches of a service get strictly increasing
-- created_at in seq order, also across loads, and counts are exact under
-- READ COMMITTED.
--
-- Speed: with back pressure off, one statement inserts every row of the
-- range and the primary key finds repeats; only when a row fails a CHECK
-- or its batch_id is taken is the range re-run "carefully", classifying
-- every row first so that such rows are reported rather than fatal. The
-- classification works on ids and row numbers; payloads are read once,
-- when they are inserted (or compared with a stored duplicate).
CREATE FUNCTION queuer.enqueue_staged(p_from integer, p_to integer, p_skip boolean)
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
               = '{integer,integer,text,text,bytea}'::regtype[]) THEN
        RAISE EXCEPTION 'pg_temp.queuer_load must be a plain temporary table (seq integer, '
                        'line_no integer, service_id text, batch_id text, payload bytea)'
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
                INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at)
                SELECT l.batch_id, l.service_id, l.payload,
                       v_base + (l.seq - p_from) * interval '1 microsecond'
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
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at)
            SELECT d.batch_id, d.service_id, l.payload,
                   v_base + (d.seq - p_from) * interval '1 microsecond'
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
-- The new owner must be able to create in the schema for the change of
-- owner only.
GRANT CREATE ON SCHEMA queuer TO queuer_loader;
ALTER FUNCTION queuer.enqueue_staged(integer, integer, boolean) OWNER TO queuer_loader;
REVOKE CREATE ON SCHEMA queuer FROM queuer_loader;
REVOKE ALL ON FUNCTION queuer.enqueue_staged(integer, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.enqueue_staged(integer, integer, boolean)
    TO queuer_worker, queuer_enqueuer;
