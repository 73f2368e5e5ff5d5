-- 0041: where a service's open batches begin.
--
-- A worker looks for a service's oldest open batch in batches_open (the
-- service's open batches by created_at) when it fetches the service, when
-- it marks a batch (none older may be open) and when a batch's turn ends
-- and the next one goes out in the same statement. Every transition of a
-- batch writes a new row version and, while the batch is open, a new entry
-- in that index; the entries of the versions that ended stay until vacuum
-- removes them. With a snapshot held open anywhere in the cluster (an
-- application's long transaction, a backup, a replica's feedback) vacuum
-- removes none, and each look at the service's oldest batch walked the
-- entries of every batch the service finished since that snapshot began:
-- 376 buffers a look after two minutes at W1's rate, and the longer the
-- snapshot, the slower every batch.
--
-- queuer.service_id_claims.open_from is a lower bound kept on the claim
-- row: no open batch of the service has an earlier created_at. The looks
-- start there, so they read the entries of the batch in flight and of the
-- next one, however much the service finished before.
--   * A worker's outcome statement moves it forward when a batch's turn
--     ends: to the created_at of the next open batch it found (or of the
--     batch that ended, when none is left). The claim row is already
--     written by that statement (its counters), so the bound costs no row
--     version of its own. It moves only if no one lowered it since the
--     statement's snapshot was taken (it compares the value it read with
--     the value on the row it locked).
--   * Enqueue cannot add a batch below it: a service's created_at values
--     increase in enqueue order (queuer.service_ingest, under the service's
--     lock).
--   * A final batch made open again (queuer.batch_retry_invalid(), or an
--     owner's hand-written UPDATE) lowers it in the same transaction: the
--     trigger below, which fires only for such an update.
-- NULL means no bound: the looks start at the service's first batch, as
-- before. Existing claim rows start with NULL, a moment's ALTER; the
-- first batch each service finishes sets it.

ALTER TABLE queuer.service_id_claims ADD COLUMN open_from timestamptz;
COMMENT ON COLUMN queuer.service_id_claims.open_from IS
    'No open batch of the service has an earlier created_at (NULL: no bound); where the '
    'workers start looking for its oldest open batch';

CREATE FUNCTION queuer.batches_reopened() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    UPDATE queuer.service_id_claims c
       SET open_from = NEW.created_at
     WHERE c.service_id = NEW.service_id
       AND c.open_from > NEW.created_at;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION queuer.batches_reopened() IS
    'A final batch became open again: its service''s open_from moves back to its created_at.';
REVOKE ALL ON FUNCTION queuer.batches_reopened() FROM PUBLIC;

-- (the condition is evaluated before any function call: the workers'
-- updates, which never reopen a final batch, pay for the comparison only)
CREATE TRIGGER batches_reopened AFTER UPDATE OF status ON queuer.batches
    FOR EACH ROW
    WHEN (OLD.status IN ('Committed', 'Valid', 'Invalid')
          AND (NEW.status IS NULL OR NEW.status IN ('Pending', 'Unknown', 'Delayed')))
    EXECUTE FUNCTION queuer.batches_reopened();
