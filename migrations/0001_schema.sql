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

-- queuer.batchlist_defect(payload, batch_id) says what is wrong with a
-- payload, or NULL when it is a protobuf BatchList (proto/batch.proto)
-- holding exactly one Batch whose header_signature is batch_id and whose
-- header is not empty. It takes the same decisions as the client's
-- protobuf-c check (src/ingest/batchlist.c); the tests hold the two together.
--
-- batchlist_defect_walk() is the general decoder: it walks every field of
-- the BatchList, its Batch and the Batch's Transactions with protobuf-c's
-- rules (tags of at most 5 bytes, a one-byte tag may not name field 0,
-- varints of at most 10 bytes, lengths within their message, wire types
-- 0, 1, 2 and 5 only, known fields with their declared wire type, bool
-- fields with any, unknown fields skipped, the last of repeated singular
-- fields winning).
CREATE FUNCTION queuer.batchlist_defect_walk(p bytea, p_batch_id text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    n       integer := octet_length(p);
    pos     integer := 0;     -- next byte, 0-based
    lvl     integer := 1;     -- 1 = BatchList, 2 = its Batch, 3 = one of the Batch's Transactions
    lvl_end integer := n;     -- end of the message being read
    b_end   integer;          -- end of the Batch while reading one of its Transactions
    b       integer;
    tag     bigint;
    fnum    bigint;
    wt      integer;
    len     bigint;
    shift   integer;
    batches integer := 0;
    sig_at  integer := 0;     -- the last header_signature seen: offset and length
    sig_len integer := 0;
    hdr_len integer := 0;     -- length of the last header seen
BEGIN
    IF n IS NULL OR n = 0 THEN
        RETURN 'payload is empty';
    END IF;
    LOOP
        IF pos >= lvl_end THEN
            EXIT WHEN lvl = 1;
            IF lvl = 3 THEN
                lvl := 2;
                lvl_end := b_end;
            ELSE
                lvl := 1;
                lvl_end := n;
            END IF;
            CONTINUE;
        END IF;
        -- Field tag: a varint of at most 5 bytes. Like protobuf-c, a
        -- one-byte tag must not name field 0.
        b := get_byte(p, pos);
        pos := pos + 1;
        IF b < 8 THEN
            RETURN format('payload is not a BatchList: field number 0 at byte %s', pos - 1);
        END IF;
        tag := b & 127;
        IF b >= 128 THEN
            shift := 7;
            LOOP
                IF pos >= lvl_end OR shift > 28 THEN
                    RETURN format('payload is not a BatchList: bad field tag at byte %s', pos);
                END IF;
                b := get_byte(p, pos);
                pos := pos + 1;
                tag := tag | ((b & 127)::bigint << shift);
                shift := shift + 7;
                EXIT WHEN b < 128;
            END LOOP;
        END IF;
        fnum := tag >> 3;
        wt := (tag & 7)::integer;
        IF wt = 2 THEN
            -- length prefix: a varint of at most 5 bytes
            len := 0;
            shift := 0;
            LOOP
                IF pos >= lvl_end OR shift > 28 THEN
                    RETURN format('payload is not a BatchList: truncated length at byte %s', pos);
                END IF;
                b := get_byte(p, pos);
                pos := pos + 1;
                len := len | ((b & 127)::bigint << shift);
                shift := shift + 7;
                EXIT WHEN b < 128;
            END LOOP;
        ELSIF wt = 0 THEN
            -- a varint of at most 10 bytes
            shift := 0;
            LOOP
                IF pos >= lvl_end OR shift = 10 THEN
                    RETURN format('payload is not a BatchList: truncated varint at byte %s', pos);
                END IF;
                b := get_byte(p, pos);
                pos := pos + 1;
                shift := shift + 1;
                EXIT WHEN b < 128;
            END LOOP;
            len := 0;
        ELSIF wt = 1 THEN
            len := 8;
        ELSIF wt = 5 THEN
            len := 4;
        ELSE
            RETURN format('payload is not a BatchList: wire type %s at byte %s', wt, pos);
        END IF;
        IF len > lvl_end - pos THEN
            RETURN format('payload is not a BatchList: field overruns its message at byte %s', pos);
        END IF;
        IF lvl = 1 THEN
            IF fnum = 1 THEN
                IF wt <> 2 THEN
                    RETURN format('payload is not a BatchList: batches field has wire type %s', wt);
                END IF;
                batches := batches + 1;
                IF batches > 1 THEN
                    RETURN 'BatchList holds more than one Batch, expected exactly one';
                END IF;
                lvl := 2;
                lvl_end := pos + len::integer;
                CONTINUE;
            END IF;
        ELSIF lvl = 2 THEN
            IF fnum = 3 THEN
                IF wt <> 2 THEN
                    RETURN format('payload is not a BatchList: Batch.transactions has wire type %s', wt);
                END IF;
                b_end := lvl_end;
                lvl := 3;
                lvl_end := pos + len::integer;
                CONTINUE;
            ELSIF fnum = 2 THEN
                IF wt <> 2 THEN
                    RETURN format('payload is not a BatchList: Batch.header_signature has wire type %s', wt);
                END IF;
                sig_at := pos;
                sig_len := len::integer;
            ELSIF fnum = 1 THEN
                IF wt <> 2 THEN
                    RETURN format('payload is not a BatchList: Batch.header has wire type %s', wt);
                END IF;
                hdr_len := len::integer;
            END IF;
            -- field 4 (trace, a bool) may come with any wire type, as in protobuf-c
        ELSIF fnum >= 1 AND fnum <= 3 AND wt <> 2 THEN
            RETURN format('payload is not a BatchList: Transaction field %s has wire type %s', fnum, wt);
        END IF;
        pos := pos + len::integer;
    END LOOP;
    IF batches = 0 THEN
        RETURN 'BatchList holds no Batch, expected exactly one';
    END IF;
    IF sig_len = 0 THEN
        RETURN 'Batch has no header_signature';
    END IF;
    IF sig_len <> 128 OR substring(p FROM sig_at + 1 FOR sig_len) <> convert_to(p_batch_id, 'UTF8') THEN
        RETURN 'Batch header_signature does not equal batch_id';
    END IF;
    IF hdr_len = 0 THEN
        RETURN 'Batch header is empty';
    END IF;
    RETURN NULL;
END
$fn$;

-- batchlist_defect() first tries the layout every protobuf encoder writes
-- (fields in number order, one-byte tags, lengths of one or two bytes):
--   0a <len> Batch { 0a <len> header, 12 80 01 <batch_id>,
--                    (1a <len> Transaction { [0a <len> ..] [12 <len> ..] [1a <len> ..] })*,
--                    [20 01] }
-- in a few statements, and hands anything else to the general walker. It
-- runs once for every inserted batch, so its cost bounds bulk enqueue.
CREATE FUNCTION queuer.batchlist_defect(p bytea, p_batch_id text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    n integer := octet_length(p);
    q bytea;        -- p with padding: reading a few bytes past its end is harmless
    i integer;      -- next byte, 0-based
    t integer;      -- end of the current Transaction
    b integer;
    l integer;      -- a field's length
    k integer;      -- lowest tag the next Transaction field may have
BEGIN
    IF n IS NULL OR n < 136 THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    q := p || '\x000000'::bytea;
    -- BatchList: a single field 1 (0a <len>) whose Batch runs to the end.
    IF get_byte(q, 0) <> 10 THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    b := get_byte(q, 1);
    IF b < 128 THEN
        l := b;
        i := 2;
    ELSIF get_byte(q, 2) < 128 THEN
        l := (b & 127) | (get_byte(q, 2) << 7);
        i := 3;
    ELSE
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    IF i + l <> n OR get_byte(q, i) <> 10 THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    -- Batch.header: 0a <len>, not empty.
    b := get_byte(q, i + 1);
    IF b < 128 THEN
        l := b;
        i := i + 2;
    ELSIF get_byte(q, i + 2) < 128 THEN
        l := (b & 127) | (get_byte(q, i + 2) << 7);
        i := i + 3;
    ELSE
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    i := i + l;
    -- Batch.header_signature: 12 80 01 and the 128 characters of batch_id.
    IF l = 0 OR i + 131 > n THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    IF get_byte(q, i) <> 18 OR get_byte(q, i + 1) <> 128 OR get_byte(q, i + 2) <> 1
       OR substring(p FROM i + 4 FOR 128) <> convert_to(p_batch_id, 'UTF8') THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    i := i + 131;
    -- Batch.transactions: 1a <len> Transaction, each holding fields 1..3
    -- (0a, 12, 1a <len>) in increasing order.
    LOOP
        EXIT WHEN i >= n;
        EXIT WHEN get_byte(q, i) <> 26;
        b := get_byte(q, i + 1);
        IF b < 128 THEN
            l := b;
            i := i + 2;
        ELSIF get_byte(q, i + 2) < 128 THEN
            l := (b & 127) | (get_byte(q, i + 2) << 7);
            i := i + 3;
        ELSE
            RETURN queuer.batchlist_defect_walk(p, p_batch_id);
        END IF;
        t := i + l;
        IF t > n THEN
            RETURN queuer.batchlist_defect_walk(p, p_batch_id);
        END IF;
        k := 10;
        WHILE i < t LOOP
            b := get_byte(q, i);
            IF b < k OR (b <> 10 AND b <> 18 AND b <> 26) THEN
                RETURN queuer.batchlist_defect_walk(p, p_batch_id);
            END IF;
            k := b + 8;
            b := get_byte(q, i + 1);
            IF b < 128 THEN
                l := b;
                i := i + 2;
            ELSIF get_byte(q, i + 2) < 128 THEN
                l := (b & 127) | (get_byte(q, i + 2) << 7);
                i := i + 3;
            ELSE
                RETURN queuer.batchlist_defect_walk(p, p_batch_id);
            END IF;
            i := i + l;
        END LOOP;
        IF i <> t THEN
            RETURN queuer.batchlist_defect_walk(p, p_batch_id);
        END IF;
    END LOOP;
    -- Batch.trace = true (20 01) may end it; false is not written.
    IF i + 2 = n AND get_byte(q, i) = 32 AND get_byte(q, i + 1) = 1 THEN
        i := n;
    END IF;
    IF i <> n THEN
        RETURN queuer.batchlist_defect_walk(p, p_batch_id);
    END IF;
    RETURN NULL;
END
$fn$;

-- Ids use the "C" collation: byte order, as the C tie-break of docs/DESIGN.md §5.1
-- compares them, whatever the database locale, and cheaper to index.
CREATE TABLE queuer.batches (
    batch_id          text COLLATE "C" PRIMARY KEY,
    service_id        text COLLATE "C" NOT NULL,
    payload           bytea NOT NULL,
    created_at        timestamptz NOT NULL,
    submitted         boolean NOT NULL DEFAULT false,
    status            text,
    attempts          integer NOT NULL DEFAULT 0,
    last_submitted_at timestamptz,
    retry_at          timestamptz,
    status_at         timestamptz,
    last_error        text,
    -- length first: the same rule as ^[0-9a-f]{128}$ at a fraction of the cost
    CONSTRAINT batches_batch_id_format
        CHECK (length(batch_id) = 128 AND batch_id ~ '^[0-9a-f]*$'),
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
-- An exclusion constraint (btree, equality) rather than a unique index so it
-- can be DEFERRABLE: still checked at the end of every statement, but one
-- statement may end a batch's turn and start the next of its service.
ALTER TABLE queuer.batches ADD CONSTRAINT batches_one_in_flight
    EXCLUDE USING btree (service_id WITH =)
    WHERE ((submitted AND status IS NULL) OR status = 'Pending')
    DEFERRABLE INITIALLY IMMEDIATE;

-- Why a batch is (re)submitted, for its 'Submitting' history row.
CREATE FUNCTION queuer.submit_reason(p_seen text, p_attempts integer, p_last_error text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT CASE coalesce(p_seen, '')
               WHEN '' THEN CASE WHEN p_attempts = 0 THEN 'first submission'
                                 ELSE 'resubmission: earlier attempt did not reach the ledger' END
               WHEN 'Unknown' THEN 'resubmission: ledger does not know the batch (confirmed)'
               WHEN 'Delayed' THEN 'retry after delay: ' || coalesce(p_last_error, '')
           END
$fn$;

-- Every stored payload is a valid one-Batch BatchList signed with its
-- batch_id: checked on insert and when payload or batch_id change (never
-- on the hot status updates). The size limit is ingest policy, enforced by
-- queuer.enqueue_rows(); reading queuer.settings here would cost a query
-- for every inserted batch.
CREATE FUNCTION queuer.batches_check_payload() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    defect text := queuer.batchlist_defect(NEW.payload, NEW.batch_id);
BEGIN
    IF defect IS NOT NULL THEN
        RAISE EXCEPTION 'batch %: %', NEW.batch_id, defect USING ERRCODE = 'QU400';
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER batches_check_payload BEFORE INSERT OR UPDATE OF payload, batch_id
    ON queuer.batches FOR EACH ROW EXECUTE FUNCTION queuer.batches_check_payload();

CREATE TABLE queuer.batch_history (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id    text COLLATE "C" NOT NULL,
    service_id  text COLLATE "C" NOT NULL,
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
    service_id  text COLLATE "C" PRIMARY KEY,
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
-- Maintenance reads only expired claims (a narrow predicate lock).
CREATE INDEX service_id_claims_expiry ON queuer.service_id_claims (expiry_1)
    WHERE claimant IS NOT NULL;

CREATE TABLE queuer.service_ingest (
    service_id      text COLLATE "C" PRIMARY KEY,
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

-- What happened to a row that was not stored (see queuer.enqueue_rows).
CREATE TYPE queuer.enqueue_outcome AS (
    line_no integer,
    batch_id text,
    outcome text,
    detail  text
);

-- Enqueues rows in array order and returns one row for each one not
-- stored, with outcome
--   'duplicate'    the same batch (id, service, payload) is stored, or came
--                  earlier in p_rows: an idempotent no-op
--   'conflict'     the batch_id is stored, or came earlier, with other content
--   'backpressure' the service's backlog is at the high mark (see below)
--   'invalid'      malformed service_id, batch_id or payload
--   'too_large'    payload over queuer.settings.max_payload_bytes
-- With p_skip = false any outcome but 'duplicate' raises instead (QU400,
-- QU409, QU413, QU429; the message names the first such line) and nothing
-- is stored; with p_skip = true the other rows are stored regardless.
--
-- Back pressure, per service, with the hysteresis state in
-- queuer.service_ingest.blocked: a service is blocked once its non-final
-- backlog reaches high, and stays blocked until the backlog is below low.
-- high and low come from queuer.settings unless the session sets
-- queuer.ingest_high / queuer.ingest_low; high = 0 disables.
--
-- Concurrency: the services' service_ingest rows are created if needed and
-- locked in service_id order (no deadlocks between loads) before anything
-- is counted, so concurrent loads into one service are serialised and
-- every count is exact under READ COMMITTED. Each service's batches get
-- strictly increasing created_at in array order, also across loads. Every
-- row's service is locked, even a refused row's: a caller that loads in
-- several calls in one transaction first passes one row per service with
-- no batch_id (refused as invalid) to take all its locks in one sorted
-- pass, so that concurrent loads cannot deadlock.
--
-- Speed: one set-based statement classifies and inserts. Formats and
-- payloads are checked once, by the table's CHECK constraints and the
-- batches_check_payload trigger, and with back pressure off a stored
-- batch_id is found by the primary key. Only when one of those fails (a
-- caller sent a bad row, or a batch that is already stored) is the
-- statement re-run "carefully", with every row classified up front, so
-- that such rows are reported rather than fatal.
CREATE FUNCTION queuer.enqueue_rows(p_rows queuer.enqueue_row[], p_skip boolean)
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

-- The application's enqueue: one batch. Returns 'enqueued', or 'duplicate'
-- when the same batch (id, service, payload) is already stored. Raises
-- QU400 (invalid), QU409 (batch_id taken by other content), QU413 (payload
-- too large), QU429 (back pressure: retry once the service's backlog is
-- below the low mark; the message says which).
CREATE FUNCTION queuer.enqueue_batch(p_service_id text, p_batch_id text, p_payload bytea)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    res queuer.enqueue_outcome;
BEGIN
    SELECT * INTO res FROM queuer.enqueue_rows(
        ARRAY[ROW(NULL, p_service_id, p_batch_id, p_payload)::queuer.enqueue_row], true);
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
-- Workers change a batch's state, never its identity or payload.
GRANT SELECT,
      UPDATE (submitted, status, attempts, last_submitted_at, retry_at, status_at, last_error)
      ON queuer.batches TO queuer_worker;
GRANT SELECT, INSERT ON queuer.batch_history TO queuer_worker;
GRANT SELECT, INSERT, UPDATE ON queuer.service_id_claims TO queuer_worker;
GRANT SELECT ON queuer.service_ingest TO queuer_worker;
GRANT SELECT, INSERT, UPDATE ON queuer.instances TO queuer_worker;
GRANT EXECUTE ON FUNCTION queuer.submit_reason(text, integer, text) TO queuer_worker;
GRANT EXECUTE ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean),
                          queuer.enqueue_batch(text, text, bytea)
      TO queuer_worker, queuer_enqueuer;

GRANT SELECT ON queuer.batch_states, queuer.claims, queuer.history, queuer.live_instances,
                queuer.schema_migrations
      TO queuer_operator;
