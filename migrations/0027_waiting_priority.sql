-- 0027: priority across workers when the ledger pushes back.
--
-- Each worker keeps its own ready queue in priority order, but the ledger's
-- room is shared: a worker with only low-priority batches, sending as fast
-- as its congestion window lets it, takes the room a batch of higher
-- priority held by another worker waits for. With its lease a worker now
-- reports the highest priority of its batches that waited for room at a
-- ledger node pushing back (its window shrunk by 429s or slow answers, or a
-- 429 pause) since its last renewal, and learns the highest such priority
-- of the other live workers: its own batches of lower priority then go at
-- most one at a time per node until no worker reports one.

ALTER TABLE queuer.instances ADD COLUMN waiting_priority integer;
COMMENT ON COLUMN queuer.instances.waiting_priority IS
    'The highest priority of the instance''s batches that waited for room at a ledger node '
    'pushing back (429s, slow answers) since its previous lease renewal, as it reported with '
    'its lease; NULL when none waited so (or a worker that does not report it). Other workers '
    'send their batches of lower priority one at a time per node while it is set.';
