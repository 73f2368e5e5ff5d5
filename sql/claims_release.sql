-- Gives back the listed claims of this instance (surplus over the fair
-- share, chosen by the worker among services with no job out), except
-- those with a batch mid-submission. $1 instance, $2 service ids
-- (text[]). Returns the released services.
UPDATE queuer.service_id_claims c
   SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL, claim_epoch = c.claim_epoch + 1
 WHERE c.service_id = ANY ($2::text[])
   -- not indexable on purpose (means = here): the primary key drives the scan
   AND c.claimant IS NOT DISTINCT FROM $1
   AND NOT c.submitting
RETURNING c.service_id
