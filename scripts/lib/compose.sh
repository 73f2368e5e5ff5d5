# shellcheck shell=bash
# The docker-compose.yml cluster, end to end: `scripts/cluster.sh
# compose-up | compose-down | compose ARGS...` (sourced by scripts/cluster.sh
# and by tests/compose/run.sh; it defines qwk_* functions only).
#
#   qwk_up      installs docker.io and the compose tool from Debian when they
#               are missing, starts dockerd when no engine answers (and
#               remembers that it did), picks the images (the official
#               debian:12, debian:12-slim and postgres:15 when a registry
#               serves them; otherwise local stand-ins built from Debian's
#               archive, see qwk_local_images), creates the secrets, builds
#               the queuer image, starts the stack and waits until every
#               service is healthy and `migrate` has completed.
#   qwk_down    removes the stack with its network and volumes, and stops
#               dockerd when this library started it and nobody else uses it.
#   qwk_compose runs `docker compose` (v2) or `docker-compose` (v1) on the
#               stack with the settings qwk_up chose.
#
# Environment (all optional):
#   QUEUER_COMPOSE_DIR      state and secrets of the stack (.cluster/compose)
#   QUEUER_COMPOSE_PROJECT  compose project name (default: what compose derives
#                           from the project directory, so a plain
#                           `docker compose` there addresses the same stack)
#   QUEUER_COMPOSE_FILES    extra compose files, colon-separated (the tests' override)
#   QUEUER_COMPOSE_TOOL     v1 or v2 to choose; default v2 when `docker compose` works
#   QUEUER_IMAGE            tag of the queuer image (queuer:local)
#   QUEUER_POSTGRES_IMAGE   PostgreSQL image; set, it is used as it is
#   QUEUER_COMPOSE_CACHE    where the Debian base tarball is kept (/var/cache/queuer-compose)
#   QUEUER_DEBIAN_MIRROR    archive for debootstrap (http://deb.debian.org/debian)
#
# The engine this library starts has its own address pool in the benchmark
# range 198.19.0.0/16 and leaves the host's firewall and forwarding alone
# (--iptables=false): containers reach each other on their bridge, the host
# reaches published ports, and builds use the host's network for apt. It is
# shared: every stack and test registers under QWK_STATE_DIR/users (one file
# per compose project, holding the pid that is starting it, or "stack" once
# it runs), and the engine is stopped only when no registered stack is left,
# no registered process is alive and no container runs.

QWK_ROOT=${QWK_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
QWK_STATE_DIR=/run/queuer-compose
[ "$(id -u)" = 0 ] || QWK_STATE_DIR=${TMPDIR:-/tmp}/queuer-compose-$(id -u)
QWK_CACHE_DIR=${QUEUER_COMPOSE_CACHE:-/var/cache/queuer-compose}
QWK_MIRROR=${QUEUER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Local stand-ins, named so they are never mistaken for the official images.
QWK_LOCAL_BASE=queuer-local/debian:12-minbase
QWK_LOCAL_POSTGRES=queuer-local/postgres:15

qwk_log() {
    printf 'compose: %s\n' "$*" >&2
}

qwk_die() {
    qwk_log "$*"
    return 1
}

# ---- packages and tools -----------------------------------------------------

# qwk_as_root CMD...: runs CMD as root (sudo when we are not root).
qwk_as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

# qwk_apt PACKAGE...: installs the Debian packages that are missing.
qwk_apt() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    qwk_log "installing ${missing[*]} from Debian"
    qwk_as_root apt-get update -qq &&
        qwk_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" >/dev/null
}

# Sets QWK_COMPOSE_CMD to the compose tool, installing Debian's when none is there.
qwk_tools() {
    if ! command -v dockerd >/dev/null && ! docker version --format '{{.Server.Version}}' \
        >/dev/null 2>&1; then
        qwk_apt docker.io || return 1
    fi
    local want=${QUEUER_COMPOSE_TOOL:-}
    if [ "$want" != v1 ] && docker compose version >/dev/null 2>&1; then
        QWK_COMPOSE_CMD=(docker compose)
        return 0
    fi
    [ "$want" != v2 ] || qwk_die "QUEUER_COMPOSE_TOOL=v2 but 'docker compose' does not work" ||
        return 1
    command -v docker-compose >/dev/null || qwk_apt docker-compose || return 1
    QWK_COMPOSE_CMD=(docker-compose)
}

# ---- the engine ---------------------------------------------------------------

qwk_engine_answers() {
    docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# qwk_locked CMD...: runs CMD holding the engine lock (registrations, start, stop).
qwk_locked() {
    mkdir -p "$QWK_STATE_DIR/users" || return 1
    (
        flock -w 600 9 || { qwk_log "cannot take the lock $QWK_STATE_DIR/lock"; exit 1; }
        "$@"
    ) 9>"$QWK_STATE_DIR/lock"
}

# True when dockerd runs and was started by this library.
qwk_engine_ours() {
    local pid
    pid=$(cat "$QWK_STATE_DIR/dockerd.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

qwk_engine_start() {
    qwk_engine_answers && return 0
    if qwk_engine_ours; then
        qwk_die "dockerd (pid $(cat "$QWK_STATE_DIR/dockerd.pid")) runs but does not answer;" \
            "see $QWK_STATE_DIR/dockerd.log"
        return 1
    fi
    command -v dockerd >/dev/null || { qwk_die "dockerd is not installed"; return 1; }
    [ "$(id -u)" = 0 ] || { qwk_die "no Docker engine answers; starting one needs root"; return 1; }
    local bridge_existed=0
    ip link show docker0 >/dev/null 2>&1 && bridge_existed=1
    echo "$bridge_existed" >"$QWK_STATE_DIR/bridge_existed"
    qwk_log "starting dockerd (log $QWK_STATE_DIR/dockerd.log)"
    # setsid -f: the engine outlives this script and its process group; it
    # writes its own pid file, which also marks it as ours.
    rm -f "$QWK_STATE_DIR/dockerd.pid"
    setsid -f dockerd --pidfile "$QWK_STATE_DIR/dockerd.pid" \
        --iptables=false --ip-forward=false --ip-masq=false \
        --bip 198.19.255.1/24 --default-address-pool base=198.19.0.0/17,size=24 \
        >>"$QWK_STATE_DIR/dockerd.log" 2>&1 </dev/null 9>&- # not the lock
    local i
    for i in $(seq 1 120); do
        qwk_engine_answers && return 0
        [ "$i" -lt 10 ] || qwk_engine_ours || break
        sleep 0.5
    done
    tail -n 20 "$QWK_STATE_DIR/dockerd.log" >&2
    qwk_engine_stop_ours
    qwk_die "dockerd did not come up"
}

# True when someone still needs the engine: a registered stack, a registered
# process that is alive, or any running container.
qwk_engine_in_use() {
    local f what
    for f in "$QWK_STATE_DIR"/users/*; do
        [ -f "$f" ] || continue
        what=$(cat "$f")
        if [ "$what" = stack ] || kill -0 "$what" 2>/dev/null; then
            return 0
        fi
        rm -f "$f" # a process that died without unregistering
    done
    [ -n "$(docker ps -q 2>/dev/null)" ]
}

qwk_engine_stop_ours() {
    qwk_engine_ours || { rm -f "$QWK_STATE_DIR/dockerd.pid"; return 0; }
    local pid i
    pid=$(cat "$QWK_STATE_DIR/dockerd.pid")
    qwk_log "stopping dockerd (pid $pid), which compose-up started"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        qwk_log "dockerd did not stop within 30 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if [ "$(cat "$QWK_STATE_DIR/bridge_existed" 2>/dev/null)" = 0 ]; then
        ip link del docker0 2>/dev/null || true
    fi
    rm -f "$QWK_STATE_DIR/bridge_existed"
}

# qwk_engine_acquire NAME: registers NAME (this process) and makes sure an
# engine answers.
qwk_engine_acquire() {
    qwk_locked qwk__acquire "$1"
}
qwk__acquire() {
    echo "$$" >"$QWK_STATE_DIR/users/$1"
    qwk_engine_start || { rm -f "$QWK_STATE_DIR/users/$1"; return 1; }
}

# qwk_engine_mark NAME stack|PID: what keeps NAME's registration alive.
qwk_engine_mark() {
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
    qwk_locked sh -c 'echo "$2" >"$1"' sh "$QWK_STATE_DIR/users/$1" "$2"
}

# qwk_engine_release NAME: unregisters NAME; stops the engine when we
# started it and nobody needs it any more.
qwk_engine_release() {
    qwk_locked qwk__release "$1"
}
qwk__release() {
    rm -f "$QWK_STATE_DIR/users/$1"
    qwk_engine_ours || return 0
    if qwk_engine_in_use; then
        qwk_log "dockerd keeps running: other stacks or containers use it"
        return 0
    fi
    qwk_engine_stop_ours
}

# ---- images -----------------------------------------------------------------

# qwk_image_present IMAGE [PULL]: the image is here (or, with PULL, could be pulled).
qwk_image_present() {
    docker image inspect "$1" >/dev/null 2>&1 && return 0
    [ "${2:-}" = pull ] || return 1
    timeout 300 docker pull -q "$1" >/dev/null 2>&1
}

# Sets QWK_DEBIAN, QWK_DEBIAN_SLIM and QUEUER_POSTGRES_IMAGE: the official
# images when they are here or a registry serves them, else local stand-ins.
qwk_images() {
    local official=1 img
    for img in debian:12 debian:12-slim ${QUEUER_POSTGRES_IMAGE:-postgres:15}; do
        qwk_image_present "$img" pull || { official=0; break; }
    done
    if [ "$official" = 1 ]; then
        QWK_DEBIAN=debian:12 QWK_DEBIAN_SLIM=debian:12-slim
        QUEUER_POSTGRES_IMAGE=${QUEUER_POSTGRES_IMAGE:-postgres:15}
        qwk_log "images: the official debian:12, debian:12-slim and $QUEUER_POSTGRES_IMAGE"
        return 0
    fi
    if [ -n "${QUEUER_POSTGRES_IMAGE:-}" ] && [ "$QUEUER_POSTGRES_IMAGE" != postgres:15 ] &&
        ! qwk_image_present "$QUEUER_POSTGRES_IMAGE" pull; then
        qwk_die "QUEUER_POSTGRES_IMAGE=$QUEUER_POSTGRES_IMAGE is neither here nor pullable"
        return 1
    fi
    qwk_log "no registry serves $img: building local stand-ins from Debian's archive"
    qwk_local_images || return 1
    QWK_DEBIAN=$QWK_LOCAL_BASE QWK_DEBIAN_SLIM=$QWK_LOCAL_BASE
    if [ -z "${QUEUER_POSTGRES_IMAGE:-}" ] || [ "$QUEUER_POSTGRES_IMAGE" = postgres:15 ]; then
        QUEUER_POSTGRES_IMAGE=$QWK_LOCAL_POSTGRES
    fi
    qwk_log "images: $QWK_LOCAL_BASE (for debian:12 and debian:12-slim), $QUEUER_POSTGRES_IMAGE"
}

# qwk_build TAG CONTEXT LOG [BUILD-ARG...]: docker build with the host's
# network (the engine of qwk_engine_start gives containers no route out).
qwk_build() {
    local tag=$1 context=$2 log=$3 a args=()
    shift 3
    for a in "$@"; do
        args+=(--build-arg "$a")
    done
    if ! DOCKER_BUILDKIT=0 docker build --network host -t "$tag" "${args[@]}" "$context" \
        >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        qwk_die "building $tag failed (log $log)"
        return 1
    fi
}

# The Debian 12 base (debootstrap --variant=minbase, then docker import) and
# the PostgreSQL 15 stand-in built on it (docker/postgres). The root file
# system is kept as a tarball in QWK_CACHE_DIR, so a second machine state
# without the image (a wiped engine) imports it in seconds; debootstrap runs
# only on a clean machine (about two minutes).
qwk_local_images() {
    qwk_as_root mkdir -p "$QWK_CACHE_DIR" || return 1
    (
        flock -w 1200 9 || { qwk_log "cannot lock $QWK_CACHE_DIR"; exit 1; }
        qwk_local_base || exit 1
    ) 9>"$QWK_CACHE_DIR/lock" || return 1
    qwk_build "$QWK_LOCAL_POSTGRES" "$QWK_ROOT/docker/postgres" "$QWK_CACHE_DIR/postgres-build.log" \
        "BASE_IMAGE=$QWK_LOCAL_BASE"
}

qwk_local_base() {
    qwk_image_present "$QWK_LOCAL_BASE" && return 0
    local tar=$QWK_CACHE_DIR/debian-12-minbase.tar
    if [ ! -s "$tar" ]; then
        qwk_apt debootstrap || return 1
        local dir
        dir=$(mktemp -d "$QWK_CACHE_DIR/rootfs.XXXXXX") || return 1
        qwk_log "debootstrap --variant=minbase bookworm from $QWK_MIRROR (a few minutes, once)"
        if ! debootstrap --variant=minbase bookworm "$dir" "$QWK_MIRROR" \
            >"$QWK_CACHE_DIR/debootstrap.log" 2>&1; then
            tail -n 20 "$QWK_CACHE_DIR/debootstrap.log" >&2
            rm -rf "$dir"
            qwk_die "debootstrap failed (log $QWK_CACHE_DIR/debootstrap.log)"
            return 1
        fi
        # The same suites as the official image: updates and security fixes too.
        cat >"$dir/etc/apt/sources.list" <<EOF
deb $QWK_MIRROR bookworm main
deb $QWK_MIRROR bookworm-updates main
deb ${QWK_MIRROR%/debian}/debian-security bookworm-security main
EOF
        rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb
        tar -C "$dir" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
        local rc=$?
        rm -rf "$dir"
        [ "$rc" = 0 ] || { qwk_die "cannot write $tar"; return 1; }
    fi
    qwk_log "importing $tar as $QWK_LOCAL_BASE"
    docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' "$tar" "$QWK_LOCAL_BASE" \
        >/dev/null
}

# ---- the stack ----------------------------------------------------------------

# Sets QWK_DIR, QWK_PROJECT, QUEUER_SECRETS_DIR and QUEUER_IMAGE (kept from
# the environment when set there).
qwk_settings() {
    QWK_DIR=${QUEUER_COMPOSE_DIR:-$QWK_ROOT/.cluster/compose}
    QUEUER_SECRETS_DIR=${QUEUER_SECRETS_DIR:-$QWK_DIR}
    QUEUER_IMAGE=${QUEUER_IMAGE:-queuer:local}
    # compose's own default: the directory's name, lower case, [a-z0-9_-] only
    local name=${QUEUER_COMPOSE_PROJECT:-${COMPOSE_PROJECT_NAME:-$(basename "$QWK_ROOT")}}
    name=$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]' | tr -cd 'a-z0-9_-')
    QWK_PROJECT=$name
    export QUEUER_SECRETS_DIR QUEUER_IMAGE
}

# Writes (or reads back) what qwk_up chose, so later commands address the
# same stack with the same images.
qwk_save() {
    cat >"$QWK_DIR/stack.env" <<EOF
QWK_PROJECT='$QWK_PROJECT'
QUEUER_IMAGE='$QUEUER_IMAGE'
QUEUER_POSTGRES_IMAGE='${QUEUER_POSTGRES_IMAGE:-}'
QUEUER_DEBIAN_IMAGE='${QWK_DEBIAN:-}'
QUEUER_DEBIAN_SLIM_IMAGE='${QWK_DEBIAN_SLIM:-}'
QUEUER_SECRETS_DIR='$QUEUER_SECRETS_DIR'
QUEUER_COMPOSE_FILES='${QUEUER_COMPOSE_FILES:-}'
QUEUER_PG_PORT='${QUEUER_PG_PORT:-}'
QUEUER_SIM_PORT='${QUEUER_SIM_PORT:-}'
QWK_COMPOSE_CMD=(${QWK_COMPOSE_CMD[*]})
EOF
}

qwk_load() {
    qwk_settings
    [ -f "$QWK_DIR/stack.env" ] || return 1
    # shellcheck disable=SC1091
    . "$QWK_DIR/stack.env"
    export QUEUER_IMAGE QUEUER_POSTGRES_IMAGE QUEUER_SECRETS_DIR QUEUER_COMPOSE_FILES
    # (`compose build` then uses the base images compose-up chose)
    [ -z "$QUEUER_DEBIAN_IMAGE" ] || export QUEUER_DEBIAN_IMAGE QUEUER_DEBIAN_SLIM_IMAGE
    [ -z "$QUEUER_PG_PORT" ] || export QUEUER_PG_PORT
    [ -z "$QUEUER_SIM_PORT" ] || export QUEUER_SIM_PORT
}

# qwk_compose ARGS...: the compose tool on this stack.
qwk_compose() {
    local files=(-f "$QWK_ROOT/docker-compose.yml") f extra=()
    IFS=: read -ra extra <<<"${QUEUER_COMPOSE_FILES:-}"
    for f in "${extra[@]}"; do
        files+=(-f "$f")
    done
    "${QWK_COMPOSE_CMD[@]}" "${files[@]}" --project-directory "$QWK_ROOT" -p "$QWK_PROJECT" "$@"
}

# qwk_containers: ids of the stack's containers.
qwk_containers() {
    docker ps -aq --filter "label=com.docker.compose.project=$QWK_PROJECT"
}

# qwk_wait_healthy SECS: waits until every container of the stack that has a
# health check is healthy, and every one-shot (restart "no") exited 0.
qwk_wait_healthy() {
    local secs=$1 deadline=$((SECONDS + $1)) c bad svc state health code policy
    while :; do
        bad=
        for c in $(qwk_containers); do
            read -r svc state health code policy < <(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}} {{.HostConfig.RestartPolicy.Name}}' "$c" 2>/dev/null) ||
                continue
            case "$state/$health/${policy:-no}" in
            exited/none/no)
                [ "$code" = 0 ] || { qwk_die "service $svc exited with code $code"; return 1; } ;;
            running/healthy/* | running/none/*) ;;
            *) bad="$bad $svc:$state/$health" ;;
            esac
        done
        [ -n "$(qwk_containers)" ] || bad=" (no containers)"
        [ -z "$bad" ] && return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            qwk_die "not healthy after ${secs} s:$bad"
            return 1
        fi
        sleep 1
    done
}

qwk_up() {
    local t0=$SECONDS
    qwk_settings
    qwk_tools || return 1
    mkdir -p "$QWK_DIR" && chmod 700 "$QWK_DIR"
    qwk_engine_acquire "$QWK_PROJECT" || return 1
    # From here on the registration keeps the engine up; keep it as a stack
    # (so compose-down cleans up) whatever happens below.
    qwk_save
    qwk_images || { qwk_engine_mark "$QWK_PROJECT" stack; return 1; }
    export QUEUER_POSTGRES_IMAGE
    qwk_save
    "$QWK_ROOT/scripts/cluster.sh" compose-secrets "$QUEUER_SECRETS_DIR" >/dev/null
    qwk_log "building $QUEUER_IMAGE (log $QWK_DIR/build.log)"
    qwk_build "$QUEUER_IMAGE" "$QWK_ROOT" "$QWK_DIR/build.log" "DEBIAN_IMAGE=$QWK_DEBIAN" \
        "DEBIAN_SLIM_IMAGE=$QWK_DEBIAN_SLIM" || { qwk_engine_mark "$QWK_PROJECT" stack; return 1; }
    qwk_engine_mark "$QWK_PROJECT" stack
    qwk_log "starting project $QWK_PROJECT with ${QWK_COMPOSE_CMD[*]}"
    qwk_compose up -d --no-build >"$QWK_DIR/up.log" 2>&1 || {
        cat "$QWK_DIR/up.log" >&2
        qwk_die "compose up failed; scripts/cluster.sh compose-down removes what started"
        return 1
    }
    qwk_wait_healthy 240 || {
        qwk_compose ps >&2 || true
        qwk_compose logs --tail 20 >&2 || true
        qwk_die "scripts/cluster.sh compose-down removes the stack"
        return 1
    }
    qwk_log "project $QWK_PROJECT is up and healthy after $((SECONDS - t0)) s"
}

qwk_down() {
    if ! qwk_load; then
        qwk_log "no stack recorded in $QWK_DIR"
        qwk_engine_release "$QWK_PROJECT"
        return 0
    fi
    if qwk_engine_answers; then
        qwk_compose down -v --remove-orphans >"$QWK_DIR/down.log" 2>&1 || {
            cat "$QWK_DIR/down.log" >&2
            qwk_die "compose down failed"
            return 1
        }
    fi
    rm -f "$QWK_DIR/stack.env"
    qwk_engine_release "$QWK_PROJECT"
}

# qwk_status: the services with their state, health and addresses.
qwk_status() {
    local c
    for c in $(qwk_containers); do
        docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}: {{.State.Status}}{{if .State.Health}} ({{.State.Health.Status}}){{end}}{{range $n, $e := .NetworkSettings.Networks}} {{$e.IPAddress}}{{end}}' "$c"
    done
}

# qwk_main CMD ARGS...: the compose-* commands of scripts/cluster.sh.
qwk_main() {
    local cmd=$1
    shift
    case $cmd in
    compose-up)
        qwk_up || return 1
        qwk_status
        cat <<EOF
The stack runs (project $QWK_PROJECT). Next:
  scripts/cluster.sh compose ps|logs|exec|run ...   (${QWK_COMPOSE_CMD[*]} on this stack)
  scripts/cluster.sh compose-down                   (removes it, volumes too)
EOF
        ;;
    compose-down) qwk_down ;;
    compose)
        qwk_load || { qwk_die "no stack recorded in $QWK_DIR (scripts/cluster.sh compose-up)"; return 1; }
        qwk_compose "$@"
        ;;
    esac
}
