-- 0002: operator views, the indexes they need, and audited operator actions.
--
-- Everything here is read-only for workers: no worker statement reads
-- these views, and the two indexes added to queuer.batches are partial,
-- small (a few rows per service) and only maintained when a batch is
-- started or becomes final. Views never expose payload bytes.
--
-- Thresholds the views use live in queuer.settings and can be overridden
-- for one session, e.g. SET queuer.stuck_after = '30 minutes'.

ALTER TABLE queuer.settings
    ADD COLUMN instance_dead_after interval NOT NULL DEFAULT '30 seconds'
        CHECK (instance_dead_after > interval '0'),
    ADD COLUMN stuck_after interval NOT NULL DEFAULT '10 minutes'
        CHECK (stuck_after > interval '0'),
    ADD COLUMN stuck_attempts integer NOT NULL DEFAULT 10 CHECK (stuck_attempts > 0);
COMMENT ON COLUMN queuer.settings.instance_dead_after IS
    'queuer.instance_overview calls an instance dead when its last heartbeat is older than '
    'this (session override: SET queuer.instance_dead_after). Keep it near worker.lease_ms.';
COMMENT ON COLUMN queuer.settings.stuck_after IS
    'queuer.stuck_batches lists a batch Delayed, Pending or being submitted for longer than '
    'this (session override: SET queuer.stuck_after).';
COMMENT ON COLUMN queuer.settings.stuck_attempts IS
    'queuer.stuck_batches lists a batch submitted at least this many times '
    '(session override: SET queuer.stuck_attempts).';

-- The thresholds in effect for this session: settings, overridden by the
-- session's queuer.* variables when set.
CREATE VIEW queuer.operator_thresholds AS
    SELECT coalesce(nullif(current_setting('queuer.instance_dead_after', true), '')::interval,
                    s.instance_dead_after) AS instance_dead_after,
           coalesce(nullif(current_setting('queuer.stuck_after', true), '')::interval,
                    s.stuck_after) AS stuck_after,
           coalesce(nullif(current_setting('queuer.stuck_attempts', true), '')::integer,
                    s.stuck_attempts) AS stuck_attempts
      FROM queuer.settings s;
COMMENT ON VIEW queuer.operator_thresholds IS
    'Thresholds the operator views apply: queuer.settings, overridden per session by '
    'SET queuer.instance_dead_after / queuer.stuck_after / queuer.stuck_attempts.';

-- Unfinished batches that have been started (submitted at least once, or
-- being submitted): at most one per service, so queuer.stuck_batches reads
-- a handful of index entries however long the history is.
CREATE INDEX batches_started ON queuer.batches (service_id)
    WHERE (status IS NULL AND (submitted OR attempts > 0))
       OR status IN ('Pending', 'Unknown', 'Delayed');
-- Final batches by the time they became final: `queuer prune` deletes the
-- oldest in small chunks without scanning the table, and counts them
-- (--dry-run) from the index alone.
CREATE INDEX batches_final_at ON queuer.batches (status_at) INCLUDE (status)
    WHERE status IN ('Committed', 'Valid', 'Invalid');

CREATE VIEW queuer.service_overview AS
    SELECT c.service_id,
           c.claimant,
           c.claim_epoch,
           c.expiry_1,
           c.expiry_2,
           CASE WHEN c.claimant IS NULL THEN 'free'
                WHEN c.expiry_1 > now() THEN 'held'
                WHEN c.expiry_2 > now() THEN 'lapsed'
                ELSE 'expired' END AS claim_state,
           bl.backlog,
           coalesce((h.submitted AND h.status IS NULL) OR h.status = 'Pending', false)
               AS in_flight,
           h.batch_id AS head_batch_id,
           CASE WHEN h.batch_id IS NULL THEN NULL
                WHEN h.status = 'Delayed' AND h.retry_at = 'infinity' THEN 'parked'
                WHEN h.status IS NOT NULL THEN h.status
                WHEN h.submitted THEN 'submitting'
                ELSE 'waiting' END AS head_state,
           h.attempts AS head_attempts,
           h.retry_at AS head_retry_at,
           h.created_at AS oldest_waiting_created_at,
           now() - h.created_at AS oldest_waiting_age,
           h.last_error,
           coalesce(i.blocked, false) AS ingest_blocked
      FROM queuer.service_id_claims c
     CROSS JOIN LATERAL (
           SELECT count(*) AS backlog FROM queuer.batches b
            WHERE b.service_id = c.service_id
              AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))) bl
      LEFT JOIN LATERAL (
           SELECT b.batch_id, b.status, b.submitted, b.attempts, b.retry_at, b.created_at,
                  b.last_error
             FROM queuer.batches b
            WHERE b.service_id = c.service_id
              AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))
            ORDER BY b.created_at, b.batch_id
            LIMIT 1) h ON true
      LEFT JOIN queuer.service_ingest i ON i.service_id = c.service_id;
COMMENT ON VIEW queuer.service_overview IS
    'One row per service: its claim (claimant, epoch, expiries; claim_state free, held, '
    'lapsed = past expiry_1, expired = past expiry_2), backlog = unfinished batches, whether '
    'one is in flight, and its oldest unfinished batch (the head, which goes next or is in '
    'flight): id, state (waiting, submitting, Pending, Delayed, parked, Unknown), attempts, '
    'age and last error. ingest_blocked: enqueue refused until the backlog drains.';

CREATE VIEW queuer.stuck_batches AS
    SELECT b.batch_id,
           b.service_id,
           CASE WHEN b.status = 'Delayed' AND b.retry_at = 'infinity' THEN 'parked'
                WHEN b.status IS NOT NULL THEN b.status
                WHEN b.submitted THEN 'submitting'
                ELSE 'waiting' END AS state,
           r.reasons,
           b.attempts,
           b.created_at,
           fs.at AS first_submitted_at,
           b.last_submitted_at,
           b.status_at,
           b.retry_at,
           now() - coalesce(fs.at, b.created_at) AS stuck_for,
           b.last_error,
           c.claimant,
           c.claim_epoch,
           w.waiting_behind
      FROM queuer.batches b
      LEFT JOIN LATERAL (
           SELECT h.at FROM queuer.batch_history h
            WHERE h.batch_id = b.batch_id AND h.to_status = 'Submitting'
            ORDER BY h.id
            LIMIT 1) fs ON true
     CROSS JOIN LATERAL (
           SELECT array_remove(ARRAY[
                      CASE WHEN b.retry_at = 'infinity' THEN 'parked' END,
                      CASE WHEN b.status = 'Unknown' THEN 'unknown' END,
                      CASE WHEN b.status = 'Delayed' AND b.retry_at <> 'infinity'
                                AND coalesce(fs.at, b.created_at) < now() - t.stuck_after
                           THEN 'delayed_long' END,
                      CASE WHEN b.attempts >= t.stuck_attempts THEN 'many_attempts' END,
                      CASE WHEN b.status = 'Pending' AND b.status_at < now() - t.stuck_after
                           THEN 'pending_long' END,
                      CASE WHEN b.submitted AND b.status IS NULL
                                AND b.status_at < now() - t.stuck_after
                           THEN 'submitting_long' END], NULL) AS reasons
             FROM (SELECT (SELECT x.stuck_after FROM queuer.operator_thresholds x) AS stuck_after,
                          (SELECT x.stuck_attempts FROM queuer.operator_thresholds x)
                              AS stuck_attempts) t) r
      LEFT JOIN queuer.service_id_claims c ON c.service_id = b.service_id
     CROSS JOIN LATERAL (
           SELECT count(*) AS waiting_behind FROM queuer.batches o
            WHERE o.service_id = b.service_id
              AND (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))
              AND (o.created_at, o.batch_id) > (b.created_at, b.batch_id)) w
     WHERE ((b.status IS NULL AND (b.submitted OR b.attempts > 0))
            OR b.status IN ('Pending', 'Unknown', 'Delayed'))
       AND cardinality(r.reasons) > 0;
COMMENT ON VIEW queuer.stuck_batches IS
    'Started, unfinished batches that need a look, with reasons: parked (retry_at = infinity: '
    'dlt.max_attempts used up; only an operator retry or cancel moves it), unknown (the '
    'ledger does not know it), delayed_long (Delayed, first submitted longer than stuck_after '
    'ago), many_attempts (attempts >= stuck_attempts), pending_long / submitting_long (no '
    'change for stuck_after). waiting_behind counts the service''s batches blocked behind it. '
    'Act with queuer batch retry|cancel.';

CREATE VIEW queuer.instance_overview AS
    SELECT i.instance_id,
           i.host,
           i.pid,
           i.version,
           i.started_at,
           i.heartbeat_at,
           i.stopped_at,
           now() - i.heartbeat_at AS heartbeat_age,
           CASE WHEN i.stopped_at IS NOT NULL THEN 'stopped'
                WHEN i.heartbeat_at > now() - (SELECT t.instance_dead_after
                                                 FROM queuer.operator_thresholds t) THEN 'alive'
                ELSE 'dead' END AS state,
           cl.claims_held,
           cl.claims_lapsed
      FROM queuer.instances i
     CROSS JOIN LATERAL (
           SELECT count(*) FILTER (WHERE c.expiry_1 > now()) AS claims_held,
                  count(*) FILTER (WHERE c.expiry_1 <= now()) AS claims_lapsed
             FROM queuer.service_id_claims c
            WHERE c.claimant = i.instance_id) cl;
COMMENT ON VIEW queuer.instance_overview IS
    'One row per worker instance ever registered: state alive (heartbeat within '
    'instance_dead_after), dead (silent longer: crashed, hung or cut off), or stopped (clean '
    'exit); claims_held = claims with a live lease, claims_lapsed = claims past expiry_1 that '
    'maintenance has not freed yet.';

CREATE VIEW queuer.batch_counts AS
    SELECT s.state, count(*) AS batches, min(s.created_at) AS oldest_created_at,
           now() - min(s.created_at) AS oldest_age
      FROM (SELECT CASE WHEN b.status = 'Delayed' AND b.retry_at = 'infinity' THEN 'parked'
                        WHEN b.status IS NOT NULL THEN b.status
                        WHEN b.submitted THEN 'submitting'
                        ELSE 'waiting' END AS state,
                   b.created_at
              FROM queuer.batches b
             WHERE b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')) s
     GROUP BY s.state;
COMMENT ON VIEW queuer.batch_counts IS
    'Unfinished batches by state: waiting (never submitted, or handed back before POST), '
    'submitting (a worker is posting it), Pending (accepted, awaiting a final status), '
    'Delayed (retry at retry_at), parked (Delayed for good: dlt.max_attempts used up), '
    'Unknown (resubmission follows). States with no batch have no row. Final batches are '
    'counted from the history by queuer.status_counts.';

CREATE VIEW queuer.status_counts AS
    SELECT h.to_status AS status,
           count(*) FILTER (WHERE h.at >= now() - interval '5 minutes') AS last_5m,
           count(*) FILTER (WHERE h.at >= now() - interval '1 hour') AS last_1h,
           count(*) AS last_24h
      FROM queuer.batch_history h
     WHERE h.at >= now() - interval '24 hours'
     GROUP BY h.to_status;
COMMENT ON VIEW queuer.status_counts IS
    'Transitions recorded in the history in the last 5 minutes, hour and 24 hours, by the '
    'status reached: ledger statuses (Pending = accepted, Committed, Valid, Invalid, Delayed, '
    'Unknown) and Enqueued, Submitting, Requeued (handed back before POST), Retrying and '
    'Cancelled (operator actions).';

CREATE VIEW queuer.throughput AS
    WITH h AS (
        SELECT date_trunc('minute', x.at) AS minute, x.to_status
          FROM queuer.batch_history x
         WHERE x.at >= date_trunc('minute', now()) - interval '59 minutes'
    )
    SELECT m.minute,
           count(h.to_status) FILTER (WHERE h.to_status = 'Enqueued') AS enqueued,
           count(h.to_status) FILTER (WHERE h.to_status = 'Submitting') AS submissions,
           count(h.to_status) FILTER (WHERE h.to_status = 'Pending') AS accepted,
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
COMMENT ON VIEW queuer.throughput IS
    'The last 60 minutes, one row per minute (the current one still filling), counted from '
    'the history: batches enqueued, submissions (POSTs started), accepted (Pending), and the '
    'statuses reached. A drop in committed with steady submissions points at the ledger.';

-- Operator actions on one batch (queuer batch retry|cancel). Fenced
-- against workers: the service's claim row and then the batch row are
-- locked (the lock order the workers use), the batch's state is read under
-- the lock, and the update is a compare-and-set on that state. A batch in
-- flight (being submitted, or Pending at the ledger) is refused: its
-- outcome is the worker's to record. Every action appends a history row
-- with instance_id 'operator:<login role>' (session_user: inside this
-- SECURITY DEFINER function current_user is the owner) and the reason, and
-- NOTIFYs queuer_work with the service id so its worker looks at once.
-- Returns one row: outcome 'done', 'not_found', 'in_flight', 'final',
-- 'not_needed' (retry of a batch that was never submitted) or 'changed'
-- (the compare-and-set lost; cannot happen under the locks), the batch's
-- service, state before and after, and a message for the operator.
CREATE FUNCTION queuer.operator_batch_action(p_action text, p_batch_id text, p_reason text)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, queuer, pg_temp
SET lock_timeout = '5s' AS $fn$
DECLARE
    v_service  text;
    v_claimant text;
    v_epoch    bigint;
    b          record;
    v_state    text;
    v_who      text := 'operator:' || session_user;
    v_reason   text := nullif(btrim(coalesce(p_reason, '')), '');
    v_detail   text;
    n          integer;
BEGIN
    IF p_action IS NULL OR p_action NOT IN ('retry', 'cancel') THEN
        RAISE EXCEPTION 'unknown operator action %', p_action USING ERRCODE = '22023';
    END IF;
    IF p_action = 'cancel' AND v_reason IS NULL THEN
        RAISE EXCEPTION 'a cancel needs a reason' USING ERRCODE = '22023';
    END IF;
    SELECT x.service_id INTO v_service FROM queuer.batches x WHERE x.batch_id = p_batch_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text, NULL::text, NULL::text,
                            format('no batch %s', p_batch_id);
        RETURN;
    END IF;
    -- Lock order: claim row, then batch row (as outcomes_record takes them).
    SELECT c.claimant, c.claim_epoch INTO v_claimant, v_epoch
      FROM queuer.service_id_claims c WHERE c.service_id = v_service FOR UPDATE;
    SELECT x.status, x.submitted, x.retry_at, x.attempts INTO b
      FROM queuer.batches x WHERE x.batch_id = p_batch_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, v_service, NULL::text, NULL::text,
                            format('no batch %s (pruned a moment ago)', p_batch_id);
        RETURN;
    END IF;
    v_state := CASE WHEN b.status = 'Delayed' AND b.retry_at = 'infinity' THEN 'parked'
                    WHEN b.status IS NOT NULL THEN b.status
                    WHEN b.submitted THEN 'submitting'
                    ELSE 'waiting' END;
    IF v_state IN ('Committed', 'Valid', 'Invalid') THEN
        RETURN QUERY SELECT 'final'::text, v_service, v_state, v_state,
                            format('batch is already final (%s); nothing to %s',
                                   v_state, p_action);
        RETURN;
    END IF;
    IF v_state IN ('submitting', 'Pending') THEN
        RETURN QUERY SELECT 'in_flight'::text, v_service, v_state, v_state,
            CASE v_state
                WHEN 'submitting' THEN format(
                    'batch is in flight: worker %s (claim epoch %s) is submitting it; its '
                    'outcome is recorded by that worker. Try again once it is Delayed, '
                    'Unknown or final.', coalesce(v_claimant, '(none)'), v_epoch)
                ELSE format(
                    'batch is in flight: Pending at the ledger, followed by worker %s (claim '
                    'epoch %s). It cannot be changed until the ledger reports a final status '
                    'or it turns Unknown.', coalesce(v_claimant, '(none)'), v_epoch) END;
        RETURN;
    END IF;

    IF p_action = 'retry' THEN
        IF v_state = 'waiting' THEN
            RETURN QUERY SELECT 'not_needed'::text, v_service, v_state, v_state,
                'batch has not been submitted yet (or was handed back before its POST); it '
                'goes out when its turn comes'::text;
            RETURN;
        END IF;
        v_detail := format('operator retry (was %s after %s attempts)%s', v_state, b.attempts,
                           coalesce(': ' || v_reason, ''));
        UPDATE queuer.batches x SET retry_at = now()
         WHERE x.batch_id = p_batch_id
           AND x.status IS NOT DISTINCT FROM b.status
           AND x.submitted = b.submitted
           AND x.retry_at IS NOT DISTINCT FROM b.retry_at;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n = 0 THEN
            RETURN QUERY SELECT 'changed'::text, v_service, v_state, NULL::text,
                                'batch changed while it was being retried; look again'::text;
            RETURN;
        END IF;
        INSERT INTO queuer.batch_history
               (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
        VALUES (p_batch_id, v_service, b.status, 'Retrying', v_who, v_epoch, v_detail);
        PERFORM pg_notify('queuer_work', v_service);
        RETURN QUERY SELECT 'done'::text, v_service, v_state, b.status::text,
                            format('batch is due now (%s); the worker holding %s resubmits it',
                                   v_state, v_service);
        RETURN;
    END IF;

    v_detail := format('operator cancel (was %s after %s attempts): %s', v_state, b.attempts,
                       v_reason);
    UPDATE queuer.batches x
       SET status = 'Invalid', retry_at = NULL, status_at = now(),
           last_error = left('cancelled by operator: ' || v_reason, 1000)
     WHERE x.batch_id = p_batch_id
       AND x.status IS NOT DISTINCT FROM b.status
       AND x.submitted = b.submitted
       AND x.retry_at IS NOT DISTINCT FROM b.retry_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN
        RETURN QUERY SELECT 'changed'::text, v_service, v_state, NULL::text,
                            'batch changed while it was being cancelled; look again'::text;
        RETURN;
    END IF;
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    VALUES (p_batch_id, v_service, b.status, 'Cancelled', v_who, v_epoch, v_detail);
    PERFORM pg_notify('queuer_work', v_service);
    RETURN QUERY SELECT 'done'::text, v_service, v_state, 'Invalid'::text,
                        format('batch ends as Invalid; the next batch of %s may go', v_service);
END
$fn$;

-- Makes a Delayed, Unknown or parked batch due now (one more attempt for a
-- parked one). p_reason (may be NULL) goes into the history detail.
CREATE FUNCTION queuer.batch_retry(p_batch_id text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
    SELECT * FROM queuer.operator_batch_action('retry', p_batch_id, p_reason);
$fn$;
COMMENT ON FUNCTION queuer.batch_retry(text, text) IS
    'Operator action: a Delayed, Unknown or parked batch becomes due now. Refuses batches in '
    'flight or final. Recorded in the history as Retrying by operator:<login role>.';

-- Ends a batch that is not in flight as Invalid, so its service moves on.
CREATE FUNCTION queuer.batch_cancel(p_batch_id text, p_reason text)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
    SELECT * FROM queuer.operator_batch_action('cancel', p_batch_id, p_reason);
$fn$;
COMMENT ON FUNCTION queuer.batch_cancel(text, text) IS
    'Operator action: ends a waiting, Delayed, Unknown or parked batch as Invalid with the '
    'reason (required) so its service moves on. Refuses batches in flight or final. Recorded '
    'in the history as Cancelled by operator:<login role>.';

-- Functions are executable by PUBLIC unless revoked.
REVOKE ALL ON FUNCTION queuer.operator_batch_action(text, text, text),
                       queuer.batch_retry(text, text),
                       queuer.batch_cancel(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.batch_retry(text, text), queuer.batch_cancel(text, text)
      TO queuer_operator;
GRANT SELECT ON queuer.operator_thresholds, queuer.service_overview, queuer.stuck_batches,
                queuer.instance_overview, queuer.batch_counts, queuer.status_counts,
                queuer.throughput
      TO queuer_operator;

COMMENT ON VIEW queuer.batch_states IS
    'Every batch without its payload bytes (payload_bytes = its size).';
COMMENT ON VIEW queuer.claims IS 'The service claims workers coordinate through.';
COMMENT ON VIEW queuer.history IS
    'The append-only audit of batch transitions (queuer.batch_history).';
COMMENT ON VIEW queuer.live_instances IS
    'Registered worker instances; queuer.instance_overview adds alive/dead and claims.';
