-- 0032: the workers' own batch updates keep the claim row's counters.
--
-- The counters trigger on batches (0008, 0029, 0031) fired for every
-- statement that updates batches. A lone batch takes two worker
-- statements that do: its mark for submission (sql/batches_mark.sql) and
-- its outcome (sql/outcomes_record.sql). For each, the trigger was a
-- PL/pgSQL call over the transition tables and an UPDATE of its own.
-- Those two statements now update the claim row themselves, in the same
-- statement, where what changes is known without the old rows: a marked
-- batch stays work and its service has a batch mid-submission; an
-- outcome's batch was its service's one batch in flight, and so work, and
-- is counted out when it no longer is. They set queuer.batches_counted to
-- 'on' for the rest of their transaction (a mark is its transaction's last
-- statement; outcome writes share one only with other outcome writes), and
-- the update trigger does not fire while it is 'on'. At 200 lone batches a
-- second the outcome write went from 0.39-0.45 to 0.37-0.39 ms per call
-- and the mark from 0.30-0.33 to 0.25-0.26 (pg_stat_statements); with
-- groups of ~70 outcomes (100,000 services, 8 workers) both cost what
-- they did.
--
-- Each statement sets the setting in the CTE that unnests its input, so it
-- is on before any batch is updated (the trigger's WHEN is read when the
-- update ends; with no input row nothing is updated, and nothing counted
-- either way). The test there is IS NOT NULL, always true and estimated
-- so: as "= 'on'" the planner took it as selective, expected one input row
-- and joined a group of outcomes to the locked claims row by row.
--
-- Every other update of batches (an operator's retry, cancel or resolve, a
-- repair by hand) still fires it. A session that sets the setting itself
-- leaves the counters of the batches its transaction updates to itself,
-- through the operator functions too (docs/OPERATIONS.md says not to).
CREATE OR REPLACE TRIGGER batches_claims_update AFTER UPDATE ON queuer.batches
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT
    WHEN (current_setting('queuer.batches_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION queuer.claims_follow_batches();
