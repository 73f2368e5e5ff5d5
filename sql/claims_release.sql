-- Gives back the listed claims of this instance (surplus over the fair
-- share, chosen by the worker among services with no job out), except
-- those with a batch mid-submission and those with an enqueue in progress
-- (their ingest row is locked: given back now, the service would wait for
-- its batch until a full fetch, as that enqueue wakes the holder it saw).
-- The freed row says exactly whether the service has work (n_in - n_out,
-- both rows locked, and a head that is not parked) and, when it has, the
-- priority of its head: free services with work are picked up
-- (claims_acquire.sql), those without are given to a live instance by the
-- next enqueue. Runs at READ COMMITTED, in a transaction of its own: a
-- claim row changed after the statement's snapshot is re-read at its
-- newest version once locked and its conditions checked again, which is
-- all giving back our own claims needs. $1 instance, $2 service ids
-- (text[]). Returns the released services and whether each has work.
WITH r AS MATERIALIZED (
    SELECT c.ctid, c.service_id,
           g.n_in - c.n_out > 0 AND NOT queuer.head_parked(c.service_id) AS has_work
      FROM queuer.service_id_claims c
      JOIN queuer.service_ingest g ON g.service_id = c.service_id
     WHERE c.service_id = ANY ($2::text[])
       -- not indexable on purpose (means = here): the primary key drives the scan
       AND c.claimant IS NOT DISTINCT FROM $1
       AND NOT c.submitting
       FOR UPDATE OF c SKIP LOCKED
       FOR SHARE OF g SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1,
       has_work = r.has_work,
       head_priority = CASE WHEN r.has_work
                            THEN coalesce((SELECT b.priority FROM queuer.batches b
                                            WHERE b.service_id = r.service_id
                                              AND (b.status IS NULL
                                                   OR b.status IN ('Pending', 'Unknown', 'Delayed'))
                                              AND queuer.batch_is_work(b.status, b.retry_at)
                                              -- the head, in two index probes
                                              -- (see batches_fetch.sql)
                                              AND b.created_at =
                                                  (SELECT h.created_at FROM queuer.batches h
                                                    WHERE h.service_id = r.service_id
                                                      AND (h.status IS NULL
                                                           OR h.status IN ('Pending', 'Unknown',
                                                                           'Delayed'))
                                                      AND queuer.batch_is_work(h.status, h.retry_at)
                                                    ORDER BY h.created_at
                                                    LIMIT 1)
                                            ORDER BY b.batch_id
                                            LIMIT 1), 0)
                            ELSE 0 END
  FROM r
 -- by the ctid just locked (see claims_acquire.sql)
 WHERE c.ctid = ANY (ARRAY(SELECT x.ctid FROM r x)) AND c.ctid = r.ctid
RETURNING c.service_id, c.has_work
