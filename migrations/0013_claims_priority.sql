-- 0013: workers claim services by priority.
--
-- Until now a worker claimed free services with work in the order of a
-- hash of their id, from a random place (so workers spread out), whatever
-- their priority: when claims are scarce (more services with work than
-- the workers' max_claims hold, or a worker starting against a backlog) a
-- priority-10 service waited behind priority-0 ones. The claim row now
-- carries head_priority, the priority of the service's head batch (its
-- oldest non-final batch in docs/DESIGN.md §5.1 order: created_at, then batch_id; 0
-- when it has none), and the index of free services with work is ordered
-- by it first: sql/claims_acquire.sql takes the highest priority present,
-- from a random place within it, then the next (docs/CLAIMS.md).
--
-- head_priority is kept exact by the statement triggers of 0008
-- (queuer.claims_follow_batches, replaced here with everything it did:
-- n_open, submitting). A service's head can change only when a statement
-- inserts a non-final batch, deletes one, makes one final or non-final, or
-- changes the priority or created_at of a non-final one; only the services
-- such a statement touched are looked at. A second counter on the claim
-- row, n_open_nonzero (non-final batches whose priority is not 0, kept
-- like n_open by deltas), says when the head's priority is 0 without
-- looking; only a service that still has such a batch gets one probe of
-- batches_open, and its claim row is written again only when the value
-- changes. Where every priority is 0 the trigger runs one statement, as
-- before, and writes nothing more (but for the rare update that changes a
-- non-final batch's priority or created_at and nothing else: its claim row
-- is written, to lock it for the probe). Order within a service is creation
-- order, so a batch of priority 10 enqueued behind a head of priority 0
-- does not raise the service: its head is still the old batch.
--
-- Exactness under concurrency: the probe runs in a statement of its own
-- after the claim rows are locked, so (READ COMMITTED) its snapshot holds
-- every change committed by whoever held the row before; a writer that
-- commits later locks the row after us and probes again. Enqueue locks the
-- claim row only in this trigger, and a REPEATABLE READ or SERIALIZABLE
-- caller whose snapshot misses a concurrent change of the row gets 40001
-- from the row update, as before.

ALTER TABLE queuer.service_id_claims
    ADD COLUMN head_priority integer NOT NULL DEFAULT 0,
    ADD COLUMN n_open_nonzero integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN queuer.service_id_claims.head_priority IS
    'Priority of the service''s head batch (oldest non-final, by created_at then batch_id), '
    '0 when it has none; kept by triggers on queuer.batches. Free services with work are '
    'claimed highest head_priority first.';
COMMENT ON COLUMN queuer.service_id_claims.n_open_nonzero IS
    'Non-final batches of the service whose priority is not 0, kept by triggers on '
    'queuer.batches: at 0 the head''s priority is 0 without looking.';

UPDATE queuer.service_id_claims c
   SET head_priority = h.priority, n_open_nonzero = h.n_nonzero
  FROM (SELECT b.service_id,
               (array_agg(b.priority ORDER BY b.created_at, b.batch_id))[1] AS priority,
               count(*) FILTER (WHERE b.priority <> 0) AS n_nonzero
          FROM queuer.batches b
         WHERE b.status IS NULL OR b.status IN ('Pending', 'Unknown', 'Delayed')
         GROUP BY b.service_id) h
 WHERE h.service_id = c.service_id AND h.n_nonzero > 0;

-- Free services with work by priority, then by the hash of their id: a
-- claimer reads one priority from its own random place.
DROP INDEX queuer.service_id_claims_free_work;
CREATE INDEX service_id_claims_free_work
    ON queuer.service_id_claims (head_priority, hashtext(service_id))
    WHERE claimant IS NULL AND has_work;

-- 0008's trigger function plus head_priority. Every branch first does
-- what 0008 did (n_open, submitting), now with n_open_nonzero and, in the
-- same row update, head_priority = 0 where the service is left without a
-- non-final batch of non-zero priority (no need to look), or the
-- priority of the oldest inserted batch where an insert gives work to a
-- service that had none. The services whose head can have moved and that
-- still have a non-final batch of non-zero priority are then probed, in a
-- statement of their own after their claim rows are locked.
CREATE OR REPLACE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    probe text[]; -- services whose head may have moved, claim rows locked
    svc   text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        WITH added AS MATERIALIZED (
            SELECT n.service_id,
                   count(*) FILTER (WHERE n.status IS NULL
                                       OR n.status IN ('Pending', 'Unknown', 'Delayed')) AS n_open,
                   count(*) FILTER (WHERE (n.status IS NULL
                                           OR n.status IN ('Pending', 'Unknown', 'Delayed'))
                                      AND n.priority <> 0) AS n_nonzero,
                   coalesce(bool_or(n.submitted AND n.status IS NULL), false) AS submitting,
                   coalesce((array_agg(n.priority ORDER BY n.created_at, n.batch_id)
                                 FILTER (WHERE n.status IS NULL
                                            OR n.status IN ('Pending', 'Unknown', 'Delayed')))[1],
                            0) AS head_priority
              FROM new_rows n GROUP BY n.service_id
        ), up AS (
            INSERT INTO queuer.service_id_claims AS c
                   (service_id, n_open, n_open_nonzero, submitting, head_priority)
            SELECT a.service_id, a.n_open, a.n_nonzero, a.submitting, a.head_priority
              FROM added a ORDER BY a.service_id
            ON CONFLICT (service_id) DO UPDATE
               SET n_open = c.n_open + EXCLUDED.n_open,
                   n_open_nonzero = c.n_open_nonzero + EXCLUDED.n_open_nonzero,
                   submitting = c.submitting OR EXCLUDED.submitting,
                   head_priority = CASE WHEN c.n_open = 0 THEN EXCLUDED.head_priority
                                        ELSE c.head_priority END
             WHERE EXCLUDED.n_open <> 0 OR EXCLUDED.submitting
            RETURNING c.service_id, c.n_open, c.n_open_nonzero
        )
        -- an inserted batch might sort before the head of a service that
        -- had work (n_open beyond what this statement added)
        SELECT array_agg(u.service_id ORDER BY u.service_id) INTO probe
          FROM up u JOIN added a ON a.service_id = u.service_id
         WHERE a.n_open > 0 AND u.n_open > a.n_open AND u.n_open_nonzero > 0;
    ELSIF TG_OP = 'UPDATE' THEN
        -- every service whose head can have moved is written (so locked)
        -- here: the probe below needs its lock
        WITH up AS (
            UPDATE queuer.service_id_claims c
               SET n_open = c.n_open + s.d_open,
                   n_open_nonzero = c.n_open_nonzero + s.d_nonzero,
                   submitting = s.mid_now OR (c.submitting AND NOT s.mid_before),
                   head_priority = CASE WHEN c.n_open_nonzero + s.d_nonzero = 0 THEN 0
                                        ELSE c.head_priority END
              FROM (SELECT n.service_id,
                           sum((n.status IS NULL OR n.status IN ('Pending', 'Unknown', 'Delayed'))::int
                               - (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))::int)
                               AS d_open,
                           sum(((n.status IS NULL OR n.status IN ('Pending', 'Unknown', 'Delayed'))
                                AND n.priority <> 0)::int
                               - ((o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))
                                  AND o.priority <> 0)::int) AS d_nonzero,
                           bool_or(n.submitted AND n.status IS NULL) AS mid_now,
                           bool_or(o.submitted AND o.status IS NULL) AS mid_before,
                           -- the head can have moved: a batch became final or
                           -- not, or a non-final one changed its priority or
                           -- created_at (this covers every d_open, d_nonzero <> 0)
                           bool_or((n.status IS NULL OR n.status IN ('Pending', 'Unknown', 'Delayed'))
                                   <> (o.status IS NULL OR o.status IN ('Pending', 'Unknown', 'Delayed'))
                                   OR ((n.status IS NULL
                                        OR n.status IN ('Pending', 'Unknown', 'Delayed'))
                                       AND (n.priority <> o.priority
                                            OR n.created_at <> o.created_at))) AS moved
                      FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id
                     GROUP BY n.service_id) s
             WHERE c.service_id = s.service_id
               AND (s.moved OR c.submitting <> (s.mid_now OR (c.submitting AND NOT s.mid_before)))
            RETURNING c.service_id, c.n_open_nonzero, s.moved
        )
        SELECT array_agg(u.service_id ORDER BY u.service_id) INTO probe
          FROM up u WHERE u.moved AND u.n_open_nonzero > 0;
    ELSE
        WITH up AS (
            UPDATE queuer.service_id_claims c
               SET n_open = c.n_open - s.d_open,
                   n_open_nonzero = c.n_open_nonzero - s.d_nonzero,
                   submitting = c.submitting AND NOT s.mid_before,
                   head_priority = CASE WHEN c.n_open_nonzero - s.d_nonzero = 0 THEN 0
                                        ELSE c.head_priority END
              FROM (SELECT o.service_id,
                           count(*) FILTER (WHERE o.status IS NULL
                                               OR o.status IN ('Pending', 'Unknown', 'Delayed'))
                               AS d_open,
                           count(*) FILTER (WHERE (o.status IS NULL
                                                   OR o.status IN ('Pending', 'Unknown', 'Delayed'))
                                              AND o.priority <> 0) AS d_nonzero,
                           bool_or(o.submitted AND o.status IS NULL) AS mid_before
                      FROM old_rows o GROUP BY o.service_id) s
             WHERE c.service_id = s.service_id
               AND (s.d_open <> 0 OR (c.submitting AND s.mid_before))
            RETURNING c.service_id, c.n_open_nonzero, s.d_open
        )
        SELECT array_agg(u.service_id ORDER BY u.service_id) INTO probe
          FROM up u WHERE u.d_open <> 0 AND u.n_open_nonzero > 0;
    END IF;
    -- one statement per service, after the rows are locked: its snapshot
    -- sees every change committed before (and a plain statement keeps its
    -- plan: a join with unnest(probe) was planned again on every call,
    -- about 0.3 ms)
    FOREACH svc IN ARRAY coalesce(probe, '{}') LOOP
        UPDATE queuer.service_id_claims c
           SET head_priority = h.priority
          FROM (SELECT coalesce((SELECT b.priority FROM queuer.batches b
                                  WHERE b.service_id = svc
                                    AND (b.status IS NULL
                                         OR b.status IN ('Pending', 'Unknown', 'Delayed'))
                                  ORDER BY b.created_at, b.batch_id
                                  LIMIT 1), 0) AS priority) h
         WHERE c.service_id = svc AND c.head_priority <> h.priority;
    END LOOP;
    RETURN NULL;
END
$fn$;

-- Operators see the head's priority with the claim.
CREATE OR REPLACE VIEW queuer.claims AS
    SELECT c.service_id, c.claimant, c.claim_epoch,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_1, i.lease_1) END AS expiry_1,
           CASE WHEN c.claimant IS NOT NULL THEN greatest(c.expiry_2, i.lease_2) END AS expiry_2,
           c.submitting, c.n_open, c.head_priority
      FROM queuer.service_id_claims c
      LEFT JOIN queuer.instances i ON i.instance_id = c.claimant;
