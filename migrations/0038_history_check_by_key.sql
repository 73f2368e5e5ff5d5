-- 0038: a worker's history rows are checked by key, at a cost per row.
--
-- The check that a worker's history rows name a claim it holds at its
-- epoch (queuer.history_check_writer, migration 0007) is meant to be one
-- primary-key probe of the claims per row written. The planner may turn
-- its NOT EXISTS into a hashed subplan instead: one read of the whole
-- claims table per statement, built into a hash, whatever the number of
-- rows. It does so when the statement's first call has a few dozen rows
-- and the table a few thousand claims, and keeps that plan for the
-- session: a worker's outcome statement of ten outcomes then read 1,000
-- claims to check 20 rows, and the cost grew with the number of services,
-- not with the work (bench/PERFORMANCE.md, "PostgreSQL per batch").
--
-- The subquery is now a probe of the primary key per row whatever the
-- statistics say: not a hash (OFFSET 0), and not a walk of the claimant's
-- index either, which a plan made while the claims were free (the table
-- analysed before the workers took them) picks, and which reads every
-- claim the worker holds for each row. The check costs what the statement
-- writes. What it checks is unchanged, and the schema owner (and so the
-- benchmarks' and tests' owner sessions) is still not checked.

CREATE OR REPLACE FUNCTION queuer.history_check_writer() RETURNS trigger
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
        -- (one probe of the claims' primary key per row: OFFSET 0 keeps
        -- the subquery from becoming a hash of the whole table, and IS NOT
        -- DISTINCT FROM, which means = here as a.instance_id is set, keeps
        -- the claimant indexes out, whose range is every claim the writer
        -- holds)
        OR NOT EXISTS (SELECT 1 FROM queuer.service_id_claims c
                        WHERE c.service_id = a.service_id
                          AND c.claimant IS NOT DISTINCT FROM a.instance_id
                          AND c.claim_epoch = a.claim_epoch
                       OFFSET 0)
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
