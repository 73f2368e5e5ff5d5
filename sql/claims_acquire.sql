-- Pickup: gives free services with work to live instances, highest head
-- priority first, each instance up to its room (the fair share less the
-- claims it holds), in turns; one worker at a time (a transaction-level
-- advisory lock: a worker that does not get it leaves pickup to the one
-- that has it). Free services with work are few where workers run: an
-- enqueue gives a free service to a live instance itself
-- (claims_give_work, claims_follow_batch_insert), so pickup serves what was enqueued while no
-- worker ran, what maintenance or a graceful stop could not hand over,
-- and surplus given back with work.
-- Runs in the SERIALIZABLE claims transaction. The index of free services
-- with work is read from its top (highest priority) down; rows another
-- transaction has locked (an enqueue giving the service away) are
-- skipped. The update finds the rows by the ctid just locked, not by key:
-- a key lookup would predicate-lock whole primary-key pages, which other
-- workers' updates of neighbouring keys write into (false serialization
-- failures). The other receivers are woken on their own channels.
-- Each instance's claims are counted here, through the claimant index (the
-- counts instances report with their leases lag the claims an enqueue or
-- an earlier pickup just gave them); the free services with work up to
-- $2 (with more, the rooms below the share still hold the $2 this call
-- may give out, in the same turns), read only up to $7, and as many as
-- that count as $2 (rows that churn while pickups give them out: each one
-- read is a visit to the heap; sql/claims_share.sql counts them alike, so
-- that a worker does not drain as surplus what pickup just gave it).
-- $1 instance, $2 at most this many in all, $3 lease ms, $4 hard-expiry
-- ms, $5 slack, $6 max claims per instance (0 = none), $7 at most this many
-- to each instance (a worker alone, the first of several starting, does not
-- take everything before the others have registered).
-- Returns one row per claim given to us (service, epoch, its priority),
-- or one row of NULLs when none was; every row also says whether we held
-- the pickup lock and how many claims the call gave out in all.
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtext('queuer.claims_pickup')) AS got
), live AS MATERIALIZED (
    -- as in claims_share.sql: a running lease, us, or registered within a
    -- lease and no lease yet
    SELECT i.instance_id, i.incarnation,
           (SELECT count(*) FROM queuer.service_id_claims h
             WHERE h.claimant = i.instance_id) AS held
      FROM queuer.instances i, lock k
     WHERE k.got AND i.stopped_at IS NULL
       AND (i.lease_1 > now() OR i.instance_id = $1
            OR (i.lease_1 IS NULL
                AND i.heartbeat_at > now() - $3::integer * interval '1 millisecond'))
), share AS MATERIALIZED (
    SELECT CASE WHEN $6::integer > 0 THEN least($6::integer, s.even + $5::integer)
                ELSE s.even + $5::integer END AS n
      FROM (SELECT ceil((sum(l.held)
                         + (SELECT CASE WHEN count(*) >= least($2::integer, $7::integer)
                                        THEN $2::integer ELSE count(*) END
                              FROM (SELECT 1 FROM queuer.service_id_claims f
                                     WHERE f.claimant IS NULL AND f.has_work
                                     LIMIT least($2::integer, $7::integer)) f))::numeric
                        / greatest(1, count(*)))::integer AS even
              FROM live l) s
), slots AS MATERIALIZED (
    -- each instance's room, taken in turns: slot 1 of every instance, then 2, ...
    SELECT l.instance_id, row_number() OVER (ORDER BY g.k, l.instance_id) AS slot
      FROM live l, share s,
           LATERAL generate_series(1, least(greatest(0, s.n - l.held), $7::integer)) g(k)
), locked AS MATERIALIZED (
    SELECT c.ctid, c.head_priority, hashtext(c.service_id) AS h
      FROM queuer.service_id_claims c
     WHERE c.claimant IS NULL AND c.has_work
     ORDER BY c.head_priority DESC, hashtext(c.service_id) DESC
     LIMIT least($2::integer, (SELECT count(*) FROM slots))
       FOR UPDATE SKIP LOCKED
), picked AS MATERIALIZED (
    SELECT k.ctid, s.instance_id
      FROM (SELECT k.ctid, row_number() OVER (ORDER BY k.head_priority DESC, k.h DESC) AS slot
              FROM locked k) k
      JOIN slots s ON s.slot = k.slot
), upd AS (
    UPDATE queuer.service_id_claims c
       SET claimant = p.instance_id, claim_epoch = c.claim_epoch + 1,
           expiry_1 = now() + $3::integer * interval '1 millisecond',
           expiry_2 = now() + $4::integer * interval '1 millisecond'
      FROM picked p
     WHERE c.ctid = ANY (ARRAY(SELECT x.ctid FROM picked x)) AND c.ctid = p.ctid
       AND c.claimant IS NULL
    RETURNING c.service_id, c.claimant, c.claim_epoch, c.head_priority
), woke AS (
    -- every claim named, in notifications of at most 7,900 bytes
    -- (PostgreSQL takes less than 8,000), as many as each receiver needs
    -- (about two hundred claims each; a call gives one receiver at most
    -- $7 claims); "+" instead, one notification, for a receiver that would
    -- need more than sixteen: read all your claims, fetch those at a new
    -- epoch
    SELECT pg_notify('queuer_i' || p.incarnation,
                     CASE WHEN p.parts > 16 THEN '+' ELSE string_agg(p.item, ' ') END) AS sent
      FROM (SELECT n.incarnation, n.item, n.part,
                   max(n.part) OVER (PARTITION BY n.incarnation) + 1 AS parts
              FROM (SELECT l.incarnation, u.service_id || ':' || u.claim_epoch AS item,
                           (sum(octet_length(u.service_id) + 2
                                + octet_length(u.claim_epoch::text))
                                OVER (PARTITION BY l.incarnation ORDER BY u.service_id
                                      ROWS UNBOUNDED PRECEDING) - 1) / 7900 AS part
                      FROM upd u JOIN live l ON l.instance_id = u.claimant
                     WHERE u.claimant <> $1) n) p
     GROUP BY p.incarnation, p.parts, CASE WHEN p.parts > 16 THEN 0 ELSE p.part END
)
SELECT u.service_id, u.claim_epoch, u.head_priority, k.got, t.n AS picked
  FROM lock k
 CROSS JOIN (SELECT count(w.sent) AS n FROM woke w) w
 CROSS JOIN (SELECT count(*) AS n FROM upd) t
  LEFT JOIN upd u ON u.claimant = $1
