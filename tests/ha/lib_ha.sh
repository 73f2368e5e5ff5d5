# shellcheck shell=bash
# Shared by the tests in tests/ha/: the scenario harness, and the skip rule.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "${BASH_SOURCE[0]}")/../scenarios/lib_scenario.sh"

# ha_require_packages CMD...: installs the HA packages (scripts/ha.sh deps) and
# exits 77 (meson: skipped), saying why, when that fails or a CMD is missing.
ha_require_packages() {
    local out cmd ok=1
    out=$(mktemp) || exit 1
    "$SC_SOURCE_ROOT/scripts/ha.sh" deps >"$out" 2>&1 || ok=0
    for cmd in "$@"; do
        command -v "$cmd" >/dev/null || ok=0
    done
    if [ "$ok" = 0 ]; then
        echo "SKIP: the HA packages (patroni, etcd-server, pgbouncer) cannot be installed here:"
        tail -5 "$out"
        rm -f "$out"
        exit 77
    fi
    rm -f "$out"
}
