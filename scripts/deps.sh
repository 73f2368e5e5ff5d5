#!/usr/bin/env bash
# Installs the Debian 12 packages queuer needs to build and run the demo;
# with --test also those only the test suite needs (scripts/test.sh passes
# it). Runs apt-get only when something is missing, and quietly: one line
# says what is installed, apt's own output goes to a log that is shown only
# when the install fails. Needs root (or sudo).
#
# usage: scripts/deps.sh [--test]
set -euo pipefail

packages=(
    build-essential pkg-config meson ninja-build python3 clang-format
    postgresql-15 postgresql-client-15 libpq-dev
    libconfig-dev libcmocka-dev libcurl4-openssl-dev libjansson-dev
    libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev
    procps iproute2 util-linux curl
)
# Only the tests use these: clock skew (nemesis), the compose file check,
# the `status --watch` screen test, the systemd unit check, the alert rules,
# the shell scripts' lint, the claims model check.
test_packages=(
    faketime docker-compose python3-yaml tmux systemd prometheus shellcheck spin
)

case ${1:-} in
--test) packages+=("${test_packages[@]}") ;;
'') ;;
-h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "deps.sh: unknown option $1 (try --help)" >&2; exit 64 ;;
esac

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
    sudo="sudo"
fi
echo "deps.sh: installing ${missing[*]} (apt-get; this takes a minute the first time)"
# queuer runs its own private clusters; the package's default cluster is not needed.
$sudo mkdir -p /etc/postgresql-common
if [ ! -f /etc/postgresql-common/createcluster.conf ]; then
    echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
# The tests need promtool from the prometheus package, not a Prometheus
# server: keep package scripts from starting services while installing
# (unless the machine already has such a policy, as containers do).
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    own_policy=1
fi
log=$(mktemp /tmp/queuer-deps.XXXXXX.log)
rc=0
{
    $sudo apt-get update -qq &&
        $sudo env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 NEEDRESTART_MODE=l \
            apt-get install -y -qq --no-install-recommends "${missing[@]}"
} >"$log" 2>&1 || rc=$?
[ "$own_policy" = 0 ] || $sudo rm -f "$policy"
if [ "$rc" != 0 ]; then
    cat "$log" >&2
    echo "deps.sh: apt-get failed (exit $rc); its output is above and in $log" >&2
    exit "$rc"
fi
rm -f "$log"
echo "deps.sh: installed"
