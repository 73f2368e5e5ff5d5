-- 0043: a service's batch in flight is named on its claim row.
--
-- At most one batch of a service is in flight (submitted without a status,
-- or Pending). The exclusion constraint batches_one_in_flight kept that
-- rule on the batches themselves: every batch that went into flight added
-- an entry to its partial index and looked the service up there, and so
-- did its move to Pending. The look read every entry the service had left
-- in that index, and with a snapshot held open anywhere in the cluster
-- vacuum removes none of them: after two minutes of a held snapshot, two
-- thirds of an outcome statement's time went to that check
-- (bench/PERFORMANCE.md, "A transaction held open").
--
-- queuer.service_id_claims.in_flight names the service's batch in flight
-- (NULL: none). The rule is kept on that one row, which every writer that
-- puts a batch in flight locks:
--   * The workers' mark (sql/batches_mark.sql) locks the claim row
--     already (its fence). It marks a batch only if the locked row names
--     none, the newest committed value whatever the statement's snapshot
--     shows, and names the batch it marked in the same update that sets
--     `submitting`.
--   * The workers' outcome statement (sql/outcomes_record.sql) locks the
--     claim row too. It keeps the name while the batch stays in flight
--     (Pending), clears it when the batch leaves (final, Delayed, Unknown,
--     given back) and names the next batch when it marks one in the same
--     statement, only if the row named no batch or the one whose turn
--     ended. The claim row's counters are written by that statement
--     already, so the name costs no row version of its own.
--   * Every other write of queuer.batches that moves a batch into or out of
--     flight (an operator's action, a repair by hand, an insert of a batch
--     in flight) is followed by the trigger below: it locks the claim row
--     and refuses a second batch in flight with the error the constraint
--     gave (SQLSTATE 23P01). The workers' own statements set
--     queuer.batches_counted (migration 0032), which its condition skips.
-- The fetch reads the batch in flight by its name: a primary-key lookup,
-- and none when the service has no batch in flight.
--
-- The constraint and its partial index go: each batch writes two index
-- entries fewer, and no check reads the service's old entries. The column
-- is filled from the batches in flight, under a lock that keeps every
-- other writer of queuer.batches out until the migration commits (the
-- constraint's drop then locks the table against reads too).

LOCK TABLE queuer.batches IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE queuer.service_id_claims ADD COLUMN in_flight text COLLATE "C";
COMMENT ON COLUMN queuer.service_id_claims.in_flight IS
    'The service''s batch in flight (submitted without a status, or Pending); NULL: none. '
    'At most one: a batch goes in flight only while this names no other';

INSERT INTO queuer.service_id_claims (service_id)
SELECT DISTINCT b.service_id FROM queuer.batches b
 WHERE (b.submitted AND b.status IS NULL) OR b.status = 'Pending'
ON CONFLICT DO NOTHING;
UPDATE queuer.service_id_claims c
   SET in_flight = b.batch_id
  FROM queuer.batches b
 WHERE b.service_id = c.service_id
   AND ((b.submitted AND b.status IS NULL) OR b.status = 'Pending');

ALTER TABLE queuer.batches DROP CONSTRAINT batches_one_in_flight;

-- Follows a write of one batch that moves it into or out of flight, by a
-- writer other than the workers' mark and outcome statements: the claim
-- row of a batch that left flight stops naming it; the claim row of a
-- batch that went in flight (created if missing) names it, unless it
-- names another batch of the service that is still in flight, which is
-- refused. The claim row is locked first, and only then is the named
-- batch read, in a snapshot taken after the lock: a worker that put a
-- batch in flight and committed while this waited is seen. (The row
-- triggers fire once the statement's writes are all done: a statement that
-- ends one batch's turn and starts the next one's is allowed, in either
-- order of its rows.)
CREATE FUNCTION queuer.batches_in_flight_follow() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    named text;  -- the batch the claim row names, read under its lock
BEGIN
    IF TG_OP <> 'INSERT' AND coalesce(OLD.status = 'Pending', OLD.submitted) THEN
        UPDATE queuer.service_id_claims c
           SET in_flight = NULL
         WHERE c.service_id = OLD.service_id
           AND c.in_flight = OLD.batch_id;
    END IF;
    IF TG_OP <> 'DELETE' AND coalesce(NEW.status = 'Pending', NEW.submitted) THEN
        INSERT INTO queuer.service_id_claims (service_id) VALUES (NEW.service_id)
        ON CONFLICT DO NOTHING;
        SELECT c.in_flight INTO named
          FROM queuer.service_id_claims c
         WHERE c.service_id = NEW.service_id
           FOR NO KEY UPDATE;
        IF named IS NOT NULL AND named <> NEW.batch_id
           AND EXISTS (SELECT 1 FROM queuer.batches b
                        WHERE b.batch_id = named
                          AND b.service_id = NEW.service_id
                          AND coalesce(b.status = 'Pending', b.submitted)) THEN
            RAISE EXCEPTION 'service %: batch % cannot go in flight: batch % is in flight',
                            NEW.service_id, NEW.batch_id, named
                  USING ERRCODE = 'exclusion_violation',
                        HINT = 'At most one batch of a service is in flight (submitted without '
                               'a status, or Pending); wait for its outcome or resolve it first.';
        END IF;
        UPDATE queuer.service_id_claims c
           SET in_flight = NEW.batch_id
         WHERE c.service_id = NEW.service_id
           AND c.in_flight IS DISTINCT FROM NEW.batch_id;
    END IF;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION queuer.batches_in_flight_follow() IS
    'Keeps queuer.service_id_claims.in_flight for writes other than the workers'' own, and '
    'refuses a second batch of a service in flight.';
REVOKE ALL ON FUNCTION queuer.batches_in_flight_follow() FROM PUBLIC;

-- (each condition is evaluated before any function call; a load's rows
-- and the prune's deletes are not in flight and call nothing. In flight,
-- written so that it is never NULL: coalesce(status = 'Pending', submitted).)
CREATE TRIGGER batches_in_flight_insert AFTER INSERT ON queuer.batches
    FOR EACH ROW
    WHEN (coalesce(NEW.status = 'Pending', NEW.submitted))
    EXECUTE FUNCTION queuer.batches_in_flight_follow();
CREATE TRIGGER batches_in_flight_update AFTER UPDATE ON queuer.batches
    FOR EACH ROW
    WHEN ((coalesce(OLD.status = 'Pending', OLD.submitted)
               <> coalesce(NEW.status = 'Pending', NEW.submitted)
           OR (coalesce(NEW.status = 'Pending', NEW.submitted)
               AND (OLD.batch_id <> NEW.batch_id OR OLD.service_id <> NEW.service_id)))
          AND current_setting('queuer.batches_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION queuer.batches_in_flight_follow();
CREATE TRIGGER batches_in_flight_delete AFTER DELETE ON queuer.batches
    FOR EACH ROW
    WHEN (coalesce(OLD.status = 'Pending', OLD.submitted))
    EXECUTE FUNCTION queuer.batches_in_flight_follow();
