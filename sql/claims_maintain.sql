-- Maintenance: hands the claims of instances whose lease ran out to live
-- instances, decided per service from the claim row itself: past the hard
-- expiry (greatest(claim expiry_2, holder's lease_2)) always; past the
-- soft one only when no batch of the service is mid-submission
-- (`submitting`, kept by the trigger on batches in the same statement as
-- the batch). Each claim goes to a live instance (this one included)
-- chosen by a hash of the service over the live instances, with a fresh
-- lease and claim_epoch + 1: one row update per claim, with or without
-- work (claims are kept when their work runs out). At most $2 claims per
-- call, and $5 to each receiver: the rest wait for the next call.
--
-- Only live instances are read, through their lease, and only the claims
-- of the expired ones: the cost follows what expired, not the number of
-- services. The expired instance's row is locked SKIP LOCKED, so one
-- worker at a time takes over its claims; claim rows locked by a live
-- transaction (a mark or outcome in progress) are skipped, not waited
-- for, and so are services with an enqueue in progress (their ingest row
-- is locked: that enqueue wakes the holder it saw, so the claim changes
-- hands only after it commits). Run at READ COMMITTED, in a transaction
-- of its own: a claim row changed after the statement's snapshot is
-- re-read at its newest version once locked and its conditions checked
-- again there, so a claim is never taken on a stale `submitting` or from
-- a new holder. The receivers other than this instance are woken on their
-- own channels with the services and epochs they got.
-- $1 instance (ours, skipped), $2 at most this many, $3 lease ms and $4
-- hard-expiry ms of a handed-over claim, $5 at most this many to each
-- receiver. Returns each service handed over with its new claimant and
-- epoch.
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
    SELECT x.ctid, x.service_id, g.instance_id
      FROM gone g
     CROSS JOIN LATERAL (
           SELECT c.ctid, c.service_id FROM queuer.service_id_claims c
             JOIN queuer.service_ingest s ON s.service_id = c.service_id
            -- (claimant = g.instance_id, written as a range with an order
            -- only the claimant index gives without a sort: no plan, however
            -- its statistics look, scans the whole table for it)
            WHERE c.claimant >= g.instance_id AND c.claimant <= g.instance_id
              AND c.expiry_1 < now()
              AND (greatest(c.expiry_2, g.lease_2) < now() OR NOT c.submitting)
            ORDER BY c.claimant
            LIMIT $2::integer
              FOR UPDATE OF c SKIP LOCKED
              FOR SHARE OF s SKIP LOCKED) x
     LIMIT $2::integer
), plan AS MATERIALIZED (
    SELECT p.ctid, p.who, p.instance_id
      FROM (SELECT e.ctid, e.instance_id,
                   l.ids[1 + abs(hashtext(e.service_id)::bigint) % cardinality(l.ids)] AS who,
                   row_number() OVER (PARTITION BY
                       l.ids[1 + abs(hashtext(e.service_id)::bigint) % cardinality(l.ids)]
                       ORDER BY e.ctid) AS nth
              FROM expired e, live l
             WHERE l.ids IS NOT NULL) p
     WHERE p.nth <= $5::integer
), counted AS (
    -- the claims taken no longer count in their old holder's claims_held
    -- (fair share); the receivers count them from their next lease on
    UPDATE queuer.instances i
       SET claims_held = greatest(0, i.claims_held - e.n)
      FROM (SELECT p.instance_id, count(*) AS n FROM plan p GROUP BY 1) e
     WHERE i.instance_id = e.instance_id
), upd AS (
    UPDATE queuer.service_id_claims c
       SET claimant = p.who,
           expiry_1 = now() + $3::integer * interval '1 millisecond',
           expiry_2 = now() + $4::integer * interval '1 millisecond',
           claim_epoch = c.claim_epoch + 1
      FROM plan p
     -- by the ctid just locked: no key lookup, so no predicate lock on whole
     -- primary-key pages that others' updates of neighbouring keys write into
     WHERE c.ctid = ANY (ARRAY(SELECT x.ctid FROM plan x)) AND c.ctid = p.ctid
    RETURNING c.service_id, c.claimant, c.claim_epoch
), woke AS (
    SELECT pg_notify('queuer_i' || i.incarnation,
                     CASE WHEN count(*) <= 8
                          THEN string_agg(u.service_id || ':' || u.claim_epoch, ' ')
                          ELSE '*' END) AS sent
      FROM upd u JOIN queuer.instances i ON i.instance_id = u.claimant
     WHERE u.claimant <> $1
     GROUP BY i.incarnation
)
SELECT u.service_id, u.claimant, u.claim_epoch
  FROM upd u CROSS JOIN (SELECT count(w.sent) AS n FROM woke w) w
