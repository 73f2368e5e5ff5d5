-- Graceful shutdown: gives every claim of this instance back at once, as
-- claims_release.sql does (the freed row says whether the service has
-- work), so another worker takes over without waiting for expiry. A claim
-- whose service has an enqueue in progress is left: the instance's lease
-- ends with the stop (instance_stop.sql), and maintenance hands it over.
-- When the stop abandoned POSTs in flight ($3), a claim whose service has a
-- batch mid-submission is left too: such a POST may still reach the ledger
-- until its request timeout, and the claim changes hands only after the
-- hard expiry, which comes later (maintenance), so no new holder
-- resubmits the batch or posts the next before it lands.
-- $1 instance, $2 our incarnation (a superseded process gives nothing back:
-- the claims are the later registration's), $3 POSTs were abandoned.
-- Returns the released services and whether each has work.
WITH r AS MATERIALIZED (
    SELECT c.ctid, c.service_id,
           g.n_in - c.n_out > 0 AND NOT queuer.head_parked(c.service_id) AS has_work
      FROM queuer.service_id_claims c
      JOIN queuer.service_ingest g ON g.service_id = c.service_id
     WHERE c.claimant = $1
       AND NOT ($3::boolean AND c.submitting)
       AND EXISTS (SELECT 1 FROM queuer.instances i
                    WHERE i.instance_id = $1 AND i.incarnation = $2::bigint)
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
 WHERE c.ctid = ANY (ARRAY(SELECT x.ctid FROM r x)) AND c.ctid = r.ctid
RETURNING c.service_id, c.has_work
