-- Maintenance: frees the claims of instances whose lease ran out, decided
-- per service from the claim row itself: past the hard expiry
-- (greatest(claim expiry_2, holder's lease_2)) always; past the soft one
-- only when no batch of the service is mid-submission (`submitting`, kept
-- by the trigger on batches in the same statement as the batch). Every
-- change of claimant bumps claim_epoch. At most $2 claims per call, so a
-- cycle stays short; the rest go in the next cycles.
--
-- Only live instances are read, through their lease, and only the claims
-- of the expired ones: the cost follows what expired, not the number of
-- services. The expired instance's row is locked SKIP LOCKED, so one
-- worker at a time frees its claims (others' transactions never read
-- them); claim rows locked by a live transaction (a worker stuck
-- mid-transaction, a mark or outcome in progress) are skipped, not
-- waited for. A claim row changed after this transaction's snapshot
-- cannot be locked here (SERIALIZABLE: 40001, the transaction is re-run
-- on a fresh snapshot), so a claim is never freed on a stale
-- `submitting`. $1 instance (ours, skipped). Returns the freed services.
WITH gone AS MATERIALIZED (
    SELECT i.instance_id, i.lease_1, i.lease_2
      FROM queuer.instances i
     WHERE i.instance_id <> $1
       AND coalesce(i.lease_1, '-infinity') < now()
       AND EXISTS (SELECT 1 FROM queuer.service_id_claims h WHERE h.claimant = i.instance_id)
       FOR UPDATE OF i SKIP LOCKED
), expired AS MATERIALIZED (
    -- per expired instance, through the claimant index (never a scan of all claims)
    SELECT x.ctid, g.instance_id
      FROM gone g
     CROSS JOIN LATERAL (
           SELECT c.ctid FROM queuer.service_id_claims c
            -- (claimant = g.instance_id, written as a range with an order
            -- only the claimant index gives without a sort: no plan, however
            -- its statistics look, scans the whole table for it)
            WHERE c.claimant >= g.instance_id AND c.claimant <= g.instance_id
              AND c.expiry_1 < now()
              AND (greatest(c.expiry_2, g.lease_2) < now() OR NOT c.submitting)
            ORDER BY c.claimant
            LIMIT $2::integer
              FOR UPDATE OF c SKIP LOCKED) x
     LIMIT $2::integer
), counted AS (
    -- the freed claims no longer count in their holder's claims_held (fair share)
    UPDATE queuer.instances i
       SET claims_held = greatest(0, i.claims_held - e.n)
      FROM (SELECT x.instance_id, count(*) AS n FROM expired x GROUP BY 1) e
     WHERE i.instance_id = e.instance_id
)
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 -- by the ctid just locked: no key lookup, so no predicate lock on whole
 -- primary-key pages that others' updates of neighbouring keys write into
 WHERE c.ctid = ANY (ARRAY(SELECT e.ctid FROM expired e))
RETURNING c.service_id
