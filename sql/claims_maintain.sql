-- Maintenance: takes over the claims of instances whose lease ran out,
-- decided per service from the claim row itself: past the hard expiry
-- (greatest(claim expiry_2, holder's lease_2)) always; past the soft one
-- only when no batch of the service is mid-submission (`submitting`, kept
-- by the trigger on batches in the same statement as the batch). A claim
-- whose service has work is handed straight to a live instance (this one
-- included), chosen by a hash of the service over the live instances, with
-- a fresh lease; one without work is freed. One row update per claim, so
-- a dead worker's services are served again after one step, not after a
-- step that frees them and another that claims them. Every change of
-- claimant bumps claim_epoch. At most $2 claims per call, so a cycle stays
-- short; the rest go in the next cycles.
--
-- Only live instances are read, through their lease, and only the claims
-- of the expired ones: the cost follows what expired, not the number of
-- services. The expired instance's row is locked SKIP LOCKED, so one
-- worker at a time takes over its claims; claim rows locked by a live
-- transaction (a worker stuck mid-transaction, a mark or outcome in
-- progress) are skipped, not waited for. Run at READ COMMITTED, in a
-- transaction of its own: a claim row changed after the statement's
-- snapshot is re-read at its newest version once locked and its
-- conditions checked again there, so a claim is never taken on a stale
-- `submitting` or from a new holder (run inside SERIALIZABLE, such a row
-- fails with 40001 instead). The receivers learn of their new claims by the NOTIFY the
-- caller sends (or their periodic full list of claims); until then they
-- hold them without writing anything about them.
-- $1 instance (ours, skipped), $2 at most this many, $3 lease ms and $4
-- hard-expiry ms of a handed-over claim, $5 at most this many to each
-- receiver. Returns each service with its new
-- claimant (NULL: freed) and epoch.
WITH gone AS MATERIALIZED (
    SELECT i.instance_id, i.lease_1, i.lease_2
      FROM queuer.instances i
     WHERE i.instance_id <> $1
       AND coalesce(i.lease_1, '-infinity') < now()
       AND EXISTS (SELECT 1 FROM queuer.service_id_claims h WHERE h.claimant = i.instance_id)
       FOR UPDATE OF i SKIP LOCKED
), live AS MATERIALIZED (
    -- the receivers: every instance whose lease runs, this one included
    SELECT array_agg(l.instance_id ORDER BY l.instance_id) AS ids
      FROM queuer.instances l
     WHERE l.lease_1 > now() AND l.stopped_at IS NULL
), expired AS MATERIALIZED (
    -- per expired instance, through the claimant index (never a scan of all claims)
    SELECT x.ctid, x.service_id, x.has_work, g.instance_id
      FROM gone g
     CROSS JOIN LATERAL (
           SELECT c.ctid, c.service_id, c.has_work FROM queuer.service_id_claims c
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
), plan AS MATERIALIZED (
    -- at most $5 to each receiver in one step (the first worker back after
    -- an outage, alone live, does not take everything); the rest are freed
    -- and claimed by the fair share
    SELECT p.ctid,
           CASE WHEN row_number() OVER (PARTITION BY p.who ORDER BY p.ctid) <= $5::integer
                THEN p.who END AS who
      FROM (SELECT e.ctid,
                   CASE WHEN e.has_work
                        THEN l.ids[1 + abs(hashtext(e.service_id)::bigint) % cardinality(l.ids)]
                   END AS who
              FROM expired e, live l) p
), counted AS (
    -- the claims taken no longer count in their old holder's claims_held
    -- (fair share); the receivers count them from their next lease on
    UPDATE queuer.instances i
       SET claims_held = greatest(0, i.claims_held - e.n)
      FROM (SELECT x.instance_id, count(*) AS n FROM expired x GROUP BY 1) e
     WHERE i.instance_id = e.instance_id
)
UPDATE queuer.service_id_claims c
   SET claimant = p.who,
       expiry_1 = CASE WHEN p.who IS NOT NULL THEN now() + $3::integer * interval '1 millisecond' END,
       expiry_2 = CASE WHEN p.who IS NOT NULL THEN now() + $4::integer * interval '1 millisecond' END,
       claim_epoch = c.claim_epoch + 1
  FROM plan p
 -- by the ctid just locked: no key lookup, so no predicate lock on whole
 -- primary-key pages that others' updates of neighbouring keys write into
 WHERE c.ctid = ANY (ARRAY(SELECT e.ctid FROM expired e)) AND c.ctid = p.ctid
RETURNING c.service_id, c.claimant, c.claim_epoch
