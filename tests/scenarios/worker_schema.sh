#!/usr/bin/env bash
# Scenario: `queuer run` refuses to work on a database it does not match
# (docs/DESIGN.md §3: it refuses any schema version but its own): without
# the queuer schema, with an older one and with a newer one it exits
# non-zero with a message that says what to do, and leaves no trace (no
# instance row). On an unreachable database it exits 69 (EX_UNAVAILABLE,
# src/cli/cli.h) with a message naming the server, and no secret in it.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

sc_begin worker_schema
sc_pg_start
# The binary's newest migration: what `queuer migrate` just recorded.
LATEST=$(qw_sql "SELECT max(version) FROM queuer.schema_migrations")
# the version before it (numbers may have gaps: some are reserved for
# migrations not merged yet)
PREVIOUS=$(qw_sql "SELECT coalesce(max(version), 0) FROM queuer.schema_migrations WHERE version < $LATEST")
sc_check_num "queuer migrate recorded a schema version" "$LATEST" ">=" 1
PASSWORD=sc-secret-$RANDOM$RANDOM

conninfo_for() {
    echo "host=$QW_PG_DIR/sock port=5432 user=postgres dbname=$1"
}

# run_queuer NAME CONNINFO: `queuer run` with a bound; sets RUN_RC, RUN_OUT.
run_queuer() {
    RUN_OUT="$SC_DIR/$1.out"
    env QUEUER_DATABASE_CONNINFO="$2" QUEUER_DATABASE_PASSWORD="$PASSWORD" \
        QUEUER_DATABASE_CONNECT_TIMEOUT_S=5 QUEUER_DLT_URL=http://127.0.0.1:9 \
        QUEUER_ADMIN_LISTEN=off QUEUER_WORKER_INSTANCE_ID="$1" \
        timeout -k 5 30 "$QUEUER_BIN" run >"$RUN_OUT" 2>&1
    RUN_RC=$?
    sed 's/^/   | /' "$RUN_OUT"
}

# expect_refusal NAME PATTERN: non-zero exit (not the timeout's 124), and
# the output matches PATTERN (extended regex).
expect_refusal() {
    if [ "$RUN_RC" = 124 ] || [ "$RUN_RC" = 137 ]; then
        sc_fail "$1: queuer run did not exit within 30 s"
    fi
    sc_check_num "$1: queuer run exits non-zero" "$RUN_RC" "!=" 0
    grep -Eq -- "$2" "$RUN_OUT" || sc_fail "$1: the message does not match /$2/"
    echo "ok: $1: the message says /$2/"
    if grep -q -- "$PASSWORD" "$RUN_OUT"; then
        sc_fail "$1: the database password appears in the output"
    fi
}

qw_psql -c "CREATE DATABASE noschema" -c "CREATE DATABASE older" -c "CREATE DATABASE newer" ||
    sc_fail "cannot create the databases"
for db in older newer; do
    QUEUER_DATABASE_CONNINFO=$(conninfo_for $db) "$QUEUER_BIN" migrate >"$SC_DIR/migrate-$db.out" 2>&1 ||
        sc_fail "queuer migrate of $db failed"
done
# An older schema: the newest migration not applied yet (with a single
# migration this is a database whose schema history is empty).
QW_DB_CONNINFO=$(conninfo_for older) qw_sql \
    "DELETE FROM queuer.schema_migrations WHERE version = (SELECT max(version) FROM queuer.schema_migrations)"
# Its version now (numbers may leave gaps: reserved ones).
PREVIOUS=$(QW_DB_CONNINFO=$(conninfo_for older) qw_sql \
    "SELECT coalesce(max(version), 0) FROM queuer.schema_migrations")
QW_DB_CONNINFO=$(conninfo_for newer) qw_sql \
    "INSERT INTO queuer.schema_migrations (version, name) VALUES ($LATEST + 1, 'from-the-future.sql')"

run_queuer noschema "$(conninfo_for noschema)"
expect_refusal "no schema" "no queuer schema.*queuer migrate"

run_queuer older "$(conninfo_for older)"
expect_refusal "older schema" "queuer migrate"
if [ "$LATEST" -gt 1 ]; then
    expect_refusal "older schema" "version $PREVIOUS .*needs $LATEST"
fi

run_queuer newer "$(conninfo_for newer)"
expect_refusal "newer schema" "version $((LATEST + 1)).*newer"

QW_DB_CONNINFO=$(conninfo_for older) sc_check_sql "the refused worker left no instance row (older)" 0 \
    "SELECT count(*) FROM queuer.instances"
QW_DB_CONNINFO=$(conninfo_for newer) sc_check_sql "the refused worker left no instance row (newer)" 0 \
    "SELECT count(*) FROM queuer.instances"

# Unreachable: a socket directory with no server, and a closed TCP port.
run_queuer nosocket "host=$SC_DIR/no-such-dir port=5432 user=postgres dbname=postgres"
expect_refusal "unreachable (unix socket)" "$SC_DIR/no-such-dir"
sc_check "unreachable (unix socket): exit code 69 (database unreachable)" 69 "$RUN_RC"

run_queuer closedport "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=5"
expect_refusal "unreachable (closed port)" "127\.0\.0\.1.*(refused|failed)"
sc_check "unreachable (closed port): exit code 69 (database unreachable)" 69 "$RUN_RC"

# And the same binary does run on the migrated database.
sc_check_sql "no instance registered in the main database yet" 0 "SELECT count(*) FROM queuer.instances"
sc_sim_start
sc_worker_start ok
sc_wait_registered 15 ok
sc_worker_signal ok TERM
sc_worker_wait_exit ok 15
sc_check "a worker on the current schema starts and stops cleanly" 0 "$SC_RC"
