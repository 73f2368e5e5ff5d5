-- 0044: claim rows that stay cheap to find while a snapshot is held open.
--
-- A worker writes its service's claim row about once a batch (the mark,
-- the outcome statement). While some transaction holds an old snapshot
-- open, no version written after it began can be removed, so every
-- version stays; a version that finds no room on its page goes to another
-- page and gets an entry in every index of the table, and each later
-- lookup of the service (the workers' fences, their counter updates, the
-- claims transaction, an enqueue making sure the row exists) reads every
-- one of those entries and their pages. Room on the page keeps a new
-- version on its row's page, reached through the entry the row already
-- has: at 70 % nearly every version moved; at 10 % a row's page takes
-- several of its versions before one moves. The table is larger for it
-- (a page takes three or four rows when they are written: 260 MB at
-- 100,000 services with a batch in flight each, 36 MB at 70 %), and the
-- workers read it by key. The setting applies to pages written from now
-- on; rows on older pages move to new pages as they are updated.
ALTER TABLE queuer.service_id_claims SET (fillfactor = 10);

-- Follows the deletes on queuer.batches (statement trigger; the prune, a
-- repair by hand): n_out and `submitting` on the claim rows of the deleted
-- batches that were work or mid-submission. Services with neither are
-- left out before the claim rows are looked up, so a prune of final
-- batches, all of them neither, reads no claim row (before, it looked up
-- the claim row of every service it pruned and changed none).
CREATE OR REPLACE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    UPDATE queuer.service_id_claims c
       SET n_out = c.n_out + s.d_open,
           submitting = c.submitting AND NOT s.mid_before
      FROM (SELECT o.service_id,
                   count(*) FILTER (WHERE queuer.batch_is_work(o.status, o.retry_at)) AS d_open,
                   bool_or(o.submitted AND o.status IS NULL) AS mid_before
              FROM old_rows o GROUP BY o.service_id) s
     WHERE (s.d_open <> 0 OR s.mid_before) -- (on s alone: applied before the join)
       AND c.service_id = s.service_id
       AND (s.d_open <> 0 OR (c.submitting AND s.mid_before));
    RETURN NULL;
END
$fn$;
