-- 0001: the queuer schema.
--
-- Batches and their append-only status history, the per-service claim
-- leases workers coordinate through, the instances table, the ingest
-- back-pressure state, settings, roles and the enqueue functions.
-- Invariants that must hold at any isolation level are constraints here:
-- the claims primary key, at most one in-flight batch per service, the id
-- formats, and a payload whose only Batch is signed with the batch id.

CREATE TABLE queuer.settings (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    ingest_high       integer NOT NULL DEFAULT 30 CHECK (ingest_high >= 0),
    ingest_low        integer NOT NULL DEFAULT 15 CHECK (ingest_low >= 0),
    max_payload_bytes integer NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0),
    CHECK (ingest_high = 0 OR ingest_low < ingest_high)
);
COMMENT ON TABLE queuer.settings IS
    'Database-wide ingest limits; ingest_high = 0 disables back pressure. '
    'A session may override high/low with SET queuer.ingest_high / queuer.ingest_low.';
INSERT INTO queuer.settings DEFAULT VALUES;

-- Decodes a Sawtooth BatchList (protobuf) far enough to prove it holds
-- exactly one Batch, and returns that Batch's header_signature. Raises
-- SQLSTATE QU400 naming the defect otherwise.
CREATE FUNCTION queuer.batchlist_signature(p bytea) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    n        integer := octet_length(p);
    pos      integer := 0;     -- next byte, 0-based
    lvl      integer := 1;     -- 1 = inside BatchList, 2 = inside the Batch
    lvl_end  integer := n;     -- end of the current message
    key      bigint;
    val      bigint;
    shift    integer;
    b        integer;
    fnum     bigint;
    wtype    integer;
    batches  integer := 0;
    sigs     integer := 0;
    sig      text;
    readlen  boolean;
BEGIN
    IF n = 0 THEN
        RAISE EXCEPTION 'payload is empty' USING ERRCODE = 'QU400';
    END IF;
    LOOP
        IF pos = lvl_end THEN
            EXIT WHEN lvl = 1;
            lvl := 1;
            lvl_end := n;
            CONTINUE;
        END IF;
        -- key varint, then (for wire types 0 and 2) a value varint
        readlen := false;
        LOOP
            val := 0;
            shift := 0;
            LOOP
                IF pos >= lvl_end OR shift > 63 THEN
                    RAISE EXCEPTION 'payload is not a BatchList: truncated varint at byte %', pos
                        USING ERRCODE = 'QU400';
                END IF;
                b := get_byte(p, pos);
                pos := pos + 1;
                val := val | ((b & 127)::bigint << shift);
                shift := shift + 7;
                EXIT WHEN b < 128;
            END LOOP;
            IF NOT readlen THEN
                key := val;
                fnum := key >> 3;
                wtype := (key & 7)::integer;
                IF fnum = 0 THEN
                    RAISE EXCEPTION 'payload is not a BatchList: field number 0 at byte %', pos
                        USING ERRCODE = 'QU400';
                END IF;
                EXIT WHEN wtype NOT IN (0, 2);
                readlen := true;
            ELSE
                EXIT;
            END IF;
        END LOOP;
        IF wtype = 1 THEN
            val := 8;
        ELSIF wtype = 5 THEN
            val := 4;
        ELSIF wtype = 0 THEN
            val := 0;
        ELSIF wtype <> 2 THEN
            RAISE EXCEPTION 'payload is not a BatchList: wire type % at byte %', wtype, pos
                USING ERRCODE = 'QU400';
        END IF;
        IF val < 0 OR pos + val > lvl_end THEN
            RAISE EXCEPTION 'payload is not a BatchList: field overruns its message at byte %', pos
                USING ERRCODE = 'QU400';
        END IF;
        IF lvl = 1 AND fnum = 1 AND wtype = 2 THEN
            batches := batches + 1;
            IF batches > 1 THEN
                RAISE EXCEPTION 'BatchList holds more than one Batch' USING ERRCODE = 'QU400';
            END IF;
            lvl := 2;
            lvl_end := pos + val::integer;
            CONTINUE;
        END IF;
        IF lvl = 2 AND fnum = 2 AND wtype = 2 THEN
            sigs := sigs + 1;
            sig := convert_from(substring(p FROM pos + 1 FOR val::integer), 'SQL_ASCII');
        END IF;
        pos := pos + val::integer;
    END LOOP;
    IF batches = 0 THEN
        RAISE EXCEPTION 'BatchList holds no Batch' USING ERRCODE = 'QU400';
    END IF;
    IF sigs = 0 OR sig = '' THEN
        RAISE EXCEPTION 'Batch has no header_signature' USING ERRCODE = 'QU400';
    END IF;
    RETURN sig;
END
$fn$;

CREATE TABLE queuer.batches (
    batch_id          text PRIMARY KEY,
    service_id        text NOT NULL,
    payload           bytea NOT NULL,
    created_at        timestamptz NOT NULL,
    submitted         boolean NOT NULL DEFAULT false,
    status            text,
    attempts          integer NOT NULL DEFAULT 0,
    last_submitted_at timestamptz,
    retry_at          timestamptz,
    status_at         timestamptz,
    last_error        text,
    CONSTRAINT batches_batch_id_format CHECK (batch_id ~ '^[0-9a-f]{128}$'),
    CONSTRAINT batches_service_id_format
        CHECK (service_id ~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$'),
    CONSTRAINT batches_status_valid
        CHECK (status IN ('Pending', 'Valid', 'Committed', 'Invalid', 'Unknown', 'Delayed')),
    CONSTRAINT batches_attempts_nonnegative CHECK (attempts >= 0)
) WITH (fillfactor = 80);
COMMENT ON COLUMN queuer.batches.submitted IS
    'true while a worker holds the batch for submission or it is Pending at the ledger';
COMMENT ON COLUMN queuer.batches.retry_at IS
    'Delayed: earliest resubmission; Unknown: when the confirmation re-check is due';

-- Non-final batches in service order: the queuer's fetch and backlog counts.
CREATE INDEX batches_open ON queuer.batches (service_id, created_at, batch_id)
    WHERE status IS NULL OR status IN ('Pending', 'Unknown', 'Delayed');
-- At most one batch of a service in flight, whatever the isolation level.
CREATE UNIQUE INDEX batches_one_in_flight ON queuer.batches (service_id)
    WHERE (submitted AND status IS NULL) OR status = 'Pending';

-- The payload must decode as a BatchList whose one Batch is signed with
-- batch_id; checked on insert (not on status updates, which are hot).
CREATE FUNCTION queuer.batches_check_payload() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    max_bytes integer;
BEGIN
    SELECT max_payload_bytes INTO max_bytes FROM queuer.settings;
    IF octet_length(NEW.payload) > max_bytes THEN
        RAISE EXCEPTION 'batch %: payload is % bytes, the limit is %',
            NEW.batch_id, octet_length(NEW.payload), max_bytes USING ERRCODE = 'QU413';
    END IF;
    IF queuer.batchlist_signature(NEW.payload) IS DISTINCT FROM NEW.batch_id THEN
        RAISE EXCEPTION 'batch %: the Batch header_signature does not equal batch_id',
            NEW.batch_id USING ERRCODE = 'QU400';
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER batches_check_payload BEFORE INSERT OR UPDATE OF payload, batch_id
    ON queuer.batches FOR EACH ROW EXECUTE FUNCTION queuer.batches_check_payload();

CREATE TABLE queuer.batch_history (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id    text NOT NULL,
    service_id  text NOT NULL,
    from_status text,
    to_status   text NOT NULL,
    instance_id text,
    claim_epoch bigint,
    at          timestamptz NOT NULL DEFAULT now(),
    detail      text
);
COMMENT ON TABLE queuer.batch_history IS
    'Append-only audit of every batch transition. to_status is a ledger status or one of '
    'Enqueued, Submitting, Retrying, Cancelled, Exhausted.';
CREATE INDEX batch_history_batch ON queuer.batch_history (batch_id, id);
CREATE INDEX batch_history_at ON queuer.batch_history (at);

CREATE FUNCTION queuer.history_append_only() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'queuer.batch_history is append-only' USING ERRCODE = 'QU403';
END
$fn$;
CREATE TRIGGER batch_history_append_only BEFORE UPDATE ON queuer.batch_history
    FOR EACH ROW EXECUTE FUNCTION queuer.history_append_only();

CREATE TABLE queuer.service_id_claims (
    service_id  text PRIMARY KEY,
    claimant    text,
    claim_epoch bigint NOT NULL DEFAULT 0,
    expiry_1    timestamptz,
    expiry_2    timestamptz,
    CONSTRAINT claims_held_has_expiry
        CHECK ((claimant IS NULL) OR (expiry_1 IS NOT NULL AND expiry_2 IS NOT NULL
                                      AND expiry_2 >= expiry_1))
);
CREATE INDEX service_id_claims_claimant ON queuer.service_id_claims (claimant)
    WHERE claimant IS NOT NULL;

CREATE TABLE queuer.service_ingest (
    service_id      text PRIMARY KEY,
    blocked         boolean NOT NULL DEFAULT false,
    last_created_at timestamptz
);
COMMENT ON TABLE queuer.service_ingest IS
    'Per-service ingest state: the back-pressure hysteresis flag and the last created_at '
    'handed out, so batches of a service get strictly increasing created_at in enqueue order.';

CREATE TABLE queuer.instances (
    instance_id  text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

-- One row of a (bulk) enqueue: line_no is the caller's line for messages.
CREATE TYPE queuer.enqueue_row AS (
    line_no    integer,
    service_id text,
    batch_id   text,
    payload    bytea
);

-- Enqueues rows in order. Returns one row per line that was not inserted:
-- outcome 'duplicate' (same batch_id, service and payload already stored:
-- an idempotent no-op), 'conflict' (batch_id stored with other content),
-- 'backpressure' (service backlog at the high mark), 'invalid' (format).
-- With p_skip = false the first such line other than 'duplicate' raises
-- (QU409, QU429, QU400) and the caller's transaction loads nothing.
CREATE FUNCTION queuer.enqueue_rows(p_rows queuer.enqueue_row[], p_skip boolean)
RETURNS TABLE (line_no integer, batch_id text, outcome text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer AS $fn$
DECLARE
    s_high integer;
    s_low  integer;
    s_max  integer;
    bad    record;
BEGIN
    SELECT ingest_high, ingest_low, max_payload_bytes INTO s_high, s_low, s_max
      FROM queuer.settings;
    s_high := coalesce(nullif(current_setting('queuer.ingest_high', true), '')::integer, s_high);
    s_low := coalesce(nullif(current_setting('queuer.ingest_low', true), '')::integer, s_low);

    CREATE TEMP TABLE IF NOT EXISTS queuer_enqueue_work (
        line_no integer, service_id text, batch_id text, payload bytea,
        outcome text, detail text, rnk integer
    ) ON COMMIT DROP;
    TRUNCATE queuer_enqueue_work;
    INSERT INTO queuer_enqueue_work (line_no, service_id, batch_id, payload)
        SELECT r.line_no, r.service_id, r.batch_id, r.payload FROM unnest(p_rows) r;

    -- Formats (the C client checks these first; SQL callers may not).
    UPDATE queuer_enqueue_work w SET outcome = 'invalid', detail = CASE
            WHEN w.service_id IS NULL
                 OR w.service_id !~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$'
                THEN 'service_id must be <5 alnum>-<5 alnum>::<4 alnum>'
            WHEN w.batch_id IS NULL OR w.batch_id !~ '^[0-9a-f]{128}$'
                THEN 'batch_id must be 128 lowercase hex characters'
            WHEN w.payload IS NULL OR octet_length(w.payload) = 0 THEN 'payload is empty'
            ELSE 'payload is ' || octet_length(w.payload) || ' bytes, the limit is ' || s_max
        END
     WHERE w.service_id IS NULL
        OR w.service_id !~ '^[A-Za-z0-9]{5}-[A-Za-z0-9]{5}::[A-Za-z0-9]{4}$'
        OR w.batch_id IS NULL OR w.batch_id !~ '^[0-9a-f]{128}$'
        OR w.payload IS NULL OR octet_length(w.payload) = 0
        OR octet_length(w.payload) > s_max;

    -- The same batch_id twice in one load: later copies are conflicts.
    UPDATE queuer_enqueue_work w SET outcome = 'conflict',
           detail = 'batch_id repeats line ' || f.first_line
      FROM (SELECT x.batch_id, min(x.line_no) AS first_line FROM queuer_enqueue_work x
             WHERE x.outcome IS NULL GROUP BY x.batch_id HAVING count(*) > 1) f
     WHERE w.outcome IS NULL AND w.batch_id = f.batch_id AND w.line_no > f.first_line;

    -- Already stored: identical content is an idempotent no-op.
    UPDATE queuer_enqueue_work w SET
           outcome = CASE WHEN b.service_id = w.service_id AND b.payload = w.payload
                          THEN 'duplicate' ELSE 'conflict' END,
           detail = CASE WHEN b.service_id = w.service_id AND b.payload = w.payload
                         THEN 'already enqueued with the same content'
                         ELSE 'batch_id already enqueued with a different service or payload' END
      FROM queuer.batches b
     WHERE w.outcome IS NULL AND b.batch_id = w.batch_id;

    -- Per-service ingest state, locked in a fixed order (no deadlocks).
    INSERT INTO queuer.service_ingest (service_id)
        SELECT DISTINCT w.service_id FROM queuer_enqueue_work w WHERE w.outcome IS NULL
        ON CONFLICT DO NOTHING;
    PERFORM 1 FROM queuer.service_ingest i
      WHERE i.service_id IN (SELECT w.service_id FROM queuer_enqueue_work w
                              WHERE w.outcome IS NULL)
      ORDER BY i.service_id FOR UPDATE;

    UPDATE queuer_enqueue_work w SET rnk = r.rnk
      FROM (SELECT x.line_no, row_number() OVER (PARTITION BY x.service_id ORDER BY x.line_no) AS rnk
              FROM queuer_enqueue_work x WHERE x.outcome IS NULL) r
     WHERE w.line_no = r.line_no AND w.outcome IS NULL;

    IF s_high > 0 THEN
        -- Hysteresis: a blocked service opens again once its backlog is
        -- below low; an open one closes when its backlog reaches high.
        CREATE TEMP TABLE IF NOT EXISTS queuer_enqueue_svc (
            service_id text, backlog integer, blocked boolean, accept integer
        ) ON COMMIT DROP;
        TRUNCATE queuer_enqueue_svc;
        INSERT INTO queuer_enqueue_svc
            SELECT i.service_id,
                   (SELECT count(*) FROM queuer.batches b
                     WHERE b.service_id = i.service_id
                       AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))),
                   i.blocked, 0
              FROM queuer.service_ingest i
             WHERE i.service_id IN (SELECT w.service_id FROM queuer_enqueue_work w
                                     WHERE w.outcome IS NULL);
        UPDATE queuer_enqueue_svc v SET blocked = false WHERE v.blocked AND v.backlog < s_low;
        UPDATE queuer_enqueue_svc v SET blocked = true WHERE NOT v.blocked AND v.backlog >= s_high;
        UPDATE queuer_enqueue_svc v SET accept = CASE WHEN v.blocked THEN 0
                                                    ELSE s_high - v.backlog END;
        UPDATE queuer_enqueue_work w SET outcome = 'backpressure',
               detail = 'service ' || w.service_id || ' has ' || v.backlog
                        || ' batches waiting (high mark ' || s_high || ', accepting again below '
                        || s_low || ')'
          FROM queuer_enqueue_svc v
         WHERE w.outcome IS NULL AND w.service_id = v.service_id AND w.rnk > v.accept;
        UPDATE queuer.service_ingest i SET blocked =
               v.blocked OR EXISTS (SELECT 1 FROM queuer_enqueue_work w
                                     WHERE w.service_id = v.service_id
                                       AND w.outcome = 'backpressure')
          FROM queuer_enqueue_svc v
         WHERE i.service_id = v.service_id;
    END IF;

    IF NOT p_skip THEN
        SELECT w.line_no, w.batch_id, w.outcome, w.detail INTO bad FROM queuer_enqueue_work w
         WHERE w.outcome IN ('invalid', 'conflict', 'backpressure')
         ORDER BY w.line_no LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'line %: %', bad.line_no, bad.detail
                USING ERRCODE = CASE bad.outcome WHEN 'invalid' THEN 'QU400'
                                                 WHEN 'conflict' THEN 'QU409'
                                                 ELSE 'QU429' END,
                      DETAIL = 'batch_id ' || coalesce(bad.batch_id, '(none)');
        END IF;
    END IF;

    -- Strictly increasing created_at per service, in line order.
    WITH base AS (
        SELECT i.service_id,
               greatest(clock_timestamp(),
                        coalesce(i.last_created_at, '-infinity') + interval '1 microsecond') AS t0
          FROM queuer.service_ingest i
         WHERE i.service_id IN (SELECT w.service_id FROM queuer_enqueue_work w
                                 WHERE w.outcome IS NULL)
    ), ins AS (
        INSERT INTO queuer.batches (batch_id, service_id, payload, created_at)
        SELECT w.batch_id, w.service_id, w.payload,
               base.t0 + (w.rnk - 1) * interval '1 microsecond'
          FROM queuer_enqueue_work w JOIN base ON base.service_id = w.service_id
         WHERE w.outcome IS NULL
         ORDER BY w.line_no
        RETURNING queuer.batches.service_id, queuer.batches.created_at
    )
    UPDATE queuer.service_ingest i SET last_created_at = m.last
      FROM (SELECT ins.service_id, max(ins.created_at) AS last FROM ins GROUP BY ins.service_id) m
     WHERE i.service_id = m.service_id;

    INSERT INTO queuer.service_id_claims (service_id)
        SELECT DISTINCT w.service_id FROM queuer_enqueue_work w
         WHERE w.outcome IS NULL
           AND NOT EXISTS (SELECT 1 FROM queuer.service_id_claims c
                            WHERE c.service_id = w.service_id)
        ON CONFLICT DO NOTHING;

    INSERT INTO queuer.batch_history (batch_id, service_id, to_status, detail)
        SELECT w.batch_id, w.service_id, 'Enqueued', NULL
          FROM queuer_enqueue_work w WHERE w.outcome IS NULL;

    IF EXISTS (SELECT 1 FROM queuer_enqueue_work w WHERE w.outcome IS NULL) THEN
        PERFORM pg_notify('queuer_work', '');
    END IF;

    RETURN QUERY SELECT w.line_no, w.batch_id, w.outcome, w.detail FROM queuer_enqueue_work w
                  WHERE w.outcome IS NOT NULL ORDER BY w.line_no;
END
$fn$;

-- The application's enqueue: one batch. Returns 'enqueued', or 'duplicate'
-- when the same batch (id, service, payload) is already stored. Raises
-- QU400 (invalid), QU409 (batch_id taken by other content), QU413 (payload
-- too large), QU429 (back pressure: retry after the service drains).
CREATE FUNCTION queuer.enqueue_batch(p_service_id text, p_batch_id text, p_payload bytea)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer AS $fn$
DECLARE
    res record;
BEGIN
    SELECT * INTO res FROM queuer.enqueue_rows(
        ARRAY[ROW(1, p_service_id, p_batch_id, p_payload)::queuer.enqueue_row], false);
    IF FOUND THEN
        RETURN res.outcome;
    END IF;
    RETURN 'enqueued';
END
$fn$;

-- Operator views: everything but payload bytes.
CREATE VIEW queuer.batch_states AS
    SELECT batch_id, service_id, created_at, submitted, status, attempts, last_submitted_at,
           retry_at, status_at, last_error, octet_length(payload) AS payload_bytes
      FROM queuer.batches;
CREATE VIEW queuer.claims AS
    SELECT service_id, claimant, claim_epoch, expiry_1, expiry_2 FROM queuer.service_id_claims;
CREATE VIEW queuer.history AS
    SELECT id, batch_id, service_id, from_status, to_status, instance_id, claim_epoch, at, detail
      FROM queuer.batch_history;
CREATE VIEW queuer.live_instances AS
    SELECT instance_id, host, pid, version, started_at, heartbeat_at, stopped_at
      FROM queuer.instances;

-- Roles (cluster-wide, created once): NOLOGIN groups that login roles join.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queuer_worker') THEN
        CREATE ROLE queuer_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queuer_operator') THEN
        CREATE ROLE queuer_operator NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queuer_enqueuer') THEN
        CREATE ROLE queuer_enqueuer NOLOGIN;
    END IF;
END
$roles$;

REVOKE ALL ON ALL TABLES IN SCHEMA queuer FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA queuer FROM PUBLIC;
GRANT USAGE ON SCHEMA queuer TO queuer_worker, queuer_operator, queuer_enqueuer;

GRANT SELECT ON queuer.settings, queuer.schema_migrations TO queuer_worker;
GRANT SELECT, UPDATE ON queuer.batches TO queuer_worker;
GRANT SELECT, INSERT ON queuer.batch_history TO queuer_worker;
GRANT SELECT, INSERT, UPDATE ON queuer.service_id_claims TO queuer_worker;
GRANT SELECT ON queuer.service_ingest TO queuer_worker;
GRANT SELECT, INSERT, UPDATE ON queuer.instances TO queuer_worker;
GRANT EXECUTE ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean),
                          queuer.enqueue_batch(text, text, bytea)
      TO queuer_worker, queuer_enqueuer;

GRANT SELECT ON queuer.batch_states, queuer.claims, queuer.history, queuer.live_instances,
                queuer.schema_migrations
      TO queuer_operator;
