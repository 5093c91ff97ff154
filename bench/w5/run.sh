#!/usr/bin/env bash
# W5 matmul-grad (../shared/bench/WORKLOADS.md): loss = sum (tanh (A @ B)) and its gradients
# with respect to A and B, A and B 1024 x 1024 float32; dp beside NumPy (hand-written
# gradients), PyTorch eager and JAX (jit and eager, when installed), in one run.
#
#   bench/w5/run.sh                  (from anywhere; about 1 minute)
#   FEATURES=f bench/w5/run.sh       (dp built with cargo features f)
#   ALSO_FEATURES=f bench/w5/run.sh  (both dp builds, side by side)
#
# dp (bench/w5/matmul_grad.dp DATA REPS) runs 2 warm-up iterations and then REPS; seconds per
# iteration = (T(REPS = R) - T(REPS = 1)) / (R - 1), T the median wall time of DP_RUNS
# processes (R = DP_REPS, default 11): a mean over R - 1 iterations, where the references report
# the median of 10 iterations after 2 warm-ups (`w5_matmul_grad.py`). GFLOP/s counts 3 matmuls
# of 2 * 1024^3 flops. The loss must agree with 415.6228 to 1e-5 relative; dp's sums of dA and
# dB with the references' (-31374.60563, 82774.28373) to 1e-5.
# Environment: see ../tensors_common.sh (DP, FEATURES, ALSO_FEATURES, SKIP_BUILD, DATA, VENV,
# DP_RUNS, DP_REPS) and REFS (default "numpy:hand torch:eager jax:jit jax:eager").
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tensors_common.sh"
PROG=$HERE/matmul_grad.dp
JIT_PROG=$HERE/jit.dp
REF_VALUE=415.6228
TOL=1e-5
DA_SUM=-31374.60563
DB_SUM=82774.28373
R=${DP_REPS:-11}
REFS=${REFS:-numpy:hand torch:eager jax:jit jax:eager}
gflops() { awk -v s="$1" 'BEGIN { if (s + 0 > 0) printf "%.1f", 3 * 2 * 1024 ^ 3 / s / 1e9; else printf "n/a" }'; }

machine_note
ensure_data

dp_row() {   # label how
    local label=$1
    da=$(echo "$DP_LINE" | field dA_sum); db=$(echo "$DP_LINE" | field dB_sum)
    add_row "$1" "$DP_PER" "$(echo "$DP_LINE" | field value)" $TOL \
        "gflops=$(gflops "$DP_PER") dA_sum=$da dB_sum=$db" "$DP_RSS" \
        "$2"
    for pair in "dA_sum $da $DA_SUM" "dB_sum $db $DB_SUM"; do
        set -- $pair
        e=$(relerr "$2" "$3")
        awk -v e="$e" -v t=$TOL 'BEGIN { exit !(e != "n/a" && e + 0 <= t) }' ||
            { STATUS=1; note "$label: $1 = $2 differs from the references' $3 (rel $e > $TOL)"; }
    done
}

ref_row() {   # name
    s=$(echo "$REF_LINE" | field seconds)
    add_row "$1" "$s" "$(echo "$REF_LINE" | field value)" $TOL \
        "gflops=$(gflops "$s") dA_sum=$(echo "$REF_LINE" | field dA_sum) dB_sum=$(echo "$REF_LINE" | field dB_sum)" \
        "$REF_RSS" ""
}

run_dp_rows "$R"
run_ref_rows w5_matmul_grad.py

print_table "W5 matmul-grad, A, B 1024 x 1024 float32: seconds per iteration (loss, dA, dB)" \
    "$REF_VALUE" "s/iter" "GFLOP/s (3 x 2 x 1024^3 flops), gradient sums"
echo "  references: median of 10 iterations after 2 warm-ups (w5_matmul_grad.py)"
exit $STATUS
