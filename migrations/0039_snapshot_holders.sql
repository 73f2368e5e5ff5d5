-- 0039: who holds back vacuum, in one view.
--
-- A transaction left open (a forgotten BEGIN, a long report at REPEATABLE
-- READ, a prepared transaction nobody finished, a standby's replication
-- slot with hot_standby_feedback) keeps every row version it may see, and
-- every lookup of a service then walks the versions its rows got since:
-- the workers slow down minute by minute while it stays open
-- (docs/OPERATIONS.md, "Table growth and long transactions").
-- queuer.snapshot_holders names what holds the oldest snapshots of this
-- database, and `queuer status` reports the oldest one that has been
-- held longer than the thresholds below.
--
-- How long a session's transaction has been open is visible to roles
-- that may read that session's activity (its own role, members of
-- pg_read_all_stats); for other sessions open_for is NULL and only the
-- number of transactions begun since its snapshot is known.

ALTER TABLE queuer.settings
    ADD COLUMN snapshot_held_after interval NOT NULL DEFAULT '5 minutes'
        CHECK (snapshot_held_after > interval '0'),
    ADD COLUMN snapshot_held_xids bigint NOT NULL DEFAULT 100000
        CHECK (snapshot_held_xids > 0);
COMMENT ON COLUMN queuer.settings.snapshot_held_after IS
    'queuer.snapshot_holders says a snapshot holds back vacuum (holds_back) once its transaction '
    'has been open this long (session override: SET queuer.snapshot_held_after).';
COMMENT ON COLUMN queuer.settings.snapshot_held_xids IS
    'queuer.snapshot_holders says a snapshot holds back vacuum (holds_back) when how long it has '
    'been open is not visible and at least this many transactions began after it (session '
    'override: SET queuer.snapshot_held_xids).';

-- Columns can only be added at the end of a view that others read.
CREATE OR REPLACE VIEW queuer.operator_thresholds AS
    SELECT coalesce(nullif(current_setting('queuer.instance_dead_after', true), '')::interval,
                    s.instance_dead_after) AS instance_dead_after,
           coalesce(nullif(current_setting('queuer.stuck_after', true), '')::interval,
                    s.stuck_after) AS stuck_after,
           coalesce(nullif(current_setting('queuer.stuck_attempts', true), '')::integer,
                    s.stuck_attempts) AS stuck_attempts,
           coalesce(nullif(current_setting('queuer.snapshot_held_after', true), '')::interval,
                    s.snapshot_held_after) AS snapshot_held_after,
           coalesce(nullif(current_setting('queuer.snapshot_held_xids', true), '')::bigint,
                    s.snapshot_held_xids) AS snapshot_held_xids
      FROM queuer.settings s;

-- What may hold back the removal of row versions in this database's
-- tables (PostgreSQL 14 and later): the sessions of this database, the
-- WAL senders (a standby's feedback applies to every database), the
-- transactions prepared in this database, and the replication slots
-- that keep a data xmin. A logical slot's catalog_xmin holds back the
-- system catalogs only and is not listed. The session reading the view
-- is left out: its own statement has a snapshot too.
CREATE VIEW queuer.snapshot_holders AS
    SELECT h.kind, h.pid, h.role, h.application, h.state, h.xids_behind, h.open_for,
           CASE WHEN h.open_for IS NOT NULL THEN h.open_for >= t.snapshot_held_after
                ELSE h.xids_behind >= t.snapshot_held_xids END AS holds_back
      FROM (SELECT 'session'::text AS kind, a.pid, a.usename::text AS role,
                   nullif(a.application_name, '') AS application,
                   coalesce(a.state, a.backend_type) AS state,
                   age(a.backend_xmin)::bigint AS xids_behind,
                   now() - a.xact_start AS open_for
              FROM pg_stat_activity a
             WHERE a.backend_xmin IS NOT NULL
               AND a.pid <> pg_backend_pid()
               AND (a.datname = current_database() OR a.backend_type = 'walsender')
            UNION ALL
            SELECT 'prepared', NULL, p.owner::text, p.gid, 'prepared',
                   age(p.transaction)::bigint, now() - p.prepared
              FROM pg_prepared_xacts p
             WHERE p.database = current_database()
            UNION ALL
            SELECT 'replication slot', s.active_pid, NULL, s.slot_name,
                   CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
                   age(s.xmin)::bigint, NULL
              FROM pg_replication_slots s
             WHERE s.xmin IS NOT NULL) h
     CROSS JOIN queuer.operator_thresholds t
     ORDER BY h.xids_behind DESC;
COMMENT ON VIEW queuer.snapshot_holders IS
    'What holds back vacuum in this database, oldest snapshot first: kind (session, prepared, '
    'replication slot), pid (session or slot user; NULL for a prepared transaction), role, '
    'application (application_name, the gid of a prepared transaction, the slot name), state, '
    'xids_behind (transactions begun since its snapshot), open_for (NULL when not visible to this '
    'role: grant pg_read_all_stats to see it), holds_back (open for at least snapshot_held_after, '
    'or at least snapshot_held_xids behind when open_for is not visible; '
    'queuer.operator_thresholds).';
GRANT SELECT ON queuer.snapshot_holders TO queuer_operator;
