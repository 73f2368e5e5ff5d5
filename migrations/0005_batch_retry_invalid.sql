-- 0005: an audited way back for a batch marked Invalid by mistake.
--
-- Earlier builds made any HTTP 400 a final Invalid, including a
-- proxy's or a misconfigured TLS port's HTML "Bad Request" that never came
-- from the ledger; `batch retry` refuses final batches and re-enqueueing
-- the same id is a duplicate. queuer.batch_retry_invalid() puts such a
-- batch back into its service's queue: no status, not submitted, due now.
-- It is an operator decision with consequences the function states: the
-- batch goes out again although later batches of its service may already
-- be at the ledger (the ledger then sees it after them), so a reason is
-- required and the action is recorded in the history.

CREATE FUNCTION queuer.batch_retry_invalid(p_batch_id text, p_reason text)
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
COMMENT ON FUNCTION queuer.batch_retry_invalid(text, text) IS
    'Operator action: a batch marked Invalid by mistake (e.g. a proxy''s 400) is queued again '
    '(no status, not submitted). Needs a reason; recorded in the history as Retrying by '
    'operator:<login role>.';
REVOKE ALL ON FUNCTION queuer.batch_retry_invalid(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.batch_retry_invalid(text, text) TO queuer_operator;
