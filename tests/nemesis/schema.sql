-- The nemesis's observation schema, installed into the test database after
-- `queuer migrate` (never part of the product): every change of a claim's
-- holder or epoch is logged by a trigger, in the changing transaction, so
-- the log row's xmin carries that transaction's commit timestamp (the run
-- sets track_commit_timestamp = on). I5 (lib_checks.sh) compares these
-- commit timestamps with those of queuer.batch_history rows.
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS nemesis;

CREATE TABLE IF NOT EXISTS nemesis.claim_log (
    id           bigserial PRIMARY KEY,
    service_id   text NOT NULL,
    old_claimant text,                 -- NULL: free (or a new row)
    old_epoch    bigint,               -- NULL for a new row
    new_claimant text,
    new_epoch    bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    bad          boolean NOT NULL      -- the epoch went down, or the holder changed without a bump
);
CREATE INDEX IF NOT EXISTS claim_log_service_epoch ON nemesis.claim_log (service_id, new_epoch);

-- SECURITY DEFINER: the workers' role needs no rights on this schema.
CREATE OR REPLACE FUNCTION nemesis.log_claim() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO nemesis.claim_log (service_id, new_claimant, new_epoch, bad)
        VALUES (NEW.service_id, NEW.claimant, NEW.claim_epoch, false);
    ELSIF OLD.claimant IS DISTINCT FROM NEW.claimant OR OLD.claim_epoch <> NEW.claim_epoch THEN
        INSERT INTO nemesis.claim_log
               (service_id, old_claimant, old_epoch, new_claimant, new_epoch, bad)
        VALUES (NEW.service_id, OLD.claimant, OLD.claim_epoch, NEW.claimant, NEW.claim_epoch,
                NEW.claim_epoch < OLD.claim_epoch
                OR (OLD.claimant IS DISTINCT FROM NEW.claimant
                    AND NEW.claim_epoch <= OLD.claim_epoch));
    END IF;
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS nemesis_claim_log ON queuer.service_id_claims;
CREATE TRIGGER nemesis_claim_log AFTER INSERT OR UPDATE ON queuer.service_id_claims
    FOR EACH ROW EXECUTE FUNCTION nemesis.log_claim();

-- The first commit of each epoch of each service: the moment a new holder
-- (or "free") became visible. An epoch is created by exactly one change.
CREATE OR REPLACE VIEW nemesis.epoch_start AS
    SELECT service_id, new_epoch AS epoch, new_claimant AS claimant,
           min(pg_xact_commit_timestamp(xmin)) AS committed_at
      FROM nemesis.claim_log
     WHERE old_epoch IS DISTINCT FROM new_epoch
     GROUP BY service_id, new_epoch, new_claimant;

-- Rows of the audit trail written by workers, with their commit times.
CREATE OR REPLACE VIEW nemesis.worker_writes AS
    SELECT h.id, h.batch_id, h.service_id, h.to_status, h.instance_id, h.claim_epoch, h.at,
           pg_xact_commit_timestamp(h.xmin) AS committed_at
      FROM queuer.batch_history h
     WHERE h.instance_id IS NOT NULL OR h.claim_epoch IS NOT NULL;

-- I5 checks, one row each: name, violations, and what the check means.
CREATE OR REPLACE VIEW nemesis.i5 AS
    SELECT 'epochs_only_grow' AS name,
           (SELECT count(*) FROM nemesis.claim_log WHERE bad) AS violations,
           'every change of holder bumps the epoch; no epoch ever goes down' AS meaning
    UNION ALL
    SELECT 'epoch_per_holder',
           (SELECT count(*) FROM (SELECT service_id, epoch FROM nemesis.epoch_start
                                   GROUP BY 1, 2 HAVING count(*) > 1) x),
           'each epoch of a service belongs to one holder'
    UNION ALL
    SELECT 'writer_held_epoch',
           (SELECT count(*) FROM nemesis.worker_writes w
             WHERE w.instance_id IS NULL OR w.claim_epoch IS NULL
                OR NOT EXISTS (SELECT 1 FROM nemesis.claim_log l
                                WHERE l.service_id = w.service_id
                                  AND l.new_claimant = w.instance_id
                                  AND l.new_epoch = w.claim_epoch)),
           'a worker''s history row names itself and an epoch it was granted'
    UNION ALL
    SELECT 'no_stale_write',
           (SELECT count(*) FROM nemesis.worker_writes w
              JOIN nemesis.epoch_start e
                ON e.service_id = w.service_id AND e.epoch = w.claim_epoch + 1
             WHERE w.committed_at > e.committed_at + interval '1 millisecond'),
           'no write at epoch e committed after epoch e+1 of its service had begun';

-- Examples of stale writes, for the report.
CREATE OR REPLACE VIEW nemesis.stale_writes AS
    SELECT w.id, w.service_id, w.instance_id, w.claim_epoch, w.to_status, w.at AS txn_start,
           w.committed_at, e.claimant AS next_holder, e.committed_at AS next_epoch_at,
           w.committed_at - e.committed_at AS late_by
      FROM nemesis.worker_writes w
      JOIN nemesis.epoch_start e ON e.service_id = w.service_id AND e.epoch = w.claim_epoch + 1
     WHERE w.committed_at > e.committed_at + interval '1 millisecond';

-- Waits (up to p_timeout_ms) until worker p_worker holds a service with a
-- batch in flight, so a fault aimed at it lands mid-submission; returns the
-- services it holds then (comma-separated, '' when none).
CREATE OR REPLACE FUNCTION nemesis.await_in_flight(p_worker text, p_timeout_ms integer)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    deadline timestamptz := clock_timestamp() + p_timeout_ms * interval '1 millisecond';
BEGIN
    LOOP
        EXIT WHEN clock_timestamp() > deadline OR EXISTS (
            SELECT 1 FROM queuer.service_id_claims c
             WHERE c.claimant = p_worker
               AND EXISTS (SELECT 1 FROM queuer.batches b
                            WHERE b.service_id = c.service_id
                              AND ((b.submitted AND b.status IS NULL) OR b.status = 'Pending')));
        PERFORM pg_sleep(0.01);
    END LOOP;
    RETURN (SELECT coalesce(string_agg(service_id, ',' ORDER BY service_id), '')
              FROM queuer.service_id_claims WHERE claimant = p_worker);
END
$fn$;

-- Waits (up to p_timeout_ms) until a session with application_name p_app
-- is busy (running a statement or inside a transaction) and returns its
-- backend pid; after the timeout, the p_pick-th of its sessions; NULL when
-- it has none.
CREATE OR REPLACE FUNCTION nemesis.await_busy_backend(p_app text, p_pick bigint, p_timeout_ms integer)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    deadline timestamptz := clock_timestamp() + p_timeout_ms * interval '1 millisecond';
    found    integer;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        SELECT pid INTO found FROM pg_stat_activity
         WHERE application_name = p_app AND pid <> pg_backend_pid()
           AND state IN ('active', 'idle in transaction')
         ORDER BY pid OFFSET 0 LIMIT 1;
        IF found IS NOT NULL THEN
            RETURN found;
        END IF;
        EXIT WHEN clock_timestamp() > deadline;
        PERFORM pg_sleep(0.005);
    END LOOP;
    PERFORM pg_stat_clear_snapshot();
    SELECT pid INTO found FROM pg_stat_activity
     WHERE application_name = p_app AND pid <> pg_backend_pid()
     ORDER BY pid OFFSET p_pick % greatest(1, (SELECT count(*) FROM pg_stat_activity
                                                WHERE application_name = p_app
                                                  AND pid <> pg_backend_pid())) LIMIT 1;
    RETURN found;
END
$fn$;
