-- 0020: coordination that costs what changed (docs/CLAIMS.md).
--
-- 1. No application transaction holds a row a worker's fence needs. The
--    count of a service's work (non-final batches that are not parked, 6.)
--    is split by writer: service_ingest.n_in counts the batches inserts
--    made work (an enqueue holds that row's lock already, for creation
--    order), and service_id_claims.n_out the batches that updates and
--    deletes took out of the work, less those they put back (the workers'
--    fenced statements hold the claim row's lock already). Work = n_in -
--    n_out, exact for committed data. An enqueue writes the claim row only
--    of a service nobody holds.
-- 2. Claims are sticky: a worker keeps a service when its work runs out,
--    so the next batch of the service needs no claims transaction.
--    `has_work` now says whether a *free* service may have work (the
--    index of free services with work, claimed by priority); it is exact
--    when a claim goes back, set by the enqueue and by statements that
--    make a free service's batch non-final, and not kept while a service
--    is held. `head_priority` likewise is the priority of a free
--    service's head; the view queuer.claims shows the live values.
-- 3. Assignment at enqueue: an insert that gives work to a free service
--    gives the service to a live instance in the same statement (by a
--    hash of the service over the live instances that hold less than an
--    even share), one row update with claim_epoch + 1.
-- 4. Targeted wake-ups: every registration gets its own incarnation, and
--    each instance listens on its own channel queuer_i<incarnation>. An
--    insert notifies the holder of each service it gave work to, with the
--    service and its claim epoch ("<service>:<epoch>", up to eight in one
--    payload separated by spaces; "*" for more: read your claims and fetch
--    them all). Nobody else wakes. Claims changes that concern everyone
--    (a registration, claims given back) go on queuer_claims.
-- 5. The incarnation fences a frozen twin: the lease renewal and every
--    fenced write name it, so a process whose registration was taken over
--    by a new one with the same instance_id writes nothing more.
-- 6. Parked batches are not work. A batch Delayed with retry_at = infinity
--    (it used up dlt.max_attempts) waits for an operator; the count above
--    leaves it out (queuer.batch_is_work), so a service whose only work is
--    parked is free without work when its claim goes back, and neither
--    pickup nor the fair share counts it. The operator views list it as
--    before (stuck_batches, service_overview, queuer status).
--
-- queuer.enqueue_rows_unchecked() and queuer.enqueue_batch() read the
-- back-pressure backlog from the claim row's n_open; they are 0017's and
-- 0019's functions with that read changed and their own notification gone
-- (the insert's trigger wakes the holder).

-- Each instance's worker.max_claims, reported with its lease (0 = none).
ALTER TABLE queuer.instances ADD COLUMN max_claims integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN queuer.instances.max_claims IS
    'The instance''s worker.max_claims (0 = none), reported with its lease: an enqueue gives '
    'no new service to an instance that holds that many.';

-- Incarnations.
CREATE SEQUENCE queuer.instance_incarnation;
ALTER TABLE queuer.instances
    ADD COLUMN incarnation bigint NOT NULL DEFAULT nextval('queuer.instance_incarnation');
COMMENT ON COLUMN queuer.instances.incarnation IS
    'Set anew at every registration: the lease renewal and every fenced write of the '
    'instance name it, so an earlier process registered under the same instance_id '
    '(a frozen twin) writes nothing. The instance listens on channel queuer_i<incarnation>.';
GRANT USAGE ON SEQUENCE queuer.instance_incarnation TO queuer_worker;

-- Work: a non-final batch that is not parked.
CREATE FUNCTION queuer.batch_is_work(p_status text, p_retry_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT (p_status IS NULL OR p_status IN ('Pending', 'Unknown', 'Delayed'))
           AND NOT coalesce(p_status = 'Delayed' AND p_retry_at = 'infinity'::timestamptz, false)
$fn$;
COMMENT ON FUNCTION queuer.batch_is_work(text, timestamptz) IS
    'A batch is work for its service while it is not final and not parked (Delayed with '
    'retry_at = infinity: it waits for an operator).';

-- Whether a service's head (its oldest non-final batch) is parked: the
-- batches behind it wait for the operator too, so the service has no work
-- a worker can do.
CREATE FUNCTION queuer.head_parked(p_service_id text) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT coalesce((SELECT h.status = 'Delayed' AND h.retry_at = 'infinity'::timestamptz
                       FROM queuer.batches h
                      WHERE h.service_id = p_service_id
                        AND (h.status IS NULL OR h.status IN ('Pending', 'Unknown', 'Delayed'))
                      ORDER BY h.created_at, h.batch_id
                      LIMIT 1), false)
$fn$;
GRANT EXECUTE ON FUNCTION queuer.head_parked(text) TO queuer_worker;

-- The split counter.
ALTER TABLE queuer.service_ingest ADD COLUMN n_in bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN queuer.service_ingest.n_in IS
    'Batches of the service that inserts made work (non-final and not parked; kept by a '
    'trigger on queuer.batches); the service''s work = n_in - service_id_claims.n_out.';
ALTER TABLE queuer.service_id_claims ADD COLUMN n_out bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN queuer.service_id_claims.n_out IS
    'Batches of the service that updates and deletes took out of its work (made final or '
    'parked, or deleted), less those they put back (kept by a trigger on queuer.batches); the '
    'service''s work = service_ingest.n_in - n_out.';

INSERT INTO queuer.service_ingest (service_id)
SELECT c.service_id FROM queuer.service_id_claims c
ON CONFLICT DO NOTHING;
UPDATE queuer.service_ingest i
   SET n_in = w.n
  FROM (SELECT b.service_id, count(*) AS n FROM queuer.batches b
         WHERE queuer.batch_is_work(b.status, b.retry_at)
         GROUP BY b.service_id) w
 WHERE w.service_id = i.service_id;

-- Operators see the live count of work (parked batches left out) and the
-- head's priority (computed only when selected).
CREATE OR REPLACE VIEW queuer.claims AS
    SELECT c.service_id, c.claimant, c.claim_epoch,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_1, i.lease_1) END AS expiry_1,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_2, i.lease_2) END AS expiry_2,
           c.submitting,
           (coalesce(g.n_in, 0) - c.n_out)::integer AS n_open,
           coalesce((SELECT b.priority FROM queuer.batches b
                      WHERE b.service_id = c.service_id
                        AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))
                      ORDER BY b.created_at, b.batch_id
                      LIMIT 1), 0) AS head_priority
      FROM queuer.service_id_claims c
      LEFT JOIN queuer.instances i ON i.instance_id = c.claimant
      LEFT JOIN queuer.service_ingest g ON g.service_id = c.service_id;

DROP INDEX queuer.service_id_claims_free_work;
DROP INDEX queuer.service_id_claims_idle;
ALTER TABLE queuer.service_id_claims RENAME COLUMN has_work TO had_work;
ALTER TABLE queuer.service_id_claims ADD COLUMN has_work boolean NOT NULL DEFAULT false;
UPDATE queuer.service_id_claims SET has_work = true WHERE had_work;
ALTER TABLE queuer.service_id_claims DROP COLUMN had_work, DROP COLUMN n_open,
    DROP COLUMN n_open_nonzero;
COMMENT ON COLUMN queuer.service_id_claims.has_work IS
    'While the service is free: it may have non-final batches (never false when it has). Set '
    'exactly when a claim goes back, set by inserts and by updates that give a free service '
    'work; not kept while the service is held (see queuer.claims.n_open).';
COMMENT ON COLUMN queuer.service_id_claims.head_priority IS
    'While the service is free: the priority of its head batch when it was given back or got '
    'work (free services with work are claimed highest first); not kept while it is held '
    '(see queuer.claims.head_priority).';
-- Free services with work by priority, then by the hash of their id.
CREATE INDEX service_id_claims_free_work
    ON queuer.service_id_claims (head_priority, hashtext(service_id))
    WHERE claimant IS NULL AND has_work;
-- Workers lock ingest rows FOR SHARE (a claim changes hands only while no
-- enqueue of its service is in progress); that needs an UPDATE grant on one
-- column, and workers write none.
GRANT UPDATE (blocked) ON queuer.service_ingest TO queuer_worker;

-- Follows the statements on queuer.batches:
-- - INSERT (an enqueue): counts the new work on the services' ingest rows
--   (locked by the enqueue already), creates missing claim rows, gives free
--   services to a live instance (or, with none live, marks them free with
--   work), then wakes each holder. Held claim rows are read, not written.
-- - UPDATE, DELETE (workers' fenced statements, operator actions): n_out
--   and `submitting` on the claim row, which a worker's statement has
--   locked already; a free service that gets work back is marked so, and
--   the holder of a held one is woken.
-- A statement on one batch (a lone enqueue, a worker's mark or outcome of
-- one batch) takes plain statements on that one service, whose plans the
-- function keeps; a statement that reads the transition tables is planned
-- again on every call, which for the set-based statements below costs more
-- than the work itself.
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
               count(*) OVER () AS k
          INTO one FROM new_rows n LIMIT 1;
        IF EXISTS (SELECT 1 FROM new_rows n WHERE n.submitted AND n.status IS NULL) THEN
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
               count(*) OVER () AS k
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

-- 0017's function; the backlog is n_in - n_out, and the holders are woken by
-- the insert's trigger (no notification of its own).
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
                -- (the backlog is n_in - n_out, kept by the batches triggers:
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
    -- (the holders of the services are woken by the insert's trigger)
    RETURN QUERY SELECT o.* FROM unnest(outcomes) o ORDER BY o.line_no NULLS LAST;
END
$fn$;

-- 0019's function; the backlog is n_in - n_out, and the holder is woken by the
-- insert's trigger.
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
    -- or by a concurrent enqueue) inserts neither
    IF e_svc IS NULL THEN
        WITH b AS (
            INSERT INTO queuer.batches AS b (batch_id, service_id, payload, created_at, priority)
            VALUES (p_batch_id, p_service_id, p_payload, created, p_priority)
            ON CONFLICT (batch_id) DO NOTHING
            RETURNING b.batch_id, b.service_id
        )
        INSERT INTO queuer.batch_history (batch_id, service_id, to_status)
        SELECT b.batch_id, b.service_id, 'Enqueued' FROM b;
        IF NOT FOUND THEN
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

    -- 6. the ingest state (written only when it changes); the holder of
    -- the service is woken by the insert's trigger
    IF (s_high > 0 AND backlog + 1 >= s_high) <> blocked THEN
        UPDATE queuer.service_ingest i SET blocked = NOT i.blocked
         WHERE i.service_id = p_service_id;
    END IF;
    RETURN 'enqueued';
END
$fn$;
