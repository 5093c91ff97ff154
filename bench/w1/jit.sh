#!/usr/bin/env bash
# W1 staged (issue 17): `jit (value_and_grad f)` (bench/w1/jit.dp) beside the hand-derived
# native Rust loop and JAX's jit with lax.fori_loop (../shared/bench/reference), in one run,
# ROUNDS rounds interleaved, then each system's median and dp's ratios to the others.
#
#   bench/w1/jit.sh            (DP=binary, NATIVE=w1-native binary, PY=python with jax, ROUNDS=3)
#
# Builds dp (`cargo build --release`) unless SKIP_BUILD=1, and the native reference into
# NATIVE_TARGET (default /tmp/w1_native_target, nothing is written under ../shared) when its
# binary is missing.
# dp's figures come from jit.dp itself (`clock`): `first` is the first call (trace, optimise,
# native compilation and one run), `per_call` the mean and `median` the median of REPS later
# calls. Each reference prints its own per-call seconds (native: median of 101 calls; JAX: of
# 10 after compiling), so the summary takes dp's medians too.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=$(cd "$ROOT/../shared/bench/reference" 2>/dev/null && pwd) || REF=""
DP=${DP:-$ROOT/target/release/dp}
NATIVE_TARGET=${NATIVE_TARGET:-/tmp/w1_native_target}
NATIVE=${NATIVE:-$NATIVE_TARGET/release/w1-native}
PY=${PY:-$HOME/.venvs/dp-reference/bin/python}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-51}
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -1; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    echo "# cargo build --release (dp, in $ROOT)" >&2
    (cd "$ROOT" && cargo build --release) >&2 || echo "# dp build FAILED" >&2
fi
if [ ! -x "$NATIVE" ] && [ -n "$REF" ]; then
    echo "# cargo build --release (w1_native, target dir $NATIVE_TARGET)" >&2
    CARGO_TARGET_DIR=$NATIVE_TARGET cargo build --release --locked -q \
        --manifest-path "$REF/w1_native/Cargo.toml" >&2 || echo "# w1_native build FAILED" >&2
fi

DP_T=() PLAIN_T=() FLUSH_T=() NATIVE_T=() JAX_T=()
echo "# $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); avx512f: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    line=$("$DP" run "$HERE/jit.dp" 100000 "$REPS")
    t=$(echo "$line" | field median); DP_T+=("$t")
    echo "round $r  dp jit        first=$(echo "$line" | field first) s  per_call=$(echo "$line" | field per_call) s  median=$t s  value=$(echo "$line" | field value) grad=$(echo "$line" | field grad)"
    line=$(DP_JIT_NATIVE=0 "$DP" run "$HERE/jit.dp" 100000 "$REPS")
    t=$(echo "$line" | field median); PLAIN_T+=("$t")
    echo "round $r  dp jit, DP_JIT_NATIVE=0  first=$(echo "$line" | field first) s  per_call=$(echo "$line" | field per_call) s  median=$t s"
    line=$(DP_FLUSH_SUBNORMALS=1 "$DP" run "$HERE/jit.dp" 100000 "$REPS")
    t=$(echo "$line" | field median); FLUSH_T+=("$t")
    echo "round $r  dp jit, DP_FLUSH_SUBNORMALS=1  first=$(echo "$line" | field first) s  per_call=$(echo "$line" | field per_call) s  median=$t s  value=$(echo "$line" | field value) grad=$(echo "$line" | field grad)"
    if [ -x "$NATIVE" ]; then
        line=$("$NATIVE" 100000 101 2>/dev/null)
        t=$(echo "$line" | field seconds); NATIVE_T+=("$t")
        echo "round $r  rust native   per_call=$t s  value=$(echo "$line" | field value) grad=$(echo "$line" | field grad)"
    fi
    if [ -n "$REF" ] && "$PY" -c 'import jax' 2>/dev/null; then
        line=$("$PY" "$REF/w1_scalar_loop.py" --system jax --variant jit --repeats 10 2>/dev/null)
        t=$(echo "$line" | field seconds); JAX_T+=("$t")
        echo "round $r  jax jit       per_call=$t s"
    fi
done

median() { printf '%s\n' "$@" | grep -E '^[0-9.e+-]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }
dp=$(median "${DP_T[@]}")
summary="per call, median of the rounds' medians: dp jit ${dp:-n/a} s"
for row in "DP_JIT_NATIVE=0|${PLAIN_T[*]}" "rust native|${NATIVE_T[*]}" "jax jit|${JAX_T[*]}"; do
    name=${row%%|*}
    # shellcheck disable=SC2086
    m=$(median ${row#*|})
    [ -n "$m" ] || continue
    ratio=$(awk -v a="$dp" -v b="$m" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "n/a" }')
    summary="$summary, $name $m s (dp/that $ratio)"
done
echo "$summary"
# XLA flushes subnormals to zero on its CPU threads; dp does when asked (docs/language.md).
flush=$(median "${FLUSH_T[@]}") jax=$(median "${JAX_T[@]}")
[ -n "$flush" ] && echo "dp jit with DP_FLUSH_SUBNORMALS=1 (as XLA computes): $flush s$( [ -n "$jax" ] && awk -v a="$flush" -v b="$jax" 'BEGIN { if (b > 0) printf ", dp/jax jit %.2f", a / b }')"
