#!/usr/bin/env bash
# The README test command: installs what is needed (scripts/deps.sh --test),
# builds queuer with --werror, runs the whole suite (unit, integration,
# scenario, nemesis and hostile tests against private PostgreSQL clusters,
# the simulator and a hostile ledger, and the lint suite: formatting,
# QW_MUST_CHECK, transaction control, the shell scripts), then builds again with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs every suite but the
# scenario, compose, lint and model ones there (scenarios are whole-process,
# timing-bound runs; the nemesis suite covers the same processes under the
# sanitizers), then with ThreadSanitizer for the worker's threads (unit
# tests and suite 'tsan').
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh --test

total_ok=0
total_fail=0
total_skip=0

run_suite() {
    local dir=$1
    shift
    local out
    out=$(mktemp)
    set +e
    meson test -C "$dir" --print-errorlogs "$@" 2>&1 | tee "$out"
    local rc=${PIPESTATUS[0]}
    set -e
    local ok fail timeout skip log
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$out" | tail -1)
    fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$out" | tail -1)
    timeout=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$out" | tail -1)
    skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$out" | tail -1)
    total_ok=$((total_ok + ${ok:-0}))
    total_fail=$((total_fail + ${fail:-0} + ${timeout:-0}))
    total_skip=$((total_skip + ${skip:-0}))
    # the suite's log (testlog.txt, or testlog-<setup>.txt under --setup)
    log=$(sed -n 's/^Full log written to //p' "$out" | tail -1)
    # a skipped test says why on a "skipped: " line of its output
    if [ -n "$log" ]; then
        grep -h '^skipped: ' "$log" 2>/dev/null | sort -u || true
        not_passed "$dir" "${log%.txt}.json" >>"$failures"
    fi
    rm -f "$out"
    return "$rc"
}

# not_passed DIR JSON: a line for each test of the log that failed or ran out
# of time, with the last lines it printed (repeated at the very end of the
# run, so that the tail of the output names them)
not_passed() {
    python3 - "$1" "$2" <<'PY'
import json, sys
build, path = sys.argv[1], sys.argv[2]
try:
    lines = open(path).read().splitlines()
except OSError:
    sys.exit(0)
for line in lines:
    t = json.loads(line)
    if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    print("%s: %s %s after %.0f s; its last lines:" % (build, t["name"], t["result"], t["duration"]))
    for text in ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()[-25:]:
        print("    " + text)
PY
}

setup() {
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

status=0
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
setup build/ci --werror --buildtype=debugoptimized
meson compile -C build/ci
run_suite build/ci || status=1

setup build/asan --werror --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
meson compile -C build/asan
echo
echo "sanitizer pass: $(meson test -C build/asan --list --no-suite scenario --no-suite compose --no-suite lint --no-suite model 2>/dev/null | wc -l) of" \
    "$(meson test -C build/asan --list 2>/dev/null | wc -l) tests (all but the scenario, compose, lint and model suites)"
# (the compose suite runs release builds in containers, and the lint and
# model suites read only the sources: once is enough)
run_suite build/asan --setup=asan --no-suite scenario --no-suite compose --no-suite lint --no-suite model || status=1

setup build/tsan --werror --buildtype=debug -Db_sanitize=thread -Db_lundef=false
meson compile -C build/tsan
run_suite build/tsan --setup=tsan --suite unit --suite tsan || status=1

echo
if [ -s "$failures" ]; then
    echo "tests that did not pass:"
    cat "$failures"
fi
echo "${total_ok} passed, ${total_fail} failed, ${total_skip} skipped"
exit "$status"
