#!/usr/bin/env bash
# The files operators install next to queuer, checked by the tools that read
# them:
#  - etc/queuer.service: `systemd-analyze verify` (with ExecStart pointing at
#    the built binary) reports nothing, and the unit has the signal contract
#    of docs/OPERATIONS.md (SIGTERM stop, SIGHUP reload);
#  - docs/prometheus/alerts.yml: `promtool check rules`, then the
#    `promtool test rules` cases of tests/ops/alerts_test.yml (each alert
#    fires on bad series, none on healthy ones);
#  - docs/grafana/queuer.json: valid JSON, a dashboard with Prometheus panels
#    (the series it uses are checked against /metrics by a unit test).
# scripts/deps.sh --test installs systemd and prometheus; where a tool is
# missing the check says so and the test is skipped (77) when nothing ran.
set -u -o pipefail
root=${QW_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
queuer=${QUEUER_BIN:-$root/build/queuer}
dir=$(mktemp -d "${TMPDIR:-/tmp}/qw-service-files.XXXXXX")
trap 'rm -rf "$dir"' EXIT
ran=0
fail() { echo "ops_service_files: FAIL: $*" >&2; exit 1; }

if command -v systemd-analyze >/dev/null; then
    unit=$root/etc/queuer.service
    grep -qx 'KillSignal=SIGTERM' "$unit" || fail "queuer.service: no KillSignal=SIGTERM"
    # shellcheck disable=SC2016 # $MAINPID is systemd's, written literally in the unit
    grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" || fail "queuer.service: no SIGHUP reload"
    grep -q '^ExecStart=/usr/local/bin/queuer run ' "$unit" || fail "queuer.service: ExecStart is not queuer run"
    sed "s#/usr/local/bin/queuer#$queuer#g" "$unit" >"$dir/queuer.service"
    out=$(cd "$dir" && systemd-analyze verify --man=no ./queuer.service 2>&1)
    rc=$?
    if [ "$rc" != 0 ] || [ -n "$out" ]; then
        fail "systemd-analyze verify (exit $rc): $out"
    fi
    # The check itself can fail: a misspelt signal is reported.
    sed 's/^KillSignal=SIGTERM/KillSignal=SIGTREM/' "$dir/queuer.service" >"$dir/bad.service"
    out=$(cd "$dir" && systemd-analyze verify --man=no ./bad.service 2>&1)
    [ -n "$out" ] || fail "systemd-analyze verify did not notice KillSignal=SIGTREM"
    echo "ops_service_files: etc/queuer.service verified by $(systemd-analyze --version | head -n 1)"
    ran=$((ran + 1))
else
    echo "ops_service_files: skipped the unit check: systemd-analyze not installed (scripts/deps.sh --test)"
fi

if command -v promtool >/dev/null; then
    promtool check rules "$root/docs/prometheus/alerts.yml" || fail "promtool check rules"
    (cd "$root/tests/ops" && promtool test rules alerts_test.yml) || fail "promtool test rules"
    ran=$((ran + 1))
else
    echo "ops_service_files: skipped the alert rules: promtool not installed (Debian package prometheus)"
fi

python3 - "$root/docs/grafana/queuer.json" <<'PY' || fail "docs/grafana/queuer.json"
import json, sys
d = json.load(open(sys.argv[1]))
panels = d["panels"]
assert d["title"] and d["uid"] and len(panels) >= 8, "too few panels"
for p in panels:
    assert p["datasource"]["type"] == "prometheus", p["title"]
    assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
print(f"ops_service_files: docs/grafana/queuer.json: {len(panels)} panels")
PY
ran=$((ran + 1))
[ "$ran" -gt 1 ] || exit 77
echo "ops_service_files: OK"
