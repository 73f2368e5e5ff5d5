-- 0045: a claim row found by its newest version first.
--
-- Behind a snapshot held open, every version of a claim row stays, and one
-- that leaves its page gets an entry of its own in the primary key; a
-- lookup by equality reads them all, oldest first, with their pages. Those
-- entries sort by the versions' places in the table, and a version that
-- leaves its page goes to one at the end of the table, so read backwards
-- the newest come first, and a lookup that stops at the first version its
-- snapshot sees reads one page. Deduplication would merge a key's entries
-- into one posting list, which a backward scan still reads in ascending
-- order: it is turned off for this index (entries merged before stay so
-- until the index is rebuilt; new ones are kept apart). The workers' fence
-- and counters (sql/outcomes_record.sql, sql/batches_mark.sql) and the
-- loads' functions below read claim rows this way: a range that means
-- = (an equality would let the planner drop the order), backwards, at
-- most one row. The planner takes that path once the table's statistics
-- show more than a handful of pages; on a table of a few rows it may sort
-- instead, which reads every version as before. The one-batch enqueue
-- keeps its lookups by equality: a probe costs it more than it saves
-- while no snapshot is held (bench/PERFORMANCE.md).
ALTER INDEX queuer.service_id_claims_pkey SET (deduplicate_items = off);

-- Gives the services of a load work (as 0036): creates the
-- claim rows that do not exist yet, hands free services to live workers or
-- marks them as having work, and wakes their claimants. A service whose
-- claim row this statement's snapshot sees is left out before the insert,
-- whose own check for a conflicting row reads every version of it; the
-- insert still does nothing on a conflict with a row another load is
-- creating meanwhile. Free services are found by the newest version of
-- each row, and the updates run only when there are some, as before.
CREATE OR REPLACE FUNCTION queuer.claims_give_work(p_services text[], p_priorities integer[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, queuer, pg_temp AS $fn$
DECLARE
    ids text[];  -- the instances a free service may be given to
BEGIN
    INSERT INTO queuer.service_id_claims (service_id)
    SELECT s.service_id FROM unnest(p_services) s(service_id)
     WHERE (SELECT c.ctid FROM queuer.service_id_claims c
             WHERE c.service_id >= s.service_id AND c.service_id <= s.service_id
             ORDER BY c.service_id DESC LIMIT 1) IS NULL
     ORDER BY s.service_id COLLATE "C"
    ON CONFLICT DO NOTHING;
    IF EXISTS (SELECT 1 FROM unnest(p_services) s(service_id)
                WHERE (SELECT c.claimant IS NULL FROM queuer.service_id_claims c
                        WHERE c.service_id >= s.service_id AND c.service_id <= s.service_id
                        ORDER BY c.service_id DESC LIMIT 1)) THEN
        ids := queuer.claims_receivers(cardinality(p_services));
        IF ids IS NOT NULL THEN
            UPDATE queuer.service_id_claims c
               SET claimant = ids[1 + abs(hashtext(c.service_id)::bigint) % cardinality(ids)],
                   claim_epoch = c.claim_epoch + 1, expiry_1 = now(), expiry_2 = now()
             WHERE c.service_id = ANY (p_services) AND c.claimant IS NULL;
        ELSE
            UPDATE queuer.service_id_claims c
               SET has_work = true, head_priority = a.priority
              FROM unnest(p_services, p_priorities) a(service_id, priority)
             WHERE c.service_id = a.service_id AND c.claimant IS NULL AND NOT c.has_work;
        END IF;
    END IF;
    PERFORM queuer.claims_wake(p_services);
END
$fn$;

-- Wakes the claimants of the given services (as 0035): one notification
-- per claimant, naming its services and their epochs, in a fresh snapshot
-- (a claim taken meanwhile wakes its real holder), each claim row read
-- newest version first.
CREATE OR REPLACE FUNCTION queuer.claims_wake(p_services text[]) RETURNS void
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
                               FROM (SELECT DISTINCT u.service_id
                                       FROM unnest(p_services) u(service_id)) s
                              CROSS JOIN LATERAL (
                                    SELECT c.service_id, c.claimant, c.claim_epoch
                                      FROM queuer.service_id_claims c
                                     WHERE c.service_id >= s.service_id
                                       AND c.service_id <= s.service_id
                                     ORDER BY c.service_id DESC
                                     LIMIT 1) c
                              WHERE c.claimant IS NOT NULL) n) p
              GROUP BY p.claimant, p.parts, CASE WHEN p.parts > 16 THEN 0 ELSE p.part END) x
       JOIN queuer.instances i ON i.instance_id = x.claimant;
END
$fn$;
