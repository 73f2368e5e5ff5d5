-- Renews this instance's claims that are past half their lease, so claim
-- rows are written rarely (fewer lock waits and serialization conflicts).
-- $1 instance, $2 lease ms, $3 hard-expiry ms.
UPDATE queuer.service_id_claims
   SET expiry_1 = now() + $2::integer * interval '1 millisecond',
       expiry_2 = now() + $3::integer * interval '1 millisecond'
 WHERE claimant = $1
   AND expiry_1 < now() + ($2::integer / 2) * interval '1 millisecond'
