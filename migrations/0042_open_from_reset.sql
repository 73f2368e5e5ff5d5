-- 0042: a reopened batch clears its service's open_from.
--
-- Since 0041 the outcome statement that ends a turn moves the claim row's
-- open_from forward to where its look found the service's open batches
-- begin. The look reads the batches in the statement's snapshot, so a final
-- batch made open again by a transaction that commits after that snapshot
-- but before the statement locks the claim row is not in it; 0041 guarded
-- that by reading open_from in the snapshot as well and comparing it with
-- the locked row, which costs every outcome and every mark a second read of
-- the claim row (3-4 buffers each, seldom cached at 100,000 services), and
-- missed a reopening on a row whose open_from was still NULL (the trigger
-- left NULL alone, so both reads agreed).
--
-- Now the trigger sets open_from to NULL, always writing the claim row, and:
--   * an outcome statement that locks a row with a bound (not NULL) uses it
--     as it is: only the claimant's outcome statements raise the bound, one
--     at a time under the claim row's lock, and anything that lowers it
--     sets NULL; so a non-NULL bound on the locked row is the one its
--     snapshot has;
--   * one that locks a row with NULL looks from the service's first batch
--     and sets the bound only if the locked row is the version its
--     snapshot has (same xmin): the reopening, if any, was then in its
--     snapshot and in its look;
--   * the mark's check that no older batch is open starts at the locked
--     row's bound too (the newest: every batch below it is final by now,
--     so a batch its snapshot still has open below it is one that ended
--     since, not one to wait for; a reopening is seen as NULL, a look from
--     the first batch).
-- A claim row with NULL costs its next outcome one more read of the row.

CREATE OR REPLACE FUNCTION queuer.batches_reopened() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    -- (written even when already NULL: a new row version, so that an
    -- outcome statement whose snapshot predates this one sees the change)
    UPDATE queuer.service_id_claims c
       SET open_from = NULL
     WHERE c.service_id = NEW.service_id;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION queuer.batches_reopened() IS
    'A final batch became open again: its service''s open_from is cleared (NULL: no bound) '
    'until an outcome statement whose snapshot has the reopened batch sets it again.';
