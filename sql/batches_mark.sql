-- Queue: marks the chosen batches as being submitted (submitted = true,
-- status cleared), fenced by the claim (claimant, epoch, expiry_1 > now(),
-- row locked; the claim is held while its own expiry_1 or our instance
-- lease is in the future) and by the state the queuer saw
-- (compare-and-set), and by the service's state (the batch is its oldest
-- open one, and the locked claim row names no batch in flight: migration
-- 0043), so it is safe at READ COMMITTED and needs no fetch before it; a
-- parked batch
-- (Delayed with retry_at = infinity: it waits for an operator) is never
-- marked. The statement sets the claim row's `submitting` itself
-- (maintenance decides soft expiry from it) and names the marked batch in
-- its `in_flight`: a marked batch was work and stays work, so nothing else
-- on the row changes; it sets
-- queuer.batches_counted for its transaction so that the counters trigger
-- on batches does not do it again (migration 0032; the mark is its
-- transaction's last statement). Appends a 'Submitting' history row with
-- the reason. Returns the batches marked with their payloads and
-- priorities; a batch not returned must not be submitted.
-- $1 instance, $2 batch ids, $3 service ids, $4 epochs, $5 statuses seen ('' = none),
-- $6 our incarnation (a later registration of our instance_id fences us out).
WITH q AS (
    -- (the setting, before any batch is updated: migration 0032)
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[])
        AS q(batch_id, service_id, epoch, seen)
     WHERE set_config('queuer.batches_counted', 'on', true) IS NOT NULL
), fence AS MATERIALIZED (
    -- The claims, locked: a takeover committed after this transaction
    -- began is seen (READ COMMITTED re-checks the newest row version) and
    -- its services are left alone; a claim row another transaction has
    -- locked (a takeover in progress, an operator action) is skipped, not
    -- waited for: its batch is not marked now and the worker fetches the
    -- service again. FOR NO KEY UPDATE, as `cnt` below writes `submitting`
    -- and `in_flight`. Each claim row is read by one backward probe of the
    -- primary key that stops at the first version this statement sees:
    -- one page a claim however many versions an open snapshot keeps. A
    -- claim row changed after this statement's snapshot was taken is left
    -- alone, as a locked one is, so `cnt` writes the version locked here
    -- by its address (sql/outcomes_record.sql, `fence`, says why).
    SELECT c.tid, c.service_id, c.claim_epoch, c.open_from, c.in_flight
      FROM (SELECT DISTINCT q.service_id COLLATE "C" AS service_id FROM q
             ORDER BY 1) s
     CROSS JOIN LATERAL (
           SELECT c.ctid AS tid, c.service_id, c.claim_epoch, c.open_from, c.in_flight
             FROM queuer.service_id_claims c
            WHERE c.service_id >= s.service_id AND c.service_id <= s.service_id
              AND c.claimant IS NOT DISTINCT FROM $1
              AND greatest(c.expiry_1,
                           (SELECT i.lease_1 FROM queuer.instances i
                             WHERE i.instance_id = $1)) > now()
              AND EXISTS (SELECT 1 FROM queuer.instances i
                           WHERE i.instance_id = $1 AND i.incarnation = $6::bigint)
            ORDER BY c.service_id DESC
            LIMIT 1
              FOR NO KEY UPDATE OF c SKIP LOCKED) c
     WHERE c.tid = (SELECT v.ctid FROM queuer.service_id_claims v
                     WHERE v.service_id >= s.service_id AND v.service_id <= s.service_id
                     ORDER BY v.service_id DESC
                     LIMIT 1)
), upd AS (
    UPDATE queuer.batches b
       SET submitted = true, status = NULL, status_at = now()
      FROM q JOIN fence f ON f.service_id = q.service_id AND f.claim_epoch = q.epoch
     WHERE b.batch_id = q.batch_id
       AND b.service_id = q.service_id
       -- no batch of the service in flight, as the locked claim row has it
       -- (the newest committed value, whatever the snapshot below shows)
       AND f.in_flight IS NULL
       AND NOT b.submitted
       AND b.status IS NOT DISTINCT FROM nullif(q.seen, '')
       AND queuer.batch_is_work(b.status, b.retry_at) -- (not parked)
       -- The service's oldest open batch: the one-round serial choice's
       -- pick from a fetch of the service now. A choice made from the
       -- fetch before it passes this check and the one on in_flight above
       -- unless the service changed since (an operator's retry of an older
       -- Invalid batch committed in between: the younger one is then left
       -- alone, where it used to be marked); a batch named by a wake-up is
       -- marked without a fetch, and the two checks are what make that
       -- safe. This one is one probe of batches_open's range for the
       -- service (OFFSET 0 keeps it a per-row probe whatever the table held
       -- when the plan was made), starting at the service's open_from
       -- (migrations 0041 and 0042) as the locked claim row has it: no
       -- batch below it is open now, whatever this statement's snapshot
       -- still shows open there.
       AND NOT EXISTS (SELECT 1 FROM queuer.batches h
                        WHERE h.service_id = b.service_id
                          AND (h.status IS NULL OR h.status IN ('Pending', 'Unknown', 'Delayed'))
                          AND h.created_at >= coalesce(f.open_from, '-infinity'::timestamptz)
                          AND h.created_at <= b.created_at
                          AND (h.created_at < b.created_at OR h.batch_id < b.batch_id)
                       OFFSET 0)
    RETURNING b.batch_id, b.service_id, b.payload, b.attempts, q.epoch, q.seen, b.last_error,
              b.priority
), hist AS (
    INSERT INTO queuer.batch_history
           (batch_id, service_id, from_status, to_status, instance_id, claim_epoch, detail)
    SELECT upd.batch_id, upd.service_id, nullif(upd.seen, ''), 'Submitting', $1, upd.epoch,
           queuer.submit_reason(nullif(upd.seen, ''), upd.attempts, upd.last_error)
      FROM upd
), cnt AS (
    -- (one batch a service at most: two of one service cannot both be its
    -- oldest open batch in the statement's snapshot)
    UPDATE queuer.service_id_claims c
       SET submitting = true, in_flight = upd.batch_id
      FROM upd JOIN fence f ON f.service_id = upd.service_id
     WHERE c.ctid = f.tid
       AND c.service_id = upd.service_id
)
SELECT upd.batch_id, upd.service_id, upd.epoch, upd.attempts, upd.payload, upd.priority FROM upd
