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
-- Each of the three becomes a wrapper that clears the setting and calls the
-- body it had: queuer.operator_batch_action() (0002) for the retry and the
-- cancel, and for the retry of an Invalid batch 0005's function, renamed
-- queuer.operator_retry_invalid(). Like operator_batch_action(), that body
-- is callable by no one but its owner. No table is touched, a moment; the
-- three names keep their grants and comments.

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

ALTER FUNCTION queuer.batch_retry_invalid(text, text) RENAME TO operator_retry_invalid;
REVOKE ALL ON FUNCTION queuer.operator_retry_invalid(text, text) FROM queuer_operator;
COMMENT ON FUNCTION queuer.operator_retry_invalid(text, text) IS
    'The body of queuer.batch_retry_invalid(), which clears queuer.batches_counted first.';

CREATE FUNCTION queuer.batch_retry_invalid(p_batch_id text, p_reason text)
RETURNS TABLE (outcome text, service_id text, from_state text, to_state text, message text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    PERFORM set_config('queuer.batches_counted', '', true);  -- counted, whatever was set
    RETURN QUERY SELECT * FROM queuer.operator_retry_invalid(p_batch_id, p_reason);
END
$fn$;
COMMENT ON FUNCTION queuer.batch_retry_invalid(text, text) IS
    'Operator action: a batch marked Invalid by mistake (e.g. a proxy''s 400) is queued again '
    '(no status, not submitted). Needs a reason; recorded in the history as Retrying by '
    'operator:<login role>.';
REVOKE ALL ON FUNCTION queuer.batch_retry_invalid(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.batch_retry_invalid(text, text) TO queuer_operator;
