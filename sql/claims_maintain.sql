-- Maintenance: hands the claims of instances whose lease ran out to live
-- instances, decided per service from the claim row itself: past the hard
-- expiry (greatest(claim expiry_2, holder's lease_2)) always; past the
-- soft one only when no batch of the service is mid-submission
-- (`submitting`, kept by the trigger on batches in the same statement as
-- the batch). Each claim goes to a live instance chosen by a hash of the
-- service over the live instances, with a fresh lease and claim_epoch + 1:
-- one row update per claim, with or without work (claims are kept when
-- their work runs out).
--
-- Every live instance runs this when a lease it saw runs out, and takes
-- the claims that hash to itself: the survivors of a dead worker share the
-- handover, each its own part, in parallel and without waking anyone. A
-- claim whose receiver has not taken it $6 ms after it became free to take
-- is handed over by whoever runs this next (the receiver is woken on its
-- own channel with the services and epochs it got): a live instance that
-- does not run maintenance delays its part by no more than that. At most
-- $2 claims per call, and $5 to each receiver: the rest wait for the next
-- call.
--
-- Only live instances are read, through their lease, and only the claims
-- of the expired ones: the cost follows what expired, not the number of
-- services. The expired instance's row is locked FOR SHARE: the takers of
-- its claims run together, and its lease renewal waits for them (a
-- renewal in progress makes them skip it, SKIP LOCKED). Claim rows locked
-- by a live transaction (a mark or outcome in progress, or another taker)
-- are skipped, not waited for, and so are services with an enqueue in
-- progress (their ingest row is locked: that enqueue wakes the holder it
-- saw, so the claim changes hands only after it commits). Run at READ
-- COMMITTED, in a transaction of its own: a claim row changed after the
-- statement's snapshot is re-read at its newest version once locked and
-- its conditions checked again there, so a claim is never taken on a
-- stale `submitting` or from a new holder. The expired holder's
-- `claims_held` is left as it is: only live instances' counts are read
-- (the enqueue trigger's even share), and the renewal that makes it live
-- again writes its own count.
-- $1 instance (ours), $2 at most this many, $3 lease ms and $4
-- hard-expiry ms of a handed-over claim, $5 at most this many to each
-- receiver, $6 ms after which anyone hands over a claim its receiver has
-- not taken (0: at once). Returns each service handed over with its new
-- claimant and epoch.
WITH live AS MATERIALIZED (
    -- the receivers: every instance whose lease runs, this one included
    SELECT array_agg(l.instance_id ORDER BY l.instance_id) AS ids
      FROM queuer.instances l
     WHERE l.lease_1 > now() AND l.stopped_at IS NULL
), gone AS MATERIALIZED (
    SELECT i.instance_id, i.lease_1, i.lease_2
      FROM queuer.instances i
     WHERE i.instance_id <> $1
       AND coalesce(i.lease_1, '-infinity') < now()
       AND EXISTS (SELECT 1 FROM queuer.service_id_claims h WHERE h.claimant = i.instance_id)
       FOR SHARE OF i SKIP LOCKED
), expired AS MATERIALIZED (
    -- per expired instance, through the claimant index (never a scan of all claims)
    SELECT x.ctid, x.service_id, x.who
      FROM gone g
     CROSS JOIN live l
     CROSS JOIN LATERAL (
           SELECT c.ctid, c.service_id,
                  l.ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(l.ids)] AS who
             FROM queuer.service_id_claims c
             JOIN queuer.service_ingest s ON s.service_id = c.service_id
            -- (claimant = g.instance_id, written as a range with an order
            -- only the claimant index gives without a sort: no plan, however
            -- its statistics look, scans the whole table for it)
            WHERE c.claimant >= g.instance_id AND c.claimant <= g.instance_id
              AND c.expiry_1 < now()
              AND (greatest(c.expiry_2, g.lease_2) < now() OR NOT c.submitting)
              -- ours, or free to take for $6 ms (since the later of the
              -- expiries that applies to it)
              AND (l.ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(l.ids)] = $1
                   OR CASE WHEN c.submitting THEN greatest(c.expiry_2, g.lease_2)
                           ELSE greatest(c.expiry_1, g.lease_1) END
                      < now() - $6::integer * interval '1 millisecond')
            ORDER BY c.claimant
            LIMIT $2::integer
              FOR UPDATE OF c SKIP LOCKED
              FOR SHARE OF s SKIP LOCKED) x
     WHERE l.ids IS NOT NULL
     LIMIT $2::integer
), plan AS MATERIALIZED (
    SELECT p.ctid, p.who
      FROM (SELECT e.ctid, e.who, row_number() OVER (PARTITION BY e.who ORDER BY e.ctid) AS nth
              FROM expired e) p
     WHERE p.nth <= $5::integer
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
    -- every claim named, in notifications of at most 7,900 bytes
    -- (PostgreSQL takes less than 8,000), as many as each receiver needs
    -- (about two hundred claims each; a call gives one receiver at most
    -- $5 claims); "+" instead, one notification, for a receiver that would
    -- need more than sixteen: read all your claims, fetch those at a new
    -- epoch
    SELECT pg_notify('queuer_i' || p.incarnation,
                     CASE WHEN p.parts > 16 THEN '+' ELSE string_agg(p.item, ' ') END) AS sent
      FROM (SELECT n.incarnation, n.item, n.part,
                   max(n.part) OVER (PARTITION BY n.incarnation) + 1 AS parts
              FROM (SELECT i.incarnation, u.service_id || ':' || u.claim_epoch AS item,
                           (sum(octet_length(u.service_id) + 2
                                + octet_length(u.claim_epoch::text))
                                OVER (PARTITION BY i.incarnation ORDER BY u.service_id
                                      ROWS UNBOUNDED PRECEDING) - 1) / 7900 AS part
                      FROM upd u JOIN queuer.instances i ON i.instance_id = u.claimant
                     WHERE u.claimant <> $1) n) p
     GROUP BY p.incarnation, p.parts, CASE WHEN p.parts > 16 THEN 0 ELSE p.part END
)
SELECT u.service_id, u.claimant, u.claim_epoch
  FROM upd u CROSS JOIN (SELECT count(w.sent) AS n FROM woke w) w
