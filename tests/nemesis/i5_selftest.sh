#!/usr/bin/env bash
# Self-test of the nemesis's I5 check (nemesis.i5 in tests/nemesis/schema.sql):
# on a private PostgreSQL with the queuer schema, a scripted history of claim
# changes and worker writes is built step by step, and after each step every
# I5 counter must have exactly the expected value. It shows the check passes
# a correct history and catches each kind of fencing failure it claims to:
# an epoch going down, a holder change without a bump, two holders of one
# epoch, a write at an epoch its writer was never granted, and a write that
# commits after the next epoch began (a transaction held open across a
# takeover).
set -u -o pipefail

root=${QW_SOURCE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${QW_BUILD_ROOT:-$root/build}
: "${QUEUER_BIN:=$build/queuer}"
[ -x "$QUEUER_BIN" ] || { echo "i5_selftest: missing $QUEUER_BIN (build first)" >&2; exit 2; }
# shellcheck source=tests/lib/cluster.sh
. "$root/tests/lib/cluster.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/qw-i5.XXXXXX") || exit 2
helper=""
cleanup() {
    local rc=$?
    [ -n "$helper" ] && kill "$helper" 2>/dev/null
    qw_pg_stop immediate
    if [ "$rc" = 0 ]; then
        rm -rf "$dir"
    else
        echo "i5_selftest: FAILED; files kept in $dir" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

QW_PG_CONF_EXTRA="track_commit_timestamp = on" qw_pg_start "$dir/pg" || exit 2
QUEUER_DATABASE_CONNINFO=$QW_PG_CONNINFO "$QUEUER_BIN" migrate >"$dir/migrate.log" 2>&1 || {
    cat "$dir/migrate.log" >&2
    exit 2
}
qw_psql -f "$root/tests/nemesis/schema.sql" >"$dir/schema.log" 2>&1 || { cat "$dir/schema.log" >&2; exit 2; }

svc='abcde-fghij::ab12'
failures=0

# expect STEP "epochs_only_grow epoch_per_holder writer_held_epoch no_stale_write"
expect() {
    local got
    got=$(qw_sql "SELECT string_agg(violations::text, ' ' ORDER BY ord)
                    FROM (SELECT violations, CASE name WHEN 'epochs_only_grow' THEN 1
                                                      WHEN 'epoch_per_holder' THEN 2
                                                      WHEN 'writer_held_epoch' THEN 3
                                                      ELSE 4 END AS ord FROM nemesis.i5) x")
    if [ "$got" = "$2" ]; then
        echo "ok: $1 ($got)"
    else
        echo "FAIL: $1: expected I5 counters '$2', got '$got'" >&2
        failures=$((failures + 1))
    fi
}

# claim HOLDER EPOCH: one committed change of the service's claim.
claim() {
    local holder=$1 epoch=$2
    if [ "$holder" = NULL ]; then
        qw_sql "UPDATE queuer.service_id_claims SET claimant = NULL, expiry_1 = NULL, expiry_2 = NULL,
                       claim_epoch = $epoch WHERE service_id = '$svc'" >/dev/null
    else
        qw_sql "UPDATE queuer.service_id_claims SET claimant = '$holder', claim_epoch = $epoch,
                       expiry_1 = now() + interval '1 s', expiry_2 = now() + interval '3 s'
                 WHERE service_id = '$svc'" >/dev/null
    fi
}

# write WRITER EPOCH: one committed history row, as a worker writes it.
write() {
    qw_sql "INSERT INTO queuer.batch_history (batch_id, service_id, from_status, to_status,
                                              instance_id, claim_epoch, detail)
            VALUES (repeat('a', 128), '$svc', NULL, 'Submitting', '$1', $2, 'selftest')" >/dev/null
}

qw_sql "INSERT INTO queuer.service_id_claims (service_id) VALUES ('$svc')" >/dev/null

# A correct history: w1 holds epoch 1, frees it (2), w2 takes it (3).
claim w1 1
write w1 1
claim NULL 2
claim w2 3
write w2 3
write w2 3
expect "a correct history passes" "0 0 0 0"

# A transaction of w2 opened at epoch 3 commits after epoch 4 and 5 began.
mkfifo "$dir/helper.fifo"
psql -X -q -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" <"$dir/helper.fifo" >"$dir/helper.out" 2>&1 &
helper=$!
exec 3>"$dir/helper.fifo"
echo "BEGIN; INSERT INTO queuer.batch_history (batch_id, service_id, to_status, instance_id, claim_epoch)
      VALUES (repeat('b', 128), '$svc', 'Pending', 'w2', 3);" >&3
qw_wait_sql 10 "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction'
                                AND query LIKE 'INSERT INTO queuer.batch_history%')" || exit 2
claim NULL 4
claim w1 5
echo "COMMIT;" >&3
exec 3>&-
wait "$helper" || { cat "$dir/helper.out" >&2; exit 2; }
helper=""
expect "a write committed after the next epoch began is stale" "0 0 0 1"
n=$(qw_sql "SELECT count(*) FROM nemesis.stale_writes WHERE instance_id = 'w2' AND claim_epoch = 3
              AND next_holder IS NULL")
if [ "$n" = 1 ]; then
    echo "ok: nemesis.stale_writes names it"
else
    echo "FAIL: nemesis.stale_writes shows $n rows for it" >&2
    failures=$((failures + 1))
fi

# A write at an epoch its writer never held (w2 at 5, which is w1's).
write w2 5
expect "a write at another holder's epoch" "0 0 1 1"

# The holder changes without a bump.
claim w3 5
expect "a holder change without an epoch bump" "1 0 1 1"

# The epoch goes down, back to 5's neighbour 4, for a new holder: epoch 4
# now has two holders (NULL, then w4).
claim w4 4
expect "an epoch that goes down, and an epoch with two holders" "2 1 1 1"

if [ "$failures" != 0 ]; then
    echo "i5_selftest: $failures check(s) failed" >&2
    exit 1
fi
echo "i5_selftest: all checks passed"
