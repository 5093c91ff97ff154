#!/usr/bin/env bash
# bench/vmap (issue 15): per-example gradients of the W2 MLP for a batch of 128 with
# `vmap (grad …)`, beside JAX's jit(vmap(grad)) and PyTorch's torch.func.vmap(grad) (when
# installed), in one run.
#
#   bench/vmap/run.sh      (DP: the dp binary, default target/release/dp; VENV: a Python with
#                           numpy and jax, default /tmp/dp-pyvenv; TORCH_VENV: one with torch,
#                           default /tmp/bench-venv; R: repetitions, default 6; ONE_THREAD=1:
#                           one thread each — DP_NUM_THREADS=1, torch.set_num_threads(1), XLA's
#                           single-threaded Eigen; CPU_TIME=1: CPU seconds (user + system)
#                           in place of wall seconds, for a busy machine — with ONE_THREAD=1)
#
# dp's seconds per batch = (T(REPS = R) - T(REPS = 1)) / (R - 1), T the median wall time of 3
# processes, so start-up and loading cancel out; the references report the median of 7 calls
# after a warm-up. The checksums (the sum of all per-example gradients, of the first example's
# W1 gradient) must agree to float32 rounding.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
VENV=${VENV:-/tmp/dp-pyvenv}
TORCH_VENV=${TORCH_VENV:-/tmp/bench-venv}
R=${R:-6}
if [ "${ONE_THREAD:-0}" = 1 ]; then
    export DP_NUM_THREADS=1 BENCH_ONE_THREAD=1
fi
if [ "${CPU_TIME:-0}" = 1 ]; then
    export BENCH_CPU_TIME=1
fi
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
"$VENV/bin/python" "$HERE/make_data.py" "$DATA"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), threads: $([ "${ONE_THREAD:-0}" = 1 ] && echo "one each" || echo default), $([ "${CPU_TIME:-0}" = 1 ] && echo "CPU" || echo "wall") seconds"
wall() {   # reps: median of 3 wall times (seconds), or of CPU times with CPU_TIME=1
    for _ in 1 2 3; do
        if [ "${CPU_TIME:-0}" = 1 ]; then
            /usr/bin/time -f "%U + %S" -o "$DATA/cpu" "$DP" run "$HERE/per_example.dp" "$DATA" "$1" > "$DATA/out"
            bc -l < "$DATA/cpu"
        else
            local s e
            s=$(date +%s.%N); "$DP" run "$HERE/per_example.dp" "$DATA" "$1" > "$DATA/out"; e=$(date +%s.%N)
            echo "$e - $s" | bc -l
        fi
    done | sort -n | sed -n 2p
}
t1=$(wall 1); tr=$(wall "$R")
echo "dp:vmap(grad) seconds $(echo "($tr - $t1) / ($R - 1)" | bc -l | cut -c1-8) $(cat "$DATA/out")"
"$VENV/bin/python" "$HERE/per_example.py" "$DATA" 2>/dev/null | grep -v "^torch"
if [ -x "$TORCH_VENV/bin/python" ]; then
    "$TORCH_VENV/bin/python" "$HERE/per_example.py" "$DATA" 2>/dev/null | grep -v "^jax"
fi
