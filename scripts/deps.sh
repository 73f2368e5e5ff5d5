#!/usr/bin/env bash
# Installs the Debian 12 packages queuer needs to build, test and demo.
# Runs apt-get only when something is missing. Needs root (or sudo).
set -euo pipefail

packages=(
    build-essential pkg-config meson ninja-build python3 clang-format
    postgresql-15 postgresql-client-15 libpq-dev
    libconfig-dev libcmocka-dev libcurl4-openssl-dev libjansson-dev
    libprotobuf-c-dev protobuf-c-compiler libmicrohttpd-dev
    procps iproute2 util-linux curl
    docker-compose python3-yaml faketime
)

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
echo "deps.sh: installing ${missing[*]}" >&2
# queuer runs its own private clusters; the package's default cluster is not needed.
$sudo mkdir -p /etc/postgresql-common
if [ ! -f /etc/postgresql-common/createcluster.conf ]; then
    echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.conf >/dev/null
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
