-- The claims this instance holds, with their epochs and how many
-- milliseconds of lease each has left. A claim not returned is lost.
-- $1 instance.
SELECT service_id, claim_epoch,
       (extract(epoch FROM expiry_1 - now()) * 1000)::bigint AS lease_left_ms
  FROM queuer.service_id_claims
 WHERE claimant = $1
