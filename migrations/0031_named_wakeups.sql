-- 0031: an insert wakes each holder with the services it gave work, named.
--
-- The counters trigger woke the holder of more than eight services given
-- work by one statement (queuer.enqueue_rows(), a bulk load) with "*":
-- read all your claims, fetch every service you hold. An application that
-- enqueued 75 batches per queuer.enqueue_rows() call over 1,000 services
-- made each of four workers do that at each of its 20 calls a second. The trigger now names
-- every service in notifications of up to 7,900 bytes each, as many as
-- the holder needs, so a worker fetches only the services named, and
-- notes as new the claims the insert gave it. A holder with more than
-- sixteen notifications' worth (some 6,000 services) still gets "*", one
-- notification: a bound on what one statement sends one holder. What the
-- trigger counts and whom it wakes is unchanged.

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
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT n.service_id, n.priority,
               queuer.batch_is_work(n.status, n.retry_at)::int
                   - queuer.batch_is_work(o.status, o.retry_at)::int AS d_work,
               n.submitted AND n.status IS NULL AS mid_now,
               o.submitted AND o.status IS NULL AS mid_before,
               (SELECT count(*) FROM new_rows) AS k
          INTO one FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id LIMIT 1;
        IF one.k = 1 THEN
            UPDATE queuer.service_id_claims c
               SET n_out = c.n_out - one.d_work,
                   submitting = one.mid_now OR (c.submitting AND NOT one.mid_before),
                   has_work = c.has_work OR (c.claimant IS NULL AND one.d_work > 0),
                   head_priority = CASE WHEN c.claimant IS NULL AND NOT c.has_work
                                         AND one.d_work > 0
                                        THEN one.priority ELSE c.head_priority END
             WHERE c.service_id = one.service_id
               AND (one.d_work <> 0
                    OR c.submitting <> (one.mid_now OR (c.submitting AND NOT one.mid_before)));
            IF one.d_work > 0 THEN
                touched := ARRAY[one.service_id];
            END IF;
        ELSIF one.k > 1 THEN
            WITH up AS (
                UPDATE queuer.service_id_claims c
                   SET n_out = c.n_out - s.d_open,
                       submitting = s.mid_now OR (c.submitting AND NOT s.mid_before),
                       has_work = c.has_work OR (c.claimant IS NULL AND s.d_open > 0),
                       head_priority = CASE WHEN c.claimant IS NULL AND NOT c.has_work
                                             AND s.d_open > 0
                                            THEN s.priority ELSE c.head_priority END
                  FROM (SELECT n.service_id,
                               sum(queuer.batch_is_work(n.status, n.retry_at)::int
                                   - queuer.batch_is_work(o.status, o.retry_at)::int) AS d_open,
                               max(n.priority) AS priority,
                               bool_or(n.submitted AND n.status IS NULL) AS mid_now,
                               bool_or(o.submitted AND o.status IS NULL) AS mid_before
                          FROM new_rows n JOIN old_rows o ON o.batch_id = n.batch_id
                         GROUP BY n.service_id) s
                 WHERE c.service_id = s.service_id
                   AND (s.d_open <> 0
                        OR c.submitting <> (s.mid_now OR (c.submitting AND NOT s.mid_before)))
                RETURNING c.service_id, s.d_open
            )
            SELECT array_agg(u.service_id) INTO touched FROM up u WHERE u.d_open > 0;
        END IF;
    ELSE
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
    -- Wake the holders of the services given work, on their own channels:
    -- "<service>:<epoch>" items separated by spaces, in notifications of
    -- at most 7,900 bytes (PostgreSQL takes less than 8,000), as many as
    -- each holder needs; "*" instead, one
    -- notification, for a holder that would need more than sixteen (read
    -- your claims, fetch them all). Delivered when the transaction
    -- commits. A fresh snapshot: it sees a claim another transaction took
    -- while this one waited on the row, and so wakes the real holder.
    IF touched IS NOT NULL THEN
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
                                  WHERE c.service_id = ANY (touched)
                                    AND c.claimant IS NOT NULL) n) p
                  GROUP BY p.claimant, p.parts, CASE WHEN p.parts > 16 THEN 0 ELSE p.part END) x
           JOIN queuer.instances i ON i.instance_id = x.claimant;
    END IF;
    RETURN NULL;
END
$fn$;
