// graphile-worker task of the benchmark's comparison run: submits one batch
// to the scabbard ledger (scabbard-sim) and long-polls its status until it is
// final, the same two requests per batch a queuer worker makes.
//
// Job payload: {"service_id": "circuit::service", "batch_id": "<128 hex>",
// "payload_hex": "<hex of the BatchList>"}. The job is added to the named
// queue service_id, so graphile-worker runs the batches of a service one at a
// time, in the order they were added.
//
// The first status read goes out when the batch is likely final, as a
// queuer worker's does: a read that waits is answered at once when the batch
// is final already, and otherwise only at the ledger's next look (scabbard
// looks every 100 ms), so a read sent at the 202 learns of a commit 20 ms
// later 100 ms after the 202. The delay is learnt the same way (the
// staircase of src/submitter/nodes.c): counting the first reads that went
// out with the delay now, and late ones that went out later still, it goes
// a quarter (at least 5 ms; it doubles, at least 12.5 ms, until a first
// read has come in time) up as soon as more than one, and more than one in
// 50, came late (not final, or answered a look or more after the read); it
// comes a sixteenth (at least 1 ms) down once 11 were answered, at most one
// in 50 late, and it has held for its own length and a look and a quarter
// (after a step up, to 1 ms above the delay the late reads had, and only
// after eight holds there further); it stays within a look.
//
// 429 and 5xx answers are retried inside the job (growing, jittered delay)
// rather than by failing it: a failed job is rescheduled into the future and
// the queue's next job could overtake it, which would break the order.

const FINAL = new Set(["Committed", "Valid", "Invalid"]);
const STATUS_WAIT_S = 10; // long-poll wait=N of batch_statuses, as queuer's default
const RETRY_BASE_MS = 100;
const RETRY_MAX_MS = 10000;
const LOOK_EVERY_MS = 100; // scabbard's (and scabbard-sim's) look at waiting reads
const FIRST_LOOK_MAX_MS = LOOK_EVERY_MS; // a read sent a look after the 202 is at most a look late
const AT_ONCE_MS = LOOK_EVERY_MS; // an answer this quick did not wait for a look

const LOOK_READS = 11;
const LOOK_EARLY_IN = 50;
// shared by the process's jobs, as one worker's nodes share theirs
const LOOK_EDGE_HOLDS = 8;
const look = { delay: 0, since: Date.now(), reads: 0, late: 0, inTime: false, edge: 0, edgeHolds: 0 };

function setLook(delay) {
  look.delay = Math.min(FIRST_LOOK_MAX_MS, Math.max(0, delay));
  look.since = Date.now();
  look.reads = 0;
  look.late = 0;
}

function noteFirstLook(sentMs, late) {
  const current = Math.floor(look.delay);
  if (!late) look.inTime = true;
  if (sentMs < current || (sentMs > current && !late)) return; // says nothing about the delay now
  look.reads++;
  if (late) look.late++;
  const allowed = Math.floor(look.reads / LOOK_EARLY_IN);
  if (look.late > 1 + allowed) {
    look.edge = Math.max(look.delay, sentMs);
    look.edgeHolds = 0;
    setLook(
      look.delay +
        (look.inTime ? Math.max(5, look.delay / 4) : Math.max(LOOK_EVERY_MS / 8, look.delay)),
    );
  } else if (
    look.late <= allowed &&
    look.reads >= LOOK_READS &&
    Date.now() - look.since >= current + LOOK_EVERY_MS * 1.25
  ) {
    const down = Math.max(1, look.delay / 16);
    const aboveEdge = look.edge + 1;
    if (look.delay - down >= aboveEdge || look.edge === 0) setLook(look.delay - down);
    else if (look.delay > aboveEdge) setLook(aboveEdge);
    else if (++look.edgeHolds < LOOK_EDGE_HOLDS) setLook(look.delay);
    else {
      look.edge = 0; // it tries the edge again
      setLook(look.delay - down);
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function backoffMs(attempt) {
  const ceiling = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** Math.min(attempt, 20));
  return Math.random() * ceiling;
}

export function makeSubmitBatch(simUrl) {
  return async function submitBatch(payload, helpers) {
    const { service_id: serviceId, batch_id: batchId, payload_hex: payloadHex } = payload;
    const sep = serviceId.indexOf("::");
    if (sep < 0) throw new Error(`bad service_id ${serviceId}`);
    const base =
      `${simUrl}/scabbard/${encodeURIComponent(serviceId.slice(0, sep))}` +
      `/${encodeURIComponent(serviceId.slice(sep + 2))}`;
    const body = Buffer.from(payloadHex, "hex");
    // No abort signal on the requests: helpers.abortSignal is shared by the
    // whole pool and fetch() would add a listener to it per request. A job
    // ends within one long-poll (STATUS_WAIT_S) once its batch is accepted.

    for (let attempt = 0; ; attempt++) {
      const res = await fetch(`${base}/batches`, {
        method: "POST",
        headers: { "content-type": "application/octet-stream" },
        body,
      });
      await res.arrayBuffer();
      if (res.status === 202) break;
      if (res.status === 429 || res.status >= 500) {
        await sleep(backoffMs(attempt));
        continue;
      }
      throw new Error(`POST ${batchId.slice(0, 16)}: HTTP ${res.status}`);
    }

    const statusUrl = `${base}/batch_statuses?ids=${batchId}&wait=${STATUS_WAIT_S}`;
    const delay = Math.floor(look.delay);
    if (delay > 0) await sleep(delay);
    for (let attempt = 0, first = true; ; first = false) {
      const asked = Date.now();
      const res = await fetch(statusUrl);
      if (res.status !== 200) {
        await res.arrayBuffer();
        await sleep(backoffMs(attempt++));
        continue;
      }
      const list = await res.json();
      const type = list?.[0]?.status?.statusType;
      if (first) {
        noteFirstLook(delay, !(FINAL.has(type) && Date.now() - asked < AT_ONCE_MS));
      }
      if (FINAL.has(type)) {
        if (type === "Invalid") helpers.logger.warn(`batch ${batchId.slice(0, 16)} Invalid`);
        return;
      }
    }
  };
}
