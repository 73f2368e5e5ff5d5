-- 0025: autovacuum settings for the queue tables. Every batch is updated
-- three or more times on its way to a final status (status sits in the
-- predicates of the partial indexes, so no update is heap-only) and pruned
-- later, and the history takes several rows per batch: PostgreSQL's
-- defaults (vacuum once a fifth of a table is dead, throttled by the cost
-- delay) let the batches table grow without bound under a steady load. A
-- ten-minute soak at about 3,000 batches/s (bench/soak_xmin.sh, pruning
-- every minute) grew it to 1.7 GB with the defaults and held it near
-- 0.8 GB with these (bench/PERFORMANCE.md, "A transaction held open").
-- Vacuum starts at 1 % dead rows (and at 5 % rows inserted since the last
-- one, so pages are marked all-visible early) and runs without the cost
-- delay on these tables; the small hot tables of claims and ingest state
-- keep their thresholds and lose the delay too. An operator who wants
-- PostgreSQL's defaults back runs ALTER TABLE ... RESET (...) with these
-- names (docs/OPERATIONS.md, "Table growth and long transactions").
ALTER TABLE queuer.batches SET (autovacuum_vacuum_scale_factor = 0.01,
                                autovacuum_vacuum_insert_scale_factor = 0.05,
                                autovacuum_analyze_scale_factor = 0.05,
                                autovacuum_vacuum_cost_delay = 0);
ALTER TABLE queuer.batch_history SET (autovacuum_vacuum_scale_factor = 0.01,
                                      autovacuum_vacuum_insert_scale_factor = 0.05,
                                      autovacuum_vacuum_cost_delay = 0);
ALTER TABLE queuer.service_id_claims SET (autovacuum_vacuum_cost_delay = 0);
ALTER TABLE queuer.service_ingest SET (autovacuum_vacuum_cost_delay = 0);
