#!/usr/bin/env bash
# W1 staged (issue 17): `jit (value_and_grad f)` (bench/w1/jit.dp) beside the hand-derived
# native Rust loop and JAX's jit with lax.fori_loop (../shared/bench/reference), in one run,
# ROUNDS rounds interleaved.
#
#   bench/w1/jit.sh            (DP=binary, NATIVE=w1-native binary, PY=python with jax, ROUNDS=3)
#
# dp's figures come from jit.dp itself (`clock`): `first` is the first call (trace, optimise,
# native compilation and one run), `per_call` the mean of REPS later calls. Each reference
# prints its own per-call seconds (native: median of 101 calls; JAX: of 10 after compiling).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=$(cd "$ROOT/../shared/bench/reference" 2>/dev/null && pwd) || REF=""
DP=${DP:-$ROOT/target/release/dp}
NATIVE=${NATIVE:-/tmp/w1_native_target/release/w1-native}
PY=${PY:-$HOME/.venvs/dp-reference/bin/python}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-20}
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -1; }

echo "# $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); avx512f: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    line=$("$DP" run "$HERE/jit.dp" 100000 "$REPS")
    echo "round $r  dp jit        first=$(echo "$line" | field first) s  per_call=$(echo "$line" | field per_call) s  value=$(echo "$line" | field value) grad=$(echo "$line" | field grad)"
    line=$(DP_JIT_NATIVE=0 "$DP" run "$HERE/jit.dp" 100000 "$REPS")
    echo "round $r  dp jit, DP_JIT_NATIVE=0  first=$(echo "$line" | field first) s  per_call=$(echo "$line" | field per_call) s"
    if [ -x "$NATIVE" ]; then
        line=$("$NATIVE" 100000 101 2>/dev/null)
        echo "round $r  rust native   per_call=$(echo "$line" | field seconds) s"
    fi
    if [ -n "$REF" ] && "$PY" -c 'import jax' 2>/dev/null; then
        line=$("$PY" "$REF/w1_scalar_loop.py" --system jax --variant jit --repeats 10 2>/dev/null)
        echo "round $r  jax jit       per_call=$(echo "$line" | field seconds) s"
    fi
done
