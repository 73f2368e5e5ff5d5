-- 0008: claims at scale. The claim cycle's cost follows what
-- changed, not the number of services; docs/CLAIMS.md explains the design
-- and why it keeps every guarantee of docs/DESIGN.md §4.
--
-- 1. Instance leases. A worker renews one row per cycle, its own
--    instances row (lease_1 soft, lease_2 hard), instead of every claim
--    row. A claim is held until greatest(its own expiry_1, its holder's
--    lease_1) and hard-expires at greatest(expiry_2, lease_2): the claim's
--    own expiries are set when it is taken and not renewed after that.
-- 2. A work counter on the claim row: n_open = the service's non-final
--    batches, kept exact by statement triggers on queuer.batches (enqueue,
--    outcomes, operator actions, deletes) as n_open = n_open + delta under
--    the claim row's lock, so it commutes with concurrent writers and
--    needs no snapshot to be right. has_work (n_open > 0) indexes free
--    services with work and held services without, so claiming and idle
--    release read only the rows they act on. The same trigger keeps
--    `submitting` (migration 0003), which the mark and outcome statements
--    wrote themselves until now.

ALTER TABLE queuer.instances
    ADD COLUMN lease_1 timestamptz,
    ADD COLUMN lease_2 timestamptz,
    ADD COLUMN claims_held integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN queuer.instances.lease_1 IS
    'The instance''s soft lease, renewed every cycle: its claims are held until '
    'greatest(claim expiry_1, lease_1).';
COMMENT ON COLUMN queuer.instances.lease_2 IS
    'The instance''s hard lease: a claim whose service has a batch being submitted is freed '
    'only after greatest(claim expiry_2, lease_2).';
COMMENT ON COLUMN queuer.instances.claims_held IS
    'Claims the instance held at its last lease renewal (for the fair share).';

ALTER TABLE queuer.service_id_claims
    ADD COLUMN n_open integer NOT NULL DEFAULT 0,
    ADD COLUMN has_work boolean GENERATED ALWAYS AS (n_open > 0) STORED;
COMMENT ON COLUMN queuer.service_id_claims.n_open IS
    'Non-final batches of the service, kept by triggers on queuer.batches.';
COMMENT ON COLUMN queuer.service_id_claims.expiry_1 IS
    'Soft expiry set when the claim was taken; the holder''s instances.lease_1 extends it.';
COMMENT ON COLUMN queuer.service_id_claims.expiry_2 IS
    'Hard expiry set when the claim was taken; the holder''s instances.lease_2 extends it.';
-- Room on each page for the new row versions of counter updates (HOT).
ALTER TABLE queuer.service_id_claims SET (fillfactor = 70);

UPDATE queuer.service_id_claims c
   SET n_open = o.n
  FROM (SELECT b.service_id, count(*) AS n FROM queuer.batches b
         WHERE b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')
         GROUP BY b.service_id) o
 WHERE o.service_id = c.service_id;

-- Free services with work, in the order of a hash of their id: each worker
-- claims a range from its own random place, whatever the ids look like.
CREATE INDEX service_id_claims_free_work ON queuer.service_id_claims (hashtext(service_id))
    WHERE claimant IS NULL AND has_work;
-- Held services without work: their holder gives them back.
CREATE INDEX service_id_claims_idle ON queuer.service_id_claims (claimant)
    WHERE claimant IS NOT NULL AND NOT has_work;
-- Maintenance finds expired claims through their holder's lease now.
DROP INDEX queuer.service_id_claims_expiry;

-- Keeps n_open and submitting of the claim rows of the services a
-- statement on queuer.batches touched: one update per service and
-- statement, and only where a value changes. The workers' statements have
-- locked those claim rows already (their fence), enqueue has locked the
-- services' ingest rows, operator actions the claim row. At most one batch
-- of a service is in flight (batches_one_in_flight), so a service is
-- mid-submission after the statement when a batch it changed is, no longer
-- when the one it changed was, and as before otherwise.
CREATE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO queuer.service_id_claims AS c (service_id, n_open, submitting)
        SELECT n.service_id,
               count(*) FILTER (WHERE n.status IS NULL
                                   OR n.status IN ('Pending', 'Unknown', 'Delayed')),
               coalesce(bool_or(n.submitted AND n.status IS NULL), false)
          FROM new_rows n GROUP BY n.service_id ORDER BY n.service_id
        ON CONFLICT (service_id) DO UPDATE
           SET n_open = c.n_open + EXCLUDED.n_open,
               submitting = c.submitting OR EXCLUDED.submitting
         WHERE EXCLUDED.n_open <> 0 OR EXCLUDED.submitting;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE queuer.service_id_claims c
           SET n_open = c.n_open + s.d_open,
               submitting = s.mid_now OR (c.submitting AND NOT s.mid_before)
          FROM (SELECT n.service_id,
                       sum((n.status IS NULL OR n.status IN ('Pending', 'Unknown', 'Delayed'))::int
                           - (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))::int)
                           AS d_open,
                       bool_or(n.submitted AND n.status IS NULL) AS mid_now,
                       bool_or(o.submitted AND o.status IS NULL) AS mid_before
                  FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id
                 GROUP BY n.service_id) s
         WHERE c.service_id = s.service_id
           AND (s.d_open <> 0
                OR c.submitting <> (s.mid_now OR (c.submitting AND NOT s.mid_before)));
    ELSE
        UPDATE queuer.service_id_claims c
           SET n_open = c.n_open - s.d_open,
               submitting = c.submitting AND NOT s.mid_before
          FROM (SELECT o.service_id,
                       count(*) FILTER (WHERE o.status IS NULL
                                           OR o.status IN ('Pending', 'Unknown', 'Delayed')) AS d_open,
                       bool_or(o.submitted AND o.status IS NULL) AS mid_before
                  FROM old_rows o GROUP BY o.service_id) s
         WHERE c.service_id = s.service_id
           AND (s.d_open <> 0 OR (c.submitting AND s.mid_before));
    END IF;
    RETURN NULL;
END
$fn$;
REVOKE ALL ON FUNCTION queuer.claims_follow_batches() FROM PUBLIC;
CREATE TRIGGER batches_claims_insert AFTER INSERT ON queuer.batches
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION queuer.claims_follow_batches();
CREATE TRIGGER batches_claims_update AFTER UPDATE ON queuer.batches
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION queuer.claims_follow_batches();
CREATE TRIGGER batches_claims_delete AFTER DELETE ON queuer.batches
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION queuer.claims_follow_batches();

-- Operators see a claim's effective expiries (and its counters).
CREATE OR REPLACE VIEW queuer.claims AS
    SELECT c.service_id, c.claimant, c.claim_epoch,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_1, i.lease_1) END AS expiry_1,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_2, i.lease_2) END AS expiry_2,
           c.submitting, c.n_open
      FROM queuer.service_id_claims c
      LEFT JOIN queuer.instances i ON i.instance_id = c.claimant;

CREATE OR REPLACE VIEW queuer.service_overview AS
    SELECT c.service_id,
           c.claimant,
           c.claim_epoch,
           c.expiry_1,
           c.expiry_2,
           CASE WHEN c.claimant IS NULL THEN 'free'
                WHEN c.expiry_1 > now() THEN 'held'
                WHEN c.expiry_2 > now() THEN 'lapsed'
                ELSE 'expired' END AS claim_state,
           bl.backlog,
           coalesce((h.submitted AND h.status IS NULL) OR h.status = 'Pending', false)
               AS in_flight,
           h.batch_id AS head_batch_id,
           CASE WHEN h.batch_id IS NULL THEN NULL
                WHEN h.status = 'Delayed' AND h.retry_at = 'infinity' THEN 'parked'
                WHEN h.status IS NOT NULL THEN h.status
                WHEN h.submitted THEN 'submitting'
                ELSE 'waiting' END AS head_state,
           h.attempts AS head_attempts,
           h.retry_at AS head_retry_at,
           h.created_at AS oldest_waiting_created_at,
           now() - h.created_at AS oldest_waiting_age,
           h.last_error,
           coalesce(i.blocked, false) AS ingest_blocked
      FROM queuer.claims c
     CROSS JOIN LATERAL (
           SELECT count(*) AS backlog FROM queuer.batches b
            WHERE b.service_id = c.service_id
              AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))) bl
      LEFT JOIN LATERAL (
           SELECT b.batch_id, b.status, b.submitted, b.attempts, b.retry_at, b.created_at,
                  b.last_error
             FROM queuer.batches b
            WHERE b.service_id = c.service_id
              AND (b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed'))
            ORDER BY b.created_at, b.batch_id
            LIMIT 1) h ON true
      LEFT JOIN queuer.service_ingest i ON i.service_id = c.service_id;

CREATE OR REPLACE VIEW queuer.instance_overview AS
    SELECT i.instance_id,
           i.host,
           i.pid,
           i.version,
           i.started_at,
           i.heartbeat_at,
           i.stopped_at,
           now() - i.heartbeat_at AS heartbeat_age,
           CASE WHEN i.stopped_at IS NOT NULL THEN 'stopped'
                WHEN i.heartbeat_at > now() - (SELECT t.instance_dead_after
                                                 FROM queuer.operator_thresholds t) THEN 'alive'
                ELSE 'dead' END AS state,
           cl.claims_held,
           cl.claims_lapsed
      FROM queuer.instances i
     CROSS JOIN LATERAL (
           SELECT count(*) FILTER (WHERE c.expiry_1 > now()) AS claims_held,
                  count(*) FILTER (WHERE c.expiry_1 <= now()) AS claims_lapsed
             FROM queuer.claims c
            WHERE c.claimant = i.instance_id) cl;
