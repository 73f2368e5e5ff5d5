#!/usr/bin/env bash
# Secrets never reach a log line or any output of queuer.
#
# The database password and the ledger token are unique canary strings,
# and both are really needed: the worker's login role has a SCRAM password
# that pg_hba.conf requires (a connection without it is refused first), and
# the simulator requires the bearer token (--token). A worker at log level
# debug drains a workload with them (so they were used on every path that
# connects or posts); then every way to get a secret wrong is tried: a wrong
# password, a wrong token (403s), secrets from files, a secret file with
# loose permissions, a password inside database.conninfo, credentials inside
# dlt.url, plus check-config, status, batch show, enqueue and prune with the
# secrets set. Every line any of them wrote (worker logs, stdout, stderr) is
# then searched for every canary; none may appear.
. "$(dirname "$0")/lib_scenario.sh"
sc_begin ops_log_canary

rand() { od -An -tx1 -N12 /dev/urandom | tr -d ' \n'; }
PW="pwcanary$(rand)"
PW_WRONG="pwwrong$(rand)"
PW_FILE_SECRET="pwfile$(rand)"
TOKEN="tokcanary$(rand)"
TOKEN_WRONG="tokwrong$(rand)"
PW_IN_CONNINFO="pwconninfo$(rand)"
PW_IN_URL="pwurl$(rand)"
CANARIES=("$PW" "$PW_WRONG" "$PW_FILE_SECRET" "$TOKEN" "$TOKEN_WRONG" "$PW_IN_CONNINFO" "$PW_IN_URL")
OUT="$SC_DIR/out"
mkdir -p "$OUT"

sc_pg_start
# A login role that must authenticate with its password (SCRAM).
qw_psql -v pw="$PW" >/dev/null <<'SQL' || sc_fail "cannot create the canary role"
SET password_encryption = 'scram-sha-256';
CREATE ROLE canary_worker LOGIN IN ROLE queuer_worker, queuer_operator;
SELECT format('ALTER ROLE canary_worker PASSWORD %L', :'pw') \gexec
SQL
hba="$QW_PG_DIR/data/pg_hba.conf"
{ echo "local all canary_worker scram-sha-256"; cat "$hba"; } >"$SC_DIR/hba.new"
cat "$SC_DIR/hba.new" >"$hba" # keeps the file's owner and mode
sc_check_sql "pg_hba.conf reloaded" t "SELECT pg_reload_conf()"
CANARY_CONNINFO="host=$QW_PG_DIR/sock port=5432 dbname=postgres user=canary_worker"
if PGPASSWORD='' psql -X -w "$CANARY_CONNINFO" -c 'SELECT 1' >"$OUT/nopassword.out" 2>&1; then
    sc_fail "canary_worker could connect without its password: the test would prove nothing"
fi
grep -q 'password' "$OUT/nopassword.out" || sc_fail "unexpected refusal: $(cat "$OUT/nopassword.out")"
PGPASSWORD="$PW" psql -X -w "$CANARY_CONNINFO" -c 'SELECT 1' >/dev/null 2>&1 ||
    sc_fail "canary_worker cannot connect with its password"
echo "ok: the database refuses canary_worker without its password and accepts it with it"

sc_sim_start --commit-delay-ms 5 --token "$TOKEN"
sc_gen "$SC_DIR/w.tsv" 4 5 3 canar

# Every queuer process below gets the canary secrets through these variables.
SECRETS=(QUEUER_DATABASE_CONNINFO="$CANARY_CONNINFO" QUEUER_DATABASE_PASSWORD="$PW"
         QUEUER_DLT_TOKEN="$TOKEN" QUEUER_DLT_URL="$QW_SIM_URL" QUEUER_LOG_LEVEL=debug)

# qrun NAME ARGS...: runs queuer with the secrets, output to $OUT/NAME.{out,err}; prints the exit code.
qrun() {
    local name=$1
    shift
    env "${SECRETS[@]}" "$QUEUER_BIN" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null
    echo $?
}

sc_check "enqueue as canary_worker with its password" 0 "$(qrun enqueue enqueue --tsv "$SC_DIR/w.tsv")"
sc_worker_start w1 "${SECRETS[@]}"
sc_wait_all_final 60
sc_check_sql "every batch Committed through the token-protected ledger" 20 \
    "SELECT count(*) FROM queuer.batches WHERE status = 'Committed'"
sc_check_num "debug lines in w1's log" "$(grep -c 'level=debug' "$SC_DIR/w1.log")" ">" 20

# The operator commands, with the secrets in their environment.
sc_check "status" 0 "$(qrun status status)"
sc_check "status --json" 0 "$(qrun status_json status --json)"
id=$(qw_sql "SELECT batch_id FROM queuer.batches LIMIT 1")
sc_check "batch show" 0 "$(qrun show batch show "$id")"
sc_check "batch show --json" 0 "$(qrun show_json batch show "$id" --json)"
sc_check "batch retry of a final batch is refused" 1 "$(qrun retry batch retry "$id")"
sc_check "prune as a role without DELETE fails" 1 "$(qrun prune prune --older-than 1s)"
: >"$SC_DIR/empty.cfg"
sc_check "check-config" 0 "$(qrun check_config check-config "$SC_DIR/empty.cfg")"
grep -q 'password: <set>' "$OUT/check_config.out" || sc_fail "check-config does not say the password is set"

# A wrong token: the ledger answers 403, the worker says so loudly.
sc_worker_signal w1 TERM
sc_worker_wait_exit w1 20
sc_check "w1 exit status" 0 "$SC_RC"
sc_gen "$SC_DIR/w2.tsv" 2 2 4 canaw
sc_check "second enqueue" 0 "$(qrun enqueue2 enqueue --tsv "$SC_DIR/w2.tsv")"
sc_worker_start w2 "${SECRETS[@]}" QUEUER_DLT_TOKEN="$TOKEN_WRONG"
sc_wait_log w2 30 'event=ledger.auth_refused'
sc_worker_signal w2 TERM
sc_worker_wait_exit w2 20

# A wrong database password: refused, and said so.
SECRETS_BAD=("${SECRETS[@]}" QUEUER_DATABASE_PASSWORD="$PW_WRONG")
env "${SECRETS_BAD[@]}" "$QUEUER_BIN" run >"$OUT/wrong_pw.out" 2>"$OUT/wrong_pw.err" </dev/null
sc_check "run with a wrong password exits 69 (database unreachable)" 69 "$?"
grep -q 'password authentication failed' "$OUT/wrong_pw.err" ||
    sc_fail "no authentication error shown: $(cat "$OUT/wrong_pw.err")"
env "${SECRETS_BAD[@]}" "$QUEUER_BIN" status >"$OUT/wrong_pw_status.out" 2>"$OUT/wrong_pw_status.err"
sc_check "status with a wrong password exits 69" 69 "$?"

# Secrets from files: a good one works; a loose one is refused without being shown.
(umask 077 && printf '%s\n' "$PW" >"$SC_DIR/pw.ok")
printf '%s\n' "$PW_FILE_SECRET" >"$SC_DIR/pw.loose"
chmod 644 "$SC_DIR/pw.loose"
env "${SECRETS[@]}" QUEUER_DATABASE_PASSWORD= QUEUER_DATABASE_PASSWORD_FILE="$SC_DIR/pw.ok" \
    "$QUEUER_BIN" status >"$OUT/pwfile.out" 2>"$OUT/pwfile.err"
sc_check "status with the password from a 0600 file" 0 "$?"
env "${SECRETS[@]}" QUEUER_DATABASE_PASSWORD= QUEUER_DATABASE_PASSWORD_FILE="$SC_DIR/pw.loose" \
    "$QUEUER_BIN" status >"$OUT/pwloose.out" 2>"$OUT/pwloose.err"
sc_check "status with a world-readable password file exits 78" 78 "$?"

# Secrets where they do not belong: refused, never echoed.
env "${SECRETS[@]}" QUEUER_DATABASE_CONNINFO="$CANARY_CONNINFO password=$PW_IN_CONNINFO" \
    "$QUEUER_BIN" check-config "$SC_DIR/empty.cfg" >"$OUT/conninfo_pw.out" 2>"$OUT/conninfo_pw.err"
sc_check "a password inside database.conninfo is refused" 78 "$?"
env "${SECRETS[@]}" QUEUER_DLT_URL="http://user:$PW_IN_URL@127.0.0.1:1" \
    "$QUEUER_BIN" run >"$OUT/url_pw.out" 2>"$OUT/url_pw.err"
sc_check "credentials inside dlt.url are refused" 78 "$?"

# The search: every file any queuer process wrote.
files=("$SC_DIR"/w1.log "$SC_DIR"/w2.log "$OUT"/*)
lines=$(cat "${files[@]}" | wc -l)
sc_check_num "lines searched" "$lines" ">" 200
leaks=0
for c in "${CANARIES[@]}"; do
    if grep -F -l -- "$c" "${files[@]}" >"$SC_DIR/leak.txt"; then
        echo "LEAK: a canary secret appears in: $(tr '\n' ' ' <"$SC_DIR/leak.txt")" >&2
        leaks=$((leaks + 1))
    fi
done
sc_check "canary secrets found in $lines lines of logs and output (${#files[@]} files)" 0 "$leaks"
