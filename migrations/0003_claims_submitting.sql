-- 0003: "a batch of this service is mid-submission" as a fact on the claim row.
--
-- Soft expiry (docs/DESIGN.md §4.1) may free a claim only when its service has no
-- batch mid-submission (submitted, no status yet). Maintenance runs
-- SERIALIZABLE, but marks and outcomes run at READ COMMITTED, which SSI
-- does not track: a maintenance snapshot taken before a mark committed
-- could see no such batch, lock the claim row once the mark's share lock
-- was gone, and free the claim while the POST was under way. Now the
-- statements that put a batch into or take it out of that state write
-- `submitting` on the claim row in the same statement, under the row lock
-- of their fence, and maintenance decides from the row it locks: a
-- SERIALIZABLE transaction cannot lock a row version newer than its
-- snapshot (40001), so it never frees on a stale view.
ALTER TABLE queuer.service_id_claims
    ADD COLUMN submitting boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN queuer.service_id_claims.submitting IS
    'true while a batch of the service is being submitted (submitted, no status): the claim '
    'is then freed only after expiry_2. Written by the statements that mark batches and record '
    'outcomes, under their claim-row lock.';

UPDATE queuer.service_id_claims c
   SET submitting = true
 WHERE EXISTS (SELECT 1 FROM queuer.batches b
                WHERE b.service_id = c.service_id AND b.submitted AND b.status IS NULL);

-- Operators see it with the claim.
CREATE OR REPLACE VIEW queuer.claims AS
    SELECT service_id, claimant, claim_epoch, expiry_1, expiry_2, submitting
      FROM queuer.service_id_claims;
