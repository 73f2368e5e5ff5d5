-- 0007: what the worker and enqueuer roles may write, beyond table grants.
--
-- queuer_worker needs INSERT on the history and UPDATE on the claims, and
-- queuer_enqueuer needs the enqueue functions; grants alone let them do
-- more than that. Here:
--   * a worker's history rows must be worker transitions written at the
--     service's current claim (its claimant and epoch) and now(): no forged
--     operator rows (Cancelled, Retrying, Enqueued, instance operator:...),
--     no rows for a claim it does not hold, no back-dated rows;
--   * claim_epoch moves only one step up, and every change of claimant
--     moves it (as every claims statement does), so epochs stay a fence;
--   * workers no longer INSERT claims rows (enqueue creates them);
--   * an enqueuer's session may not set queuer.ingest_high / ingest_low
--     (that switched back pressure off); the marks are queuer.settings,
--     which only the owner may change;
--   * a conflicting enqueue no longer names the service that holds the
--     batch id.
-- The schema owner (and its members, superusers included) is not checked:
-- the SECURITY DEFINER functions run as the owner, and so do migrations,
-- repairs and the test suites' fixtures.
--
-- Hot path: the history check is one statement-level trigger (transition
-- table; one primary-key probe of the claims per row, the claim row the
-- writing statement has just locked), so a grouped outcome write pays once
-- per statement. The claims trigger fires only when claimant or
-- claim_epoch change (claims and releases, not renewals), and names no
-- other column, so columns added to service_id_claims later need nothing.

-- True when the current role is the schema owner or a member of it.
CREATE FUNCTION queuer.role_is_owner() RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT pg_has_role(current_user, n.nspowner, 'MEMBER')
      FROM pg_catalog.pg_namespace n WHERE n.nspname = 'queuer'
$fn$;

-- Refuses a statement whose history rows are not a worker's own
-- transitions (see the top of this file). The transitions workers write:
-- Submitting (marks), a ledger status, Requeued (handed back).
CREATE FUNCTION queuer.history_check_writer() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    bad record;
BEGIN
    IF queuer.role_is_owner() THEN
        RETURN NULL;
    END IF;
    SELECT a.batch_id, a.service_id, a.to_status, a.instance_id, a.claim_epoch
      INTO bad
      FROM added a
     WHERE a.to_status IS NULL
        OR a.to_status NOT IN ('Submitting', 'Requeued', 'Pending', 'Valid', 'Committed',
                               'Invalid', 'Unknown', 'Delayed')
        OR a.instance_id IS NULL OR a.instance_id LIKE 'operator:%'
        OR a.at IS DISTINCT FROM now()
        OR NOT EXISTS (SELECT 1 FROM queuer.service_id_claims c
                        WHERE c.service_id = a.service_id
                          AND c.claimant = a.instance_id
                          AND c.claim_epoch = a.claim_epoch)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'role % may not write this history row: % of batch % by % at epoch %',
                        current_user, bad.to_status, left(bad.batch_id, 16) || '...',
                        coalesce(bad.instance_id, '(none)'), coalesce(bad.claim_epoch::text, '(none)')
            USING ERRCODE = '42501',
                  HINT = 'workers append only their own transitions (Submitting, a ledger '
                         'status, Requeued) at the claim they hold, at now()';
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER batch_history_check_writer AFTER INSERT ON queuer.batch_history
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION queuer.history_check_writer();

-- claim_epoch only moves one step up, and every change of claimant moves it.
CREATE FUNCTION queuer.claims_check_epoch() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    IF NEW.claim_epoch IS DISTINCT FROM OLD.claim_epoch + 1 AND NOT queuer.role_is_owner() THEN
        RAISE EXCEPTION 'role % may not move claim_epoch of % from % to %',
                        current_user, OLD.service_id, OLD.claim_epoch,
                        coalesce(NEW.claim_epoch::text, 'NULL')
            USING ERRCODE = '42501',
                  HINT = 'claim_epoch goes up by exactly one with every change of claimant';
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER service_id_claims_check_epoch BEFORE UPDATE ON queuer.service_id_claims
    FOR EACH ROW
    WHEN (OLD.claim_epoch IS DISTINCT FROM NEW.claim_epoch
          OR OLD.claimant IS DISTINCT FROM NEW.claimant)
    EXECUTE FUNCTION queuer.claims_check_epoch();

REVOKE INSERT ON queuer.service_id_claims FROM queuer_worker;

-- Enqueue: the implementation from 0001 stays as it is under another name,
-- callable by the owner only; queuer.enqueue_rows becomes a wrapper that
-- (1) refuses session marks from roles other than the owner, (2) reports a
-- batch id stored under another service without naming that service, and
-- (3) raises for p_skip = false as before (the implementation runs with
-- p_skip = true; the raise undoes everything it stored). enqueue_batch
-- calls enqueue_rows by name, so it gets the same behaviour.
ALTER FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean)
    RENAME TO enqueue_rows_unchecked;
REVOKE ALL ON FUNCTION queuer.enqueue_rows_unchecked(queuer.enqueue_row[], boolean)
    FROM PUBLIC, queuer_worker, queuer_enqueuer;

CREATE FUNCTION queuer.enqueue_rows(p_rows queuer.enqueue_row[], p_skip boolean)
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
    SELECT array_agg(CASE WHEN o.outcome = 'conflict'
                               AND o.detail LIKE 'batch_id is already enqueued%'
                          THEN ROW(o.line_no, o.batch_id, o.outcome,
                                   'batch_id is already enqueued with a different service or '
                                   'payload')::queuer.enqueue_outcome
                          ELSE o END)
      INTO outcomes
      FROM queuer.enqueue_rows_unchecked(p_rows, true) o;
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
COMMENT ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean) IS
    'Enqueues rows in array order; returns one row per row not stored (see '
    'queuer.enqueue_rows_unchecked in migration 0001). Session marks queuer.ingest_high/low '
    'are honoured for the schema owner only.';
REVOKE ALL ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queuer.enqueue_rows(queuer.enqueue_row[], boolean)
    TO queuer_worker, queuer_enqueuer;
REVOKE ALL ON FUNCTION queuer.role_is_owner(), queuer.history_check_writer(),
                       queuer.claims_check_epoch() FROM PUBLIC;
-- The triggers call it as the writing role.
GRANT EXECUTE ON FUNCTION queuer.role_is_owner() TO queuer_worker;
COMMENT ON TABLE queuer.settings IS
    'Database-wide ingest limits; ingest_high = 0 disables back pressure. Only the owner '
    'changes them; the owner''s sessions may override high/low with SET queuer.ingest_high / '
    'queuer.ingest_low (other roles get SQLSTATE 42501).';
