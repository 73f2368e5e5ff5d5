-- Fetch for the listed services only (jobs of theirs just came back):
-- batches_fetch restricted to $2 (text[]), so the fast path reads only
-- what changed. $1 instance.
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
 WHERE c.service_id = ANY ($2::text[])
   -- not indexable on purpose (means = here): the primary key drives the scan
   AND c.claimant IS NOT DISTINCT FROM $1
   AND greatest(c.expiry_1,
                    (SELECT i.lease_1 FROM queuer.instances i WHERE i.instance_id = $1)) > now()
