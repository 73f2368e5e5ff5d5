-- 0040: workers read what holds back vacuum.
--
-- Every worker looks at queuer.snapshot_holders every 10 s and publishes
-- the oldest snapshot past its thresholds on /metrics
-- (queuer_vacuum_held_back, queuer_vacuum_held_back_xids,
-- queuer_vacuum_held_back_seconds) and in its log (db.vacuum_held_back,
-- db.vacuum_released), so alerting on the workers sees a transaction left
-- open without anyone running `queuer status`. The view shows sessions'
-- roles, application names and states, which pg_stat_activity shows every
-- role anyway; how long another role's transaction has been open stays
-- visible only to members of pg_read_all_stats.

GRANT SELECT ON queuer.snapshot_holders TO queuer_worker;
