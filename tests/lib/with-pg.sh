#!/usr/bin/env bash
# usage: with-pg.sh PROGRAM [ARGS...]
# Runs PROGRAM with a private PostgreSQL cluster of its own, started in a
# temporary directory (unix socket only) and stopped and removed afterwards.
# PROGRAM finds it through QW_TEST_CONNINFO.
set -u
here=$(dirname "$(realpath "$0")")
. "$here/cluster.sh"

base=${QW_TEST_TMPDIR:-${TMPDIR:-/tmp}}
dir=$(mktemp -d "$base/qwtest.XXXXXX")
cleanup() {
    qw_pg_stop immediate
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

qw_pg_start "$dir/pg" || exit 1
export QW_TEST_CONNINFO=$QW_PG_CONNINFO
export QW_TEST_PGDIR=$QW_PG_DIR
"$@"
