#!/usr/bin/env bash
# Validates docker-compose.yml and the Dockerfile without a Docker engine, and
# checks that the compose topology stays in step with the local one
# (scripts/cluster.sh topology). "In step" means:
#   1. `docker-compose config` accepts the file (with generated secret files);
#   2. the services are postgres (image postgres:<the local PostgreSQL major>),
#      a one-shot migrate (`queuer migrate`, restart "no"), scabbard-sim, and
#      exactly as many `queuer run` workers as the local cluster starts;
#   3. healthchecks on postgres, scabbard-sim and every worker; workers wait
#      for migrate to complete and for a healthy simulator, migrate for a
#      healthy postgres;
#   4. every worker sets the same QUEUER_* variables as a local worker (names
#      of the per-deployment ones, names and values of the settings), with
#      distinct instance ids;
#   5. no secret is inline: no PASSWORD/TOKEN/SECRET variable in any service's
#      `environment`; they arrive through env files, each only where needed
#      (workers get the local secrets, the simulator no database password,
#      postgres no ledger token);
#   6. scabbard-sim runs with the same flags as locally (--listen aside; flags
#      that take a path compare by presence);
#   7. the Dockerfile builds on Debian 12 with scripts/deps.sh (the same
#      packages), copies every source directory the top-level meson.build
#      reads, and installs the programs the compose file runs;
#   8. no host port the stack publishes by default lies in Linux's ephemeral
#      range (32768-60999), where a client socket of the host can hold it.
set -euo pipefail

root=${QW_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

if command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    echo "compose_config: SKIP: neither docker-compose nor 'docker compose' is installed" \
         "(Debian package docker-compose; scripts/deps.sh)" >&2
    exit 77
fi
python3 -c 'import yaml' 2>/dev/null || {
    echo "compose_config: SKIP: python3-yaml is not installed" >&2
    exit 77
}

work=$(mktemp -d "${TMPDIR:-/tmp}/qw-compose.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. docker-compose config, with canary secrets
QWC_DIR=$work/cluster "$root/scripts/cluster.sh" compose-secrets "$work/secrets" >/dev/null
if ! QUEUER_SECRETS_DIR=$work/secrets "${compose[@]}" -f "$root/docker-compose.yml" \
        --project-directory "$root" config >"$work/resolved.yml" 2>"$work/config.err"; then
    cat "$work/config.err" >&2
    echo "compose_config: FAIL: docker-compose config rejects docker-compose.yml" >&2
    exit 1
fi
"$root/scripts/cluster.sh" topology >"$work/topology"

python3 - "$root" "$work" <<'PY'
import os, re, shlex, sys, yaml

root, work = sys.argv[1], sys.argv[2]
failures = []

def fail(msg):
    failures.append(msg)

with open(os.path.join(root, "docker-compose.yml")) as f:
    raw = yaml.safe_load(f)
with open(os.path.join(work, "resolved.yml")) as f:
    resolved = yaml.safe_load(f)

topo = {"sim_arg": [], "worker_setting": [], "worker_deployment": [], "worker_secret": []}
with open(os.path.join(work, "topology")) as f:
    for line in f:
        key, _, value = line.rstrip("\n").partition("=")
        if key in topo:
            topo[key].append(value)
        else:
            topo[key] = value
local_workers = int(topo["workers"])
settings = dict(s.split("=", 1) for s in topo["worker_setting"])
local_names = set(settings) | set(topo["worker_deployment"])

def env_of(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return env

def secrets_of(name):
    """Variables a service gets from its env files (our generated canaries)."""
    names = set()
    files = raw["services"][name].get("env_file") or []
    if isinstance(files, str):
        files = [files]
    for f in files:
        path = f.replace("${QUEUER_SECRETS_DIR:-.cluster/compose}", os.path.join(work, "secrets"))
        if not os.path.exists(path):
            fail(f"{name}: env_file {f} does not resolve to a generated secrets file")
            continue
        with open(path) as fh:
            names |= {l.split("=", 1)[0] for l in fh if "=" in l}
    return names

def command_of(svc):
    c = svc.get("command")
    return shlex.split(c) if isinstance(c, str) else list(c or [])

services = resolved["services"]
raw_services = raw["services"]

# 2. the services
workers = sorted(n for n, s in services.items() if command_of(s) == ["run"])
if len(workers) != local_workers:
    fail(f"{len(workers)} queuer run workers in compose, {local_workers} in scripts/cluster.sh")
for need in ("postgres", "migrate", "scabbard-sim"):
    if need not in services:
        fail(f"service {need} is missing")
if failures:
    print("\n".join("compose_config: FAIL: " + m for m in failures), file=sys.stderr)
    sys.exit(1)
pg_image = services["postgres"].get("image", "")
if not re.fullmatch(r"postgres:" + re.escape(topo["postgres_major"]) + r"(\.\d+)?(-\S+)?", pg_image):
    fail(f"postgres image {pg_image!r}, local clusters run PostgreSQL {topo['postgres_major']}")
mig = services["migrate"]
if command_of(mig) != ["migrate"]:
    fail(f"migrate runs {command_of(mig)}, expected ['migrate']")
if str(mig.get("restart", "no")) != "no":
    fail("migrate must be one-shot (restart: \"no\")")

# 3. healthchecks and start order
for n in ["postgres", "scabbard-sim"] + workers:
    if not services[n].get("healthcheck", {}).get("test"):
        fail(f"{n} has no healthcheck")
def cond(svc, dep):
    d = services[svc].get("depends_on") or {}
    return d.get(dep, {}).get("condition") if isinstance(d, dict) else None
if cond("migrate", "postgres") != "service_healthy":
    fail("migrate does not wait for a healthy postgres")
for w in workers:
    if cond(w, "migrate") != "service_completed_successfully":
        fail(f"{w} does not wait for migrate to complete")
    if cond(w, "scabbard-sim") != "service_healthy":
        fail(f"{w} does not wait for a healthy scabbard-sim")

# 4. worker environment
ids = set()
for w in workers:
    env = env_of(raw_services[w])
    names = {k for k in env if k.startswith("QUEUER_")}
    if names != local_names:
        fail(f"{w}: QUEUER_* variables differ from a local worker's: "
             f"only in compose {sorted(names - local_names)}, only local {sorted(local_names - names)}")
    for k, v in settings.items():
        if k in env and str(env[k]) != v:
            fail(f"{w}: {k}={env[k]} but scripts/cluster.sh sets {k}={v}")
    ids.add(env.get("QUEUER_WORKER_INSTANCE_ID"))
if len(ids) != len(workers) or None in ids:
    fail(f"workers need distinct QUEUER_WORKER_INSTANCE_ID values, got {sorted(map(str, ids))}")

# 5. secrets: never inline, each only where it is needed
secret_re = re.compile(r"PASSWORD|TOKEN|SECRET")
for n, s in raw_services.items():
    for k in env_of(s):
        if secret_re.search(k):
            fail(f"{n}: secret {k} is set inline in docker-compose.yml (use the env files)")
for w in workers:
    missing = set(topo["worker_secret"]) - secrets_of(w)
    if missing:
        fail(f"{w}: secrets {sorted(missing)} (given to local workers) are not in its env files")
    if "QUEUER_DATABASE_PASSWORD" not in secrets_of(w):
        fail(f"{w}: no QUEUER_DATABASE_PASSWORD in its env files")
if "QUEUER_DLT_TOKEN" not in secrets_of("scabbard-sim"):
    fail("scabbard-sim does not get QUEUER_DLT_TOKEN")
if secrets_of("scabbard-sim") & {"QUEUER_DATABASE_PASSWORD", "POSTGRES_PASSWORD"}:
    fail("scabbard-sim gets the database password; it needs only the ledger token")
if "QUEUER_DLT_TOKEN" in secrets_of("postgres"):
    fail("postgres gets the ledger token; it needs only its password")
if "POSTGRES_PASSWORD" not in secrets_of("postgres"):
    fail("postgres gets no POSTGRES_PASSWORD from its env files")

# 6. simulator flags
sim = services["scabbard-sim"]
argv = list(sim.get("entrypoint") or []) + command_of(sim)
text = " ".join(argv)
m = re.search(r"exec\s+scabbard-sim\s+(.*?)(?:$|&&|;)", text)
if not m:
    fail("scabbard-sim's entrypoint does not exec scabbard-sim")
    sim_args = []
else:
    sim_args = shlex.split(m.group(1).replace("$$", "$"))
def pairs(args):
    out, i = [], 0
    while i < len(args):
        flag = args[i]
        val = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        i += 2 if val is not None else 1
        if flag == "--listen":
            continue
        out.append((flag, val))
    return sorted(out)
local_pairs = pairs(topo["sim_arg"])
compose_pairs = pairs(sim_args)
def same(a, b):
    return a[0] == b[0] and (a[1] == b[1] or "<path>" in (a[1], b[1]))
if len(local_pairs) != len(compose_pairs) or not all(
        same(a, b) for a, b in zip(local_pairs, compose_pairs)):
    fail(f"scabbard-sim flags differ: compose {compose_pairs}, scripts/cluster.sh {local_pairs}")

# 7. the Dockerfile
with open(os.path.join(root, "Dockerfile")) as f:
    dockerfile = f.read()
# FROM ${ARG} takes the ARG's default (compose-up passes local stand-ins)
arg_defaults = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", dockerfile, re.M))
froms = [re.sub(r"\$\{(\w+)\}", lambda m: arg_defaults.get(m.group(1), m.group(0)), x)
         for x in re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)]
if not froms or not all(re.fullmatch(r"debian:12(-slim)?", x) for x in froms):
    fail(f"the Dockerfile must build on Debian 12, has FROM {froms}")
if not re.search(r"^RUN\s+.*scripts/deps\.sh", dockerfile, re.M):
    fail("the Dockerfile does not install the packages with scripts/deps.sh")
with open(os.path.join(root, "meson.build")) as f:
    meson = f.read()
copied = set(re.findall(r"^COPY\s+(?:--\S+\s+)?(\S+)\s", dockerfile, re.M))
for d in re.findall(r"^subdir\('([^']+)'\)", meson, re.M):
    if d not in copied:
        fail(f"the Dockerfile does not COPY {d}/, which meson.build reads")
for prog in ("queuer", "scabbard-sim", "qw-check", "queuer-gen"):
    if not re.search(r"/" + re.escape(prog) + r"\b", dockerfile):
        fail(f"the Dockerfile does not install {prog}")

# 8. published host ports
EPHEMERAL = range(32768, 61000)
published = []
for n, s in services.items():
    for p in s.get("ports") or []:
        if isinstance(p, dict):
            host = str(p.get("published", ""))
        else:
            parts = str(p).split(":")
            host = parts[-2] if len(parts) >= 2 else ""
        if host.isdigit():
            published.append(f"{n}:{host}")
            if int(host) in EPHEMERAL:
                fail(f"{n} publishes host port {host}, inside the ephemeral range 32768-60999")

if failures:
    print("\n".join("compose_config: FAIL: " + m for m in failures), file=sys.stderr)
    sys.exit(1)
print(f"compose_config: OK: {len(workers)} workers ({', '.join(workers)}), "
      f"{len(local_names)} QUEUER_* settings, sim flags {compose_pairs}, "
      f"secrets via env files only, host ports {published}")
PY
