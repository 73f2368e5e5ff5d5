-- 0010: batch priority and the ledger nodes a worker reports.
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
-- dlt.priority_aging_ms). The column is added with a constant default
-- (no table rewrite), then given the default the enqueue functions use.
ALTER TABLE queuer.batches ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE queuer.batches ADD CONSTRAINT batches_priority_range
    CHECK (priority BETWEEN -1000 AND 1000) NOT VALID;
COMMENT ON COLUMN queuer.batches.priority IS
    'Priority of the batch, -1000..1000, higher first (default 0): when ledger capacity is '
    'short, services whose next batch has a higher priority go first (a waiting service gains '
    'one step per dlt.priority_aging_ms). Never reorders a service''s own batches.';

-- The enqueue functions gain the priority parameter without a new copy of
-- the implementation (0001's, renamed queuer.enqueue_rows_unchecked by
-- 0007, which inserts rows without naming the column): the column's default
-- is the transaction's queuer.enqueue_priority setting (0 when unset), the
-- wrapper queuer.enqueue_rows (0007's: session marks for the owner only, no
-- foreign service named, p_skip = false raises) checks its p_priority and
-- sets it around the call, and queuer.enqueue_batch (0001's) passes its
-- own on. Any insert path that names no priority (a later bulk path
-- included) stores what the setting says; the CHECK refuses a value out of
-- range. A new parameter list makes a new function, so the old ones are
-- dropped first (a call with the old arguments resolves to the new ones
-- through the default).
ALTER TABLE queuer.batches ALTER COLUMN priority
    SET DEFAULT coalesce(nullif(current_setting('queuer.enqueue_priority', true), '')::integer, 0);
DROP FUNCTION queuer.enqueue_batch(text, text, bytea);
DROP FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean);

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
    IF p_priority IS NULL OR p_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'priority must be an integer from -1000 to 1000, not %',
                        coalesce(p_priority::text, 'NULL')
            USING ERRCODE = 'QU400';
    END IF;
    PERFORM set_config('queuer.enqueue_priority', p_priority::text, true);
    SELECT array_agg(CASE WHEN o.outcome = 'conflict'
                               AND o.detail LIKE 'batch_id is already enqueued%'
                          THEN ROW(o.line_no, o.batch_id, o.outcome,
                                   'batch_id is already enqueued with a different service or '
                                   'payload')::queuer.enqueue_outcome
                          ELSE o END)
      INTO outcomes
      FROM queuer.enqueue_rows_unchecked(p_rows, true) o;
    PERFORM set_config('queuer.enqueue_priority', '', true);
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
    'row not stored (see queuer.enqueue_rows_unchecked in migration 0001). Session '
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
