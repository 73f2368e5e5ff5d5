-- 0034: an operator's action on a batch is counted whatever the session set.
--
-- The counters trigger on batches (0032) does not fire while
-- queuer.batches_counted is 'on', the setting with which the workers' mark
-- and outcome statements say that they keep the claim row's counters
-- themselves. A session that set it and then called queuer.batch_retry(),
-- queuer.batch_cancel() or queuer.batch_retry_invalid() left the counters
-- of the batches the action changed to nobody: a cancelled batch stayed
-- counted as work (its service looked busy to the idle-claims release), a
-- batch put back by a retry was not (a free service was not picked up for
-- it). The three functions now clear the setting for the rest of their
-- transaction before they change anything, as queuer.enqueue_staged()
-- clears queuer.enqueue_counted. (A function's own SET clause would keep
-- the caller's value, but only a superuser may attach a placeholder
-- setting to a function.)
--
-- No table is touched: the functions are replaced, a moment. Grants and
-- comments stay as they were.

-- The retry and the cancel: their body stays queuer.operator_batch_action()
-- (0002), which only these two may call.
CREATE OR REPLACE FUNCTION queuer.batch_retry(p_batch_id text, p_reason text DEFAULT NULL)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    PERFORM set_config('queuer.batches_counted', '', true);  -- counted, whatever was set
    RETURN QUERY SELECT * FROM queuer.operator_batch_action('retry', p_batch_id, p_reason);
END
$fn$;

CREATE OR REPLACE FUNCTION queuer.batch_cancel(p_batch_id text, p_reason text)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    PERFORM set_config('queuer.batches_counted', '', true);  -- counted, whatever was set
    RETURN QUERY SELECT * FROM queuer.operator_batch_action('cancel', p_batch_id, p_reason);
END
$fn$;

-- The retry of an Invalid batch: 0005's body, the setting cleared first.
CREATE OR REPLACE FUNCTION queuer.batch_retry_invalid(p_batch_id text, p_reason text)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, queuer, pg_temp
SET lock_timeout = '5s' AS $fn$
DECLARE
    v_service text;
    v_epoch   bigint;
    b         record;
    v_who     text := 'operator:' || session_user;
    v_reason  text := nullif(btrim(coalesce(p_reason, '')), '');
    v_later   bigint;
    v_detail  text;
BEGIN
    PERFORM set_config('queuer.batches_counted', '', true);  -- counted, whatever was set
    IF v_reason IS NULL THEN
        RAISE EXCEPTION 'retrying an Invalid batch needs a reason' USING ERRCODE = '22023';
    END IF;
    SELECT x.service_id INTO v_service FROM queuer.batches x WHERE x.batch_id = p_batch_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text, NULL::text, NULL::text,
                            format('no batch %s', p_batch_id);
        RETURN;
    END IF;
    -- Lock order: claim row, then batch row (as the workers take them).
    SELECT c.claim_epoch INTO v_epoch
      FROM queuer.service_id_claims c WHERE c.service_id = v_service FOR UPDATE;
    SELECT x.status, x.attempts, x.last_error INTO b
      FROM queuer.batches x WHERE x.batch_id = p_batch_id FOR UPDATE;
    IF b.status IS DISTINCT FROM 'Invalid' THEN
        RETURN QUERY SELECT 'not_needed'::text, v_service, coalesce(b.status, 'none'),
                            coalesce(b.status, 'none'),
                            format('batch is not Invalid (it is %s); use batch retry without '
                                   '--invalid for Delayed, Unknown or parked batches',
                                   coalesce(b.status, 'not yet final'));
        RETURN;
    END IF;
    SELECT count(*) INTO v_later FROM queuer.batches x
     WHERE x.service_id = v_service AND x.batch_id <> p_batch_id
       AND x.created_at >= (SELECT y.created_at FROM queuer.batches y
                             WHERE y.batch_id = p_batch_id)
       AND (x.submitted OR x.status IS NOT NULL);
    v_detail := format('operator retry of an Invalid batch (after %s attempts; was: %s): %s%s',
                       b.attempts, coalesce(b.last_error, '-'), v_reason,
                       CASE WHEN v_later > 0
                            THEN format(' [%s later batches of the service were already '
                                        'submitted: the ledger sees this one after them]',
                                        v_later)
                            ELSE '' END);
    UPDATE queuer.batches x
       SET status = NULL, submitted = false, retry_at = NULL, status_at = now()
     WHERE x.batch_id = p_batch_id AND x.status = 'Invalid';
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    VALUES (p_batch_id, v_service, 'Invalid', 'Retrying', v_who, v_epoch, left(v_detail, 2000));
    PERFORM pg_notify('queuer_work', v_service);
    RETURN QUERY SELECT 'done'::text, v_service, 'Invalid'::text, 'waiting'::text,
                        format('batch is queued again; it goes out when it is the oldest '
                               'non-final batch of %s%s', v_service,
                               CASE WHEN v_later > 0
                                    THEN format(' (%s later batches were already submitted)',
                                                v_later)
                                    ELSE '' END);
END
$fn$;
