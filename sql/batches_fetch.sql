-- Fetch: for each service this instance holds (one probe of the batches
-- index each: a held service may have no work), its oldest non-final batch
-- plus any batch in flight, as the input of the one-round serial queuer,
-- with each batch's priority (the queuer hands higher priorities over first).
-- $1 instance. (batches_fetch_some is the same for a list of services.)
-- The oldest non-final batch is found in two index probes: the smallest
-- created_at in batches_open's own order (service_id, created_at), then
-- the tie-break by id among the batches with that created_at (normally one).
-- Ordering by (created_at, batch_id) in one step lets a plan made with few
-- rows in the table sort every open batch of the service instead: ~4 ms a
-- probe at 2,000 open batches, which grows with the queue. The first probe
-- starts at the claim row's open_from (migration 0041): the index entries
-- of the batches the service finished before it are not read, however
-- many a held snapshot keeps. The batch in flight is the one the claim
-- row names (in_flight, migration 0043): a primary-key lookup, and none
-- when the row names no batch.
-- Times are microseconds since the epoch on the database clock.
SELECT c.service_id, c.claim_epoch, b.batch_id,
       (extract(epoch FROM b.created_at) * 1000000)::bigint AS created_us,
       b.submitted, coalesce(b.status, '') AS status,
       -- parked batches (retry_at = infinity) map to the year 9999
       coalesce((extract(epoch FROM least(b.retry_at, '9999-01-01'::timestamptz)) * 1000000)::bigint,
                0) AS retry_us,
       b.attempts,
       (extract(epoch FROM now()) * 1000000)::bigint AS now_us,
       b.priority
  FROM queuer.service_id_claims c
 CROSS JOIN LATERAL (
       (SELECT o.batch_id, o.created_at, o.submitted, o.status, o.retry_at, o.attempts,
               o.priority
          FROM queuer.batches o
         WHERE o.service_id = c.service_id
           AND (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))
           AND o.created_at = (SELECT h.created_at FROM queuer.batches h
                                WHERE h.service_id = c.service_id
                                  AND (h.status IS NULL
                                       OR h.status IN ('Pending', 'Unknown', 'Delayed'))
                                  AND h.created_at >= coalesce(c.open_from,
                                                               '-infinity'::timestamptz)
                                ORDER BY h.created_at
                                LIMIT 1)
         ORDER BY o.batch_id
         LIMIT 1)
       UNION
       (SELECT f.batch_id, f.created_at, f.submitted, f.status, f.retry_at, f.attempts,
               f.priority
          FROM queuer.batches f
         WHERE f.batch_id = c.in_flight
           AND f.service_id = c.service_id
           AND ((f.submitted AND f.status IS NULL) OR f.status = 'Pending'))
     ) b
 WHERE c.claimant = $1
   AND greatest(c.expiry_1,
                    (SELECT i.lease_1 FROM queuer.instances i WHERE i.instance_id = $1)) > now()
