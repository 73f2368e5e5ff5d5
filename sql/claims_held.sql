-- The claims this instance holds, with their epochs and how many
-- milliseconds each is held for (greatest(its expiry_1, our lease_1)).
-- Read when the worker starts and after its lease may have lapsed (a
-- claim not returned is lost), not every cycle. $1 instance.
SELECT c.service_id, c.claim_epoch,
       (extract(epoch FROM greatest(c.expiry_1, l.lease_1) - now()) * 1000)::bigint
           AS lease_left_ms
  FROM queuer.service_id_claims c
  LEFT JOIN queuer.instances l ON l.instance_id = $1
 WHERE c.claimant = $1
