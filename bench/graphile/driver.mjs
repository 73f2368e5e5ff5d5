// Driver of the graphile-worker comparison run (called by bench/run.sh).
//
//   node driver.mjs migrate    install graphile-worker's schema
//   node driver.mjs run        run a worker pool until SIGTERM/SIGINT
//
// Environment: GW_DATABASE_URL (required; e.g.
// postgres://postgres@/bench?host=/path/to/socket-dir), GW_SIM_URL (run),
// GW_CONCURRENCY (jobs run at once per process, default 32),
// GW_MAX_POOL (PostgreSQL connections per process, default concurrency + 2),
// GW_POLL_MS (pollInterval, default 2000: new jobs arrive by LISTEN/NOTIFY
// and every finished job fetches the next one, so polling only matters for
// retries scheduled in the future), GW_LOCAL_QUEUE (localQueue.size: jobs
// fetched and locked per query, default 1 = off), GW_COMPLETE_BATCH_MS
// (completeJobBatchDelay, default -1 = off). See docs/performance of
// graphile-worker for the last two.
import { Logger, run, runMigrations } from "graphile-worker";
import { makeSubmitBatch } from "./submit_batch.mjs";

function env(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === "") {
    if (fallback === undefined) {
      console.error(`driver.mjs: ${name} is not set`);
      process.exit(2);
    }
    return fallback;
  }
  return v;
}

function envInt(name, fallback) {
  const v = Number.parseInt(env(name, String(fallback)), 10);
  if (!Number.isFinite(v) || v < 1) {
    console.error(`driver.mjs: ${name} must be a positive integer`);
    process.exit(2);
  }
  return v;
}

// Warnings and errors only: graphile-worker logs every job at info level,
// which the queuer workers (log.level info) do not, so it would cost CPU that
// is not the queue's.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`level=${level} ${message}`);
});

const command = process.argv[2];
const connectionString = env("GW_DATABASE_URL");

if (command === "migrate") {
  await runMigrations({ connectionString, logger });
} else if (command === "run") {
  const concurrency = envInt("GW_CONCURRENCY", 32);
  const localQueue = envInt("GW_LOCAL_QUEUE", 1);
  const completeBatchMs = Number.parseInt(env("GW_COMPLETE_BATCH_MS", "-1"), 10);
  const runner = await run({
    taskList: { submit_batch: makeSubmitBatch(env("GW_SIM_URL")) },
    logger,
    preset: {
      worker: {
        connectionString,
        concurrentJobs: concurrency,
        maxPoolSize: envInt("GW_MAX_POOL", concurrency + 2),
        pollInterval: envInt("GW_POLL_MS", 2000),
        // size > 1: one query locks up to `size` jobs of distinct queues
        localQueue: { size: localQueue > 1 ? localQueue : -1 },
        completeJobBatchDelay: Number.isFinite(completeBatchMs) ? completeBatchMs : -1,
      },
    },
    // graphile-worker installs its own SIGTERM/SIGINT handlers: graceful stop
  });
  console.log(`event=graphile.started pid=${process.pid} concurrency=${concurrency} local_queue=${localQueue}`);
  await runner.promise;
  const u = process.resourceUsage();
  console.log(
    `event=graphile.summary pid=${process.pid} cpu_user_ms=${Math.round(u.userCPUTime / 1000)} ` +
      `cpu_sys_ms=${Math.round(u.systemCPUTime / 1000)} max_rss_kb=${u.maxRSS}`,
  );
} else {
  console.error("usage: node driver.mjs migrate|run");
  process.exit(2);
}
