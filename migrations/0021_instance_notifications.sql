-- 0021: whether LISTEN/NOTIFY wake-ups reach each worker.
--
-- A worker with worker.listen on tests at start, periodically and after
-- every reconnect of the connection it listens on that a NOTIFY it sends to
-- its own channel comes back (behind a transaction-pooling PgBouncer it does
-- not: LISTEN belongs to a server session the pool hands to others). Until a
-- later test succeeds it polls, as with worker.listen off. It reports the
-- state with its lease; queuer.instance_overview and `queuer status` show it.

ALTER TABLE queuer.instances ADD COLUMN notifications text
    CHECK (notifications IN ('delivered', 'not_delivered', 'off'));
COMMENT ON COLUMN queuer.instances.notifications IS
    'Wake-ups by LISTEN/NOTIFY, as the instance reports them with its lease: delivered (its '
    'last self-test NOTIFY came back), not_delivered (it did not, or the connection it listens '
    'on is lost: the instance polls every cycle meanwhile), off (worker.listen = false: it '
    'polls); NULL until its first lease renewal, or for a worker that does not report it.';

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
           cl.claims_lapsed,
           i.notifications
      FROM queuer.instances i
     CROSS JOIN LATERAL (
           SELECT count(*) FILTER (WHERE c.expiry_1 > now()) AS claims_held,
                  count(*) FILTER (WHERE c.expiry_1 <= now()) AS claims_lapsed
             FROM queuer.claims c
            WHERE c.claimant = i.instance_id) cl;
