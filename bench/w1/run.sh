#!/usr/bin/env bash
# W1 scalar-loop (../shared/bench/WORKLOADS.md): dp beside the references, in one run.
#
#   bench/w1/run.sh            (from anywhere; the references take about 1 minute, dp 1-5 more)
#
# Rows: dp (bench/w1/w1.dp), the hand-derived Rust "native limit"
# (../shared/bench/reference/w1_native), PyTorch eager and HIPS autograd (and jax jit when jax is
# installed) from ../shared/bench/reference/w1_scalar_loop.py. Then dp's peak RSS at N = 100000
# and N = 1000000, from which the memory per recorded operation follows.
#
# How dp is timed: w1.dp takes N and REPS from its arguments and runs 1 warm-up call plus REPS
# calls of `value_and_grad f 0.5`. One call costs (T(REPS=R) - T(REPS=1)) / (R - 1), where T is
# the median wall time of DP_RUNS processes; start-up, parse, check and warm-up cancel out.
#
# Environment:
#   DP=path          dp binary (default <repo>/target/release/dp, built first unless SKIP_BUILD=1)
#   SKIP_BUILD=1     run no cargo build (neither dp nor the native reference)
#   DP_REPS=R        calls in the long dp run (default: 11, or 3 when one call takes over 3 s)
#   DP_RUNS=k        processes per dp measurement, median taken (default 3)
#   VENV=dir         reference Python venv (default $HOME/.venvs/dp-reference); rows skipped if absent
#   REF_REPEATS=r    timed calls of torch and autograd after their warm-up (default 1; the
#                    reference README's run used 3 for torch)
#   SKIP_AUTOGRAD=1  skip HIPS autograd (about 90 s: warm-up + 1 call of ~45 s)
#   SKIP_MEMORY=1    skip the peak-RSS runs
#   NATIVE_TARGET=d  cargo target dir for the native reference (default /tmp/w1_native_target)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=$(cd "$ROOT/../shared/bench/reference" 2>/dev/null && pwd) || REF=""
DP=${DP:-$ROOT/target/release/dp}
VENV=${VENV:-$HOME/.venvs/dp-reference}
PY=$VENV/bin/python
DP_RUNS=${DP_RUNS:-3}
REF_REPEATS=${REF_REPEATS:-1}
NATIVE_TARGET=${NATIVE_TARGET:-/tmp/w1_native_target}
N=100000
REF_VALUE=-48.0152376802
REF_GRAD=43.2881662011
TIME=/usr/bin/time
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

note() { echo "# $*" >&2; }
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -1; }   # key=value from a line

note "machine: $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"

# ---- build ----------------------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    note "cargo build --release (dp, in $ROOT)"
    (cd "$ROOT" && cargo build --release) >&2 || note "dp build FAILED"
    if [ -n "$REF" ]; then
        note "cargo build --release (w1_native, target dir $NATIVE_TARGET)"
        CARGO_TARGET_DIR=$NATIVE_TARGET cargo build --release --locked -q \
            --manifest-path "$REF/w1_native/Cargo.toml" >&2 || note "w1_native build FAILED"
    fi
fi

# rows: name|seconds|value|grad|note
ROWS=()
add_row() { ROWS+=("$1|$2|$3|$4|${5:-}"); }

# ---- native -----------------------------------------------------------------------------------
NATIVE=$NATIVE_TARGET/release/w1-native
if [ -x "$NATIVE" ]; then
    note "running $NATIVE $N 101"
    line=$("$NATIVE" $N 101 2>"$TMP/native.err"); cat "$TMP/native.err" >&2
    echo "$line" >&2
    add_row "rust native (hand-derived)" "$(echo "$line" | field seconds)" \
        "$(echo "$line" | field value)" "$(echo "$line" | field grad)" "median of 101"
else
    note "no native reference at $NATIVE (skipped)"
fi

# ---- Python references ----------------------------------------------------------------------
py_row() {   # label system variant extra-args...
    local label=$1 sys=$2 var=$3; shift 3
    note "running w1_scalar_loop.py --system $sys --variant $var $*"
    local line
    line=$("$PY" "$REF/w1_scalar_loop.py" --system "$sys" --variant "$var" "$@" 2> >(cat >&2)) || {
        note "$sys $var FAILED"; return; }
    echo "$line" >&2
    add_row "$label" "$(echo "$line" | field seconds)" "$(echo "$line" | field value)" \
        "$(echo "$line" | field grad)" "$*"
}
if [ -z "$REF" ]; then
    note "../shared/bench/reference not found: Python and native rows skipped"
elif [ ! -x "$PY" ]; then
    note "no reference venv at $VENV (see ../shared/bench/reference/README.md): Python rows skipped"
else
    if "$PY" -c 'import torch' 2>/dev/null; then
        py_row "torch eager" torch eager --repeats "$REF_REPEATS"
    else note "torch not installed in $VENV: skipped"; fi
    if "$PY" -c 'import jax' 2>/dev/null; then
        py_row "jax jit (lax.fori_loop)" jax jit --repeats 10
    else note "jax not installed in $VENV: jax jit row skipped"; fi
    if [ "${SKIP_AUTOGRAD:-0}" = 1 ]; then note "autograd skipped (SKIP_AUTOGRAD=1)"
    elif "$PY" -c 'import autograd' 2>/dev/null; then
        py_row "HIPS autograd eager" autograd eager --repeats "$REF_REPEATS"
    else note "autograd not installed in $VENV: skipped"; fi
fi

# ---- dp -------------------------------------------------------------------------------------
# dp_run N REPS -> "wall_seconds peak_rss_kb output-line" (one process)
dp_run() {
    local t0 t1 rss out
    t0=$(date +%s.%N)
    if [ -x "$TIME" ]; then
        out=$("$TIME" -f %M -o "$TMP/rss" "$DP" run "$HERE/w1.dp" "$1" "$2" 2>"$TMP/dp.err") || {
            cat "$TMP/dp.err" >&2; return 1; }
        rss=$(tail -1 "$TMP/rss")
    else
        out=$("$DP" run "$HERE/w1.dp" "$1" "$2" 2>"$TMP/dp.err") || { cat "$TMP/dp.err" >&2; return 1; }
        rss=n/a
    fi
    t1=$(date +%s.%N)
    echo "$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.4f", a - b }') $rss $out"
}
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.4f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# dp_time REPS -> median wall seconds over DP_RUNS processes; last output line in $TMP/last
dp_time() {
    local k r
    : > "$TMP/times"
    for k in $(seq "$DP_RUNS"); do
        r=$(dp_run $N "$1") || return 1
        echo "$r" | cut -d' ' -f3- > "$TMP/last"
        echo "$r" | cut -d' ' -f2 >> "$TMP/rss_reps$1"
        echo "$r" | cut -d' ' -f1 >> "$TMP/times"
    done
    median < "$TMP/times"
}

DP_OK=0
if [ ! -x "$DP" ]; then
    note "no dp binary at $DP: dp rows skipped"
elif ! first=$(dp_run $N 1); then
    note "dp run $HERE/w1.dp $N 1 FAILED"
else
    DP_OK=1
    note "dp first run (reps=1): $first"
    t_once=$(echo "$first" | cut -d' ' -f1)
    if [ -z "${DP_REPS:-}" ]; then
        # warm-up + 1 call took t_once; use fewer repetitions when a call is slow
        DP_REPS=$(awk -v t="$t_once" 'BEGIN { print (t / 2 > 3) ? 3 : 11 }')
    fi
    note "timing dp: $DP_RUNS processes each of reps=1 and reps=$DP_REPS"
    T1=$(dp_time 1) || DP_OK=0
    line1=$(cat "$TMP/last")
    TR=$(dp_time "$DP_REPS") || DP_OK=0
    lineR=$(cat "$TMP/last")
    if [ $DP_OK = 1 ]; then
        PER=$(awk -v a="$TR" -v b="$T1" -v r="$DP_REPS" 'BEGIN { printf "%.6g", (a - b) / (r - 1) }')
        note "dp: T(reps=1) = $T1 s, T(reps=$DP_REPS) = $TR s -> $PER s per call"
        awk -v a="$TR" -v b="$T1" 'BEGIN { exit !(a - b < 0.1 * b) }' &&
            note "WARNING: the timed calls are under 10% of a process's time; the per-call figure is noisy (raise DP_REPS or DP_RUNS)"
        note "dp: peak RSS reps=1: $(sort -g "$TMP/rss_reps1" | tail -1) kB, reps=$DP_REPS: $(sort -g "$TMP/rss_reps$DP_REPS" | tail -1) kB"
        v1=$(echo "$line1" | field value); vR=$(echo "$lineR" | field value)
        g1=$(echo "$line1" | field grad); gR=$(echo "$lineR" | field grad)
        [ "$v1 $g1" = "$vR $gR" ] || note "WARNING: dp gave different results for reps=1 ($v1 $g1) and reps=$DP_REPS ($vR $gR)"
        add_row "dp" "$PER" "$vR" "$gR" "(T(reps=$DP_REPS)-T(reps=1))/$((DP_REPS - 1)), median of $DP_RUNS processes"
    fi
fi

# ---- table ----------------------------------------------------------------------------------
STATUS=0
dp_s=""
torch_s=""; native_s=""; autograd_s=""
for r in "${ROWS[@]}"; do
    IFS='|' read -r name s v g extra <<<"$r"
    case $name in dp) dp_s=$s;; "torch eager") torch_s=$s;; rust*) native_s=$s;; "HIPS autograd eager") autograd_s=$s;; esac
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.4g", a / b; else printf "n/a" }'; }
relerr() { awk -v x="$1" -v r="$2" 'BEGIN { if (x == "") { print "n/a"; exit } d = (x - r) / r; if (d < 0) d = -d; d += 0; printf "%.1e", d }'; }

echo
echo "W1 scalar-loop, N = $N, x = 0.5: seconds per value_and_grad call (after one warm-up call)"
echo "reference values: f = $REF_VALUE, f' = $REF_GRAD (agreement required: 1e-9 relative)"
printf '%-28s %12s %18s %18s %9s %9s %5s %10s\n' system "s/call" value grad "rel(f)" "rel(f')" ok "dp/this"
for r in "${ROWS[@]}"; do
    IFS='|' read -r name s v g extra <<<"$r"
    ev=$(relerr "$v" $REF_VALUE); eg=$(relerr "$g" $REF_GRAD)
    ok=$(awk -v a="$ev" -v b="$eg" 'BEGIN { print (a != "n/a" && b != "n/a" && a + 0 <= 1e-9 && b + 0 <= 1e-9) ? "yes" : "NO" }')
    [ "$ok" = yes ] || STATUS=1
    printf '%-28s %12s %18s %18s %9s %9s %5s %10s\n' "$name" "$s" \
        "$(awk -v x="$v" 'BEGIN { printf "%.10f", x }')" "$(awk -v x="$g" 'BEGIN { printf "%.10f", x }')" \
        "$ev" "$eg" "$ok" "$(ratio "$dp_s" "$s")"
done
for r in "${ROWS[@]}"; do IFS='|' read -r name s v g extra <<<"$r"; echo "  $name: $extra"; done
echo "ratio dp/torch:    $(ratio "$dp_s" "$torch_s")"
echo "ratio dp/native:   $(ratio "$dp_s" "$native_s")"
echo "ratio dp/autograd: $(ratio "$dp_s" "$autograd_s")"
echo "(python rows print 10 significant digits, so their rel(f') can be up to ~1e-9 from rounding alone)"

# ---- memory ---------------------------------------------------------------------------------
if [ $DP_OK = 1 ] && [ "${SKIP_MEMORY:-0}" != 1 ] && [ -x "$TIME" ]; then
    echo
    echo "dp peak RSS, one value_and_grad call (reps=0), GNU time -v:"
    declare -A RSS
    for n in 1 100000 1000000; do
        "$TIME" -v "$DP" run "$HERE/w1.dp" $n 0 >"$TMP/mem.out" 2>"$TMP/mem.err" || {
            note "dp run w1.dp $n 0 FAILED"; tail -5 "$TMP/mem.err" >&2; RSS[$n]=""; continue; }
        RSS[$n]=$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$TMP/mem.err")
        el=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): *//p' "$TMP/mem.err")
        printf '  N = %-8s peak RSS %8s kB   wall %s   %s\n' $n "${RSS[$n]}" "$el" "$(cat "$TMP/mem.out")"
    done
    if [ -n "${RSS[100000]}" ] && [ -n "${RSS[1000000]}" ]; then
        awk -v a="${RSS[100000]}" -v b="${RSS[1000000]}" 'BEGIN {
            d = (b - a) * 1024; ops = 900000 * 5
            printf "  (RSS(1e6) - RSS(1e5)) / 900000 iterations = %.1f bytes per iteration\n", d / 900000
            printf "  at ~5 differentiable ops per iteration: %.1f bytes per recorded operation\n", d / ops
        }'
    fi
elif [ ! -x "$TIME" ]; then
    note "GNU time not found at $TIME (apt-get install -y time): memory measurement skipped"
fi
exit $STATUS
