#!/usr/bin/env bash
# The claims protocol's model check (tests/model/claims.pml, docs/CLAIMS.md
# "The model"): SPIN explores every interleaving of a bounded configuration
# (two processes on two instance ids, one service with three batches, one
# crash, freeze or stop, restarts on the same host, stops that abandon
# POSTs, POSTs that land late or never, five ticks of a one-tick lease) and
# checks that the ledger sees the service's batches in creation order with
# at most one in flight. Then each mutant, the model with one rule of the
# protocol broken, must fail the same check: each rule is needed, and the
# check can tell. Prints the states explored and the time of each run; on a
# failure of the protocol model, the counterexample as a trail (spin -t).
#
# Environment: QW_MODEL_KEEP=1 keeps the work directory; QW_MODEL_CONFIG
# replaces the configuration (spin -D flags, see the model's header).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
model=$here/claims.pml
config=${QW_MODEL_CONFIG:--DNP=2 -DNS=1 -DNB=3 -DTMAX=5 -DLEASE=1 -DHARD=3 -DFLIGHT=1 -DCONFIRM=1 -DMAXREG=2 -DEMAX=3 -DFMAX=1 -DRESTART_TAKEOVER -DSTOP_ABANDONS}
# Each breaks one rule the invariant rests on (the model's header says which).
mutants=(BROKEN_FENCE BROKEN_WINDOW BROKEN_SOFT BROKEN_RESTART BROKEN_STOP BROKEN_NAME)

for tool in spin gcc; do
    command -v "$tool" >/dev/null || {
        echo "skipped: $tool is not installed (scripts/deps.sh --test installs it)"
        exit 77
    }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/qw-model.XXXXXX")
protocol_pid=
cleanup() {
    [ -z "$protocol_pid" ] || kill "$protocol_pid" 2>/dev/null || true
    [ -n "${QW_MODEL_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# verify NAME OPT FLAGS...: builds the verifier for the model with FLAGS
# (gcc -OPT) in $work/NAME and runs it; leaves its report in
# $work/NAME/pan.out and its seconds in $work/NAME/took.
verify() {
    local name=$1 opt=$2 dir=$work/$1
    shift 2
    mkdir -p "$dir"
    cp "$model" "$dir/claims.pml"
    # shellcheck disable=SC2086 # the configuration is a list of flags
    (cd "$dir" && spin -a $config "$@" claims.pml >spin.out 2>&1) || {
        cat "$dir/spin.out" >&2
        echo "FAIL: spin could not read the model ($name)" >&2
        return 1
    }
    local t0=$SECONDS
    # safety properties only; states stored whole (about 1.5 GB for the
    # default configuration), at most 8 GB (a run that hits it says so and
    # fails)
    (cd "$dir" && gcc "-$opt" -w -DSAFETY -DMEMLIM=8192 -o pan pan.c) || {
        echo "FAIL: the verifier for $name does not compile" >&2
        return 1
    }
    # depth bound far above the deepest path; a hash table of 2^25 slots
    (cd "$dir" && ./pan -m100000 -w25 >pan.out 2>&1) || true
    echo $((SECONDS - t0)) >"$dir/took"
}

# figure FILE WHAT: a number from a pan report
figure() { sed -n "s/^ *\([0-9e.+]*\) $2.*/\1/p" "$1" | head -n 1; }
errors() { sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$1" | head -n 1; }

start=$SECONDS
# The protocol's exhaustive run on one core, the mutants (each stops at its
# first violation) on the other.
verify protocol O2 &
protocol_pid=$!

for m in "${mutants[@]}"; do
    verify "$m" O1 "-D$m"
    out=$work/$m/pan.out
    if [ "$(errors "$out")" != 1 ]; then
        cat "$out" >&2
        echo "FAIL: with $m the check finds no violation: it cannot tell that rule is needed" >&2
        exit 1
    fi
    echo "ok: $m breaks the invariant ($(grep -m1 -o 'assertion violated.*' "$out"); found after" \
        "$(figure "$out" 'states, stored') states, $(cat "$work/$m/took") s)"
done

wait "$protocol_pid" || exit 1
protocol_pid=
out=$work/protocol/pan.out
if grep -q "max search depth too small\|reached -DMEMLIM\|out of memory" "$out"; then
    cat "$out" >&2
    echo "FAIL: the search was cut short; the configuration is not fully explored" >&2
    exit 1
fi
if [ "$(errors "$out")" != 0 ]; then
    cat "$out" >&2
    echo "counterexample (spin -t):" >&2
    # shellcheck disable=SC2086
    (cd "$work/protocol" && spin -t $config claims.pml 2>&1 | grep -E 'MSC|assert') >&2 || true
    echo "FAIL: the claims model breaks the invariant" >&2
    exit 1
fi
echo "ok: the protocol keeps creation order and one batch in flight:" \
    "$(figure "$out" 'states, stored') states, $(figure "$out" transitions) transitions," \
    "$(cat "$work/protocol/took") s ($config)"
echo "model check: $((SECONDS - start)) s in all"
