-- 0035: updates of queuer.batches counted row by row, with no transition
-- tables.
--
-- The counters trigger on batches (0008, 0029, 0031, 0032) was a statement
-- trigger for updates as for inserts and deletes, and read the statement's
-- rows from its transition tables. The workers' mark and outcome
-- statements count for themselves (0032) and the trigger's WHEN skips
-- them, but PostgreSQL fills a statement trigger's transition tables
-- whatever its WHEN says: every row version a worker's update wrote was
-- copied once more for nobody. Without that copy an outcome statement of
-- 30 outcomes takes 6-10 % less time; one of a single outcome costs what
-- it did (bench/pg_hot_path.sh; bench/PERFORMANCE.md, "PostgreSQL per
-- batch").
--
-- Updates are now followed by a row trigger with the same WHEN: a worker's
-- update queues nothing, and every other update (an operator's retry,
-- cancel or resolve, a repair by hand) counts its rows one by one, as the
-- statement trigger counted a statement of one row. Whether the service
-- has a batch mid-submission is read from its batches when an update
-- changes it, so rows counted in any order leave it right. Inserts and
-- deletes keep the statement trigger: an insert's rows are counted in one
-- pass (a bulk load's 100,000 rows would otherwise take 100,000 calls),
-- and deletes are the prune's.
--
-- The wake-up of the holders moves to queuer.claims_wake(), which both
-- triggers call; what it sends is 0031's.

-- Wakes the holders of the given services on their own channels:
-- "<service>:<epoch>" items separated by spaces, in notifications of at
-- most 7,900 bytes (PostgreSQL takes less than 8,000), as many as each
-- holder needs; "*" instead, one notification, for a holder that would need
-- more than sixteen (read your claims, fetch them all). Delivered when the
-- transaction commits. A fresh snapshot: it sees a claim another
-- transaction took while this one waited on the row, and so wakes the real
-- holder. Free services wake no one.
CREATE FUNCTION queuer.claims_wake(p_services text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, queuer, pg_temp AS $fn$
BEGIN
    PERFORM pg_notify('queuer_i' || i.incarnation, x.payload)
       FROM (SELECT p.claimant,
                    CASE WHEN p.parts > 16 THEN '*'
                         ELSE string_agg(p.item, ' ') END AS payload
               FROM (SELECT n.claimant, n.item, n.part,
                            max(n.part) OVER (PARTITION BY n.claimant) + 1 AS parts
                       FROM (SELECT c.claimant, c.service_id || ':' || c.claim_epoch AS item,
                                    (sum(octet_length(c.service_id) + 2
                                         + octet_length(c.claim_epoch::text))
                                         OVER (PARTITION BY c.claimant ORDER BY c.service_id
                                               ROWS UNBOUNDED PRECEDING) - 1) / 7900 AS part
                               FROM queuer.service_id_claims c
                              WHERE c.service_id = ANY (p_services)
                                AND c.claimant IS NOT NULL) n) p
              GROUP BY p.claimant, p.parts, CASE WHEN p.parts > 16 THEN 0 ELSE p.part END) x
       JOIN queuer.instances i ON i.instance_id = x.claimant;
END
$fn$;
REVOKE EXECUTE ON FUNCTION queuer.claims_wake(text[]) FROM PUBLIC;

-- Follows the inserts and deletes on queuer.batches (statement trigger):
-- - INSERT (an enqueue): counts the new work on the services' ingest rows
--   (locked by the enqueue already), creates missing claim rows, gives free
--   services to a live instance (or, with none live, marks them free with
--   work), then wakes each holder. Held claim rows are read, not written.
-- - DELETE (the prune, a repair by hand): n_out and `submitting` on the
--   claim rows of the deleted batches that were work.
-- A statement of one row takes plain statements on that one service, whose
-- plans the function keeps; a statement that reads the transition tables
-- is planned again on every call.
CREATE OR REPLACE FUNCTION queuer.claims_follow_batches() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    touched text[];   -- services given work: their holders are woken
    one     record;   -- the statement's first row, and how many it has
    ids     text[];   -- instances a free service may be given to
    n_new   bigint;   -- services an insert may give out
    work    text[];   -- an insert's services given work, in "C" order
    work_n  bigint[]; -- how many batches of work each was given
    mid     text[];   -- an insert's services with a batch mid-submission
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- the statement's first row, and whether it has more (two rows read)
        SELECT n.service_id, n.status, n.retry_at, n.priority, n.submitted,
               (SELECT count(*) FROM (SELECT FROM new_rows LIMIT 2) x) AS k
          INTO one FROM new_rows n LIMIT 1;
        IF one.k IS NULL THEN
            RETURN NULL;  -- nothing inserted
        ELSIF one.k = 1 THEN
            n_new := 1;
            IF one.submitted AND one.status IS NULL THEN
                mid := ARRAY[one.service_id];
            END IF;
        ELSE
            -- One pass over the rows, however many: per service, its
            -- batches that are work and whether one is mid-submission.
            SELECT array_agg(a.service_id ORDER BY a.service_id COLLATE "C")
                       FILTER (WHERE a.n > 0),
                   array_agg(a.n ORDER BY a.service_id COLLATE "C") FILTER (WHERE a.n > 0),
                   array_agg(a.service_id) FILTER (WHERE a.mid),
                   count(*)
              INTO work, work_n, mid, n_new
              FROM (SELECT n.service_id,
                           count(*) FILTER (WHERE queuer.batch_is_work(n.status, n.retry_at))
                               AS n,
                           bool_or(n.submitted AND n.status IS NULL) AS mid
                      FROM new_rows n GROUP BY n.service_id) a;
        END IF;
        IF mid IS NOT NULL THEN
            UPDATE queuer.service_id_claims c SET submitting = true
             WHERE c.service_id = ANY (mid) AND NOT c.submitting;
        END IF;
        -- the live instances a free service may go to: lease running, below
        -- their worker.max_claims, holding less than an even share
        -- (counting the services this statement may give out); all of
        -- those when none does; NULL when none is live (one batch of a held
        -- service, the common case, needs none of this)
        IF one.k > 1 OR NOT EXISTS (SELECT 1 FROM queuer.service_id_claims c
                                     WHERE c.service_id = one.service_id
                                       AND c.claimant IS NOT NULL) THEN
            SELECT coalesce(array_agg(l.instance_id ORDER BY l.instance_id)
                                FILTER (WHERE l.claims_held < l.even),
                            array_agg(l.instance_id ORDER BY l.instance_id))
              INTO ids
              FROM (SELECT i.instance_id, i.claims_held,
                           ceil((sum(i.claims_held) OVER () + n_new) / count(*) OVER ()) AS even
                      FROM queuer.instances i
                     WHERE i.lease_1 > now() AND i.stopped_at IS NULL
                       AND (i.max_claims = 0 OR i.claims_held < i.max_claims)) l;
        END IF;
        IF one.k = 1 THEN
            IF NOT queuer.batch_is_work(one.status, one.retry_at) THEN
                RETURN NULL;
            END IF;
            INSERT INTO queuer.service_ingest AS i (service_id, n_in) VALUES (one.service_id, 1)
            ON CONFLICT (service_id) DO UPDATE SET n_in = i.n_in + 1;
            INSERT INTO queuer.service_id_claims (service_id) VALUES (one.service_id)
            ON CONFLICT DO NOTHING;
            UPDATE queuer.service_id_claims c
               SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                   claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
             WHERE c.service_id = one.service_id AND c.claimant IS NULL AND ids IS NOT NULL;
            UPDATE queuer.service_id_claims c SET has_work = true, head_priority = one.priority
             WHERE c.service_id = one.service_id AND c.claimant IS NULL AND NOT c.has_work
               AND ids IS NULL;
            touched := ARRAY[one.service_id];
        ELSIF work IS NOT NULL THEN
            WITH counted AS (
                INSERT INTO queuer.service_ingest AS i (service_id, n_in)
                SELECT a.service_id, a.n FROM unnest(work, work_n) a(service_id, n)
                 ORDER BY a.service_id COLLATE "C"
                ON CONFLICT (service_id) DO UPDATE SET n_in = i.n_in + EXCLUDED.n_in
            )
            INSERT INTO queuer.service_id_claims (service_id)
            SELECT a.service_id FROM unnest(work) a(service_id) ORDER BY a.service_id COLLATE "C"
            ON CONFLICT DO NOTHING;
            -- (statements of their own: they see the claim rows just created)
            IF ids IS NOT NULL THEN
                UPDATE queuer.service_id_claims c
                   SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                       claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
                 WHERE c.service_id = ANY (work) AND c.claimant IS NULL;
            ELSE
                -- no instance is live (or below its cap): free with work,
                -- for pickup, at the priority of the service's first new
                -- batch (the only case that reads the rows a second time)
                UPDATE queuer.service_id_claims c
                   SET has_work = true, head_priority = a.first_priority
                  FROM (SELECT n.service_id,
                               (array_agg(n.priority ORDER BY n.created_at, n.batch_id))[1]
                                   AS first_priority
                          FROM new_rows n
                         WHERE queuer.batch_is_work(n.status, n.retry_at)
                         GROUP BY n.service_id) a
                 WHERE c.service_id = a.service_id AND c.claimant IS NULL AND NOT c.has_work;
            END IF;
            touched := work;
        END IF;
    ELSE
        -- DELETE
        UPDATE queuer.service_id_claims c
           SET n_out = c.n_out + s.d_open,
               submitting = c.submitting AND NOT s.mid_before
          FROM (SELECT o.service_id,
                       count(*) FILTER (WHERE queuer.batch_is_work(o.status, o.retry_at)) AS d_open,
                       bool_or(o.submitted AND o.status IS NULL) AS mid_before
                  FROM old_rows o GROUP BY o.service_id) s
         WHERE c.service_id = s.service_id
           AND (s.d_open <> 0 OR (c.submitting AND s.mid_before));
    END IF;
    IF touched IS NOT NULL THEN
        PERFORM queuer.claims_wake(touched);
    END IF;
    RETURN NULL;
END
$fn$;

-- Follows an update of one batch (row trigger; not the workers' own
-- updates, which count themselves): n_out and `submitting` on the claim
-- row; a free service that gets work back is marked so (at the batch's
-- priority), and the holder of a held one is woken.
CREATE FUNCTION queuer.claims_follow_batch_update() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    d_work integer := queuer.batch_is_work(NEW.status, NEW.retry_at)::int
                      - queuer.batch_is_work(OLD.status, OLD.retry_at)::int;
    mid_changed boolean := (NEW.submitted AND NEW.status IS NULL)
                           IS DISTINCT FROM (OLD.submitted AND OLD.status IS NULL);
BEGIN
    IF d_work = 0 AND NOT mid_changed THEN
        RETURN NULL;
    END IF;
    -- (the statement's updates are all done when a row trigger fires: the
    -- batches read here are as the statement left them)
    UPDATE queuer.service_id_claims c
       SET n_out = c.n_out - d_work,
           submitting = CASE WHEN mid_changed
                             THEN EXISTS (SELECT 1 FROM queuer.batches b
                                           WHERE b.service_id = NEW.service_id
                                             AND b.submitted AND b.status IS NULL)
                             ELSE c.submitting END,
           has_work = c.has_work OR (c.claimant IS NULL AND d_work > 0),
           head_priority = CASE WHEN c.claimant IS NULL AND NOT c.has_work AND d_work > 0
                                THEN NEW.priority ELSE c.head_priority END
     WHERE c.service_id = NEW.service_id;
    IF d_work > 0 THEN
        PERFORM queuer.claims_wake(ARRAY[NEW.service_id]::text[]);
    END IF;
    RETURN NULL;
END
$fn$;

-- (the workers' mark and outcome set queuer.batches_counted before their
-- first row is updated: 0032)
DROP TRIGGER batches_claims_update ON queuer.batches;
CREATE TRIGGER batches_claims_update AFTER UPDATE ON queuer.batches
    FOR EACH ROW
    WHEN (current_setting('queuer.batches_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION queuer.claims_follow_batch_update();
