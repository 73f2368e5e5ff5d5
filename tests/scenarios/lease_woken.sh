#!/usr/bin/env bash
# Scenario: a worker woken again and again renews its lease at most every
# half cycle, and still at least once a cycle. A notification on
# queuer_claims (a registration, claims given back) wakes a claims cycle;
# a lease renewal is an UPDATE of the instance row with a synchronous
# commit, so renewing in front of every woken cycle would cost one write
# per wake-up and per worker.
#
# Here one worker with a 2 s cycle gets 60 queuer_claims notifications over
# about 3 s, each in its own transaction. A trigger on queuer.instances
# records each renewal (an update of lease_1). The worker must run a claims
# cycle for most of the notifications (its debug log) while renewing the
# lease about once a second, and never go more than a cycle (plus a
# margin for the cycle itself) without a renewal.
# shellcheck source=tests/scenarios/lib_scenario.sh
. "$(dirname "$0")/lib_scenario.sh"

N=60
sc_begin lease_woken
sc_pg_start
sc_sim_start

qw_sql "CREATE TABLE scenario.lease_renewals (at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION scenario.note_renewal() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS \$\$
BEGIN
    INSERT INTO scenario.lease_renewals DEFAULT VALUES;
    RETURN NULL;
END
\$\$;
CREATE TRIGGER note_renewal AFTER UPDATE OF lease_1 ON queuer.instances
    FOR EACH ROW WHEN (NEW.instance_id = 'w1') EXECUTE FUNCTION scenario.note_renewal();" ||
    sc_fail "cannot install the renewal trigger"

sc_worker_start w1 QUEUER_WORKER_CYCLE_MS=2000 QUEUER_WORKER_LEASE_MS=10000 \
    QUEUER_WORKER_HARD_EXPIRY_MS=20000 QUEUER_LOG_LEVEL=debug
sc_wait_registered 15 w1
sc_wait_log w1 10 'claims\.done'
sleep 1

cycles_before=$(grep -c 'claims\.done' "$SC_DIR/w1.log")
t0=$(sc_db_now)
for _ in $(seq 1 $N); do
    echo "NOTIFY queuer_claims;"
    echo "SELECT pg_sleep(0.05);"
done | psql -X -q -o /dev/null -v ON_ERROR_STOP=1 "$QW_PG_CONNINFO" ||
    sc_fail "cannot send the notifications"
t1=$(sc_db_now)
sleep 0.5
cycles=$(($(grep -c 'claims\.done' "$SC_DIR/w1.log") - cycles_before))
window=$(qw_sql "SELECT round(extract(epoch FROM '$t1'::timestamptz - '$t0'::timestamptz), 2)")
renewals=$(qw_sql "SELECT count(*) FROM scenario.lease_renewals
                    WHERE at BETWEEN '$t0'::timestamptz AND '$t1'::timestamptz")
echo "window ${window}s: $cycles claims cycles, $renewals lease renewals"

sc_check_num "the notifications woke claims cycles" "$cycles" ">=" $((N / 2))
# at most one renewal per half cycle (1 s), and one more at either end
sc_check_num "lease renewals, at most one per half cycle" "$renewals" "<=" \
    "$(awk -v w="$window" 'BEGIN { print int(w) + 2 }')"
sc_check_sql "the lease was renewed at least once a cycle (2 s, 0.5 s margin)" t \
    "SELECT coalesce(max(gap) <= interval '2.5 seconds', false)
       FROM (SELECT at - lag(at) OVER (ORDER BY at) AS gap
               FROM scenario.lease_renewals
              WHERE at BETWEEN '$t0'::timestamptz - interval '3 seconds'
                           AND '$t1'::timestamptz) g" \
    "SELECT at FROM scenario.lease_renewals ORDER BY at"
if grep -q 'claims\.lease_lapsed' "$SC_DIR/w1.log"; then
    sc_fail "w1 logged claims.lease_lapsed"
fi
sc_worker_stop w1 15
