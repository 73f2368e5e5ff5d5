-- Gives back up to $2 of this instance's claims whose service has no work
-- (n_in - n_out = 0: nothing non-final but parked batches) or whose head
-- batch is parked (Delayed with retry_at = infinity: it waits for an
-- operator, and every later batch of the service waits behind it, so the
-- batches counted as work cannot move), no batch mid-submission and no
-- enqueue in progress (its ingest row is locked; both rows are locked SKIP
-- LOCKED, so the count read is exact). Claims are kept
-- when their work runs out; this runs only when this instance holds its
-- share (or its worker.max_claims) and free services with work wait, so
-- that room is made for them (pickup then gives them out). Runs at READ
-- COMMITTED, as claims_release.sql: a row changed after the statement's
-- snapshot is re-read at its newest version once locked and checked again
-- (queuer.head_parked included: it reads with a snapshot of its own). A service given back with a parked head is free without
-- work (has_work false): pickup leaves it alone until an operator retries
-- its head or it gets a new batch. Reads our claims through the claimant
-- index; a head is probed (queuer.head_parked, through batches_open) only
-- for a service with a parked batch, read once from batches_parked (a
-- parked head is a parked batch; the probe re-checks at the row's newest
-- version). $1
-- instance, $2 how many. Returns the released services and whether each
-- has work (never).
WITH idle AS MATERIALIZED (
    SELECT c.ctid
      FROM queuer.service_id_claims c
      JOIN queuer.service_ingest g ON g.service_id = c.service_id
     WHERE c.claimant = $1 AND NOT c.submitting
       AND (g.n_in - c.n_out = 0
            OR (c.service_id IN (SELECT p.service_id FROM queuer.batches p
                                  WHERE p.status = 'Delayed' AND p.retry_at = 'infinity')
                AND queuer.head_parked(c.service_id)))
     LIMIT $2::integer
       FOR UPDATE OF c SKIP LOCKED
       FOR SHARE OF g SKIP LOCKED
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1,
       has_work = false, head_priority = 0
 -- by the ctid just locked (see claims_acquire.sql)
 WHERE c.ctid = ANY (ARRAY(SELECT i.ctid FROM idle i))
   AND c.claimant IS NOT DISTINCT FROM $1
RETURNING c.service_id, c.has_work
