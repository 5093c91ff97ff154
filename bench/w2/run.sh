#!/usr/bin/env bash
# W2 mlp (../shared/bench/WORKLOADS.md): 784 -> 256 (tanh) -> 10, mean softmax cross-entropy,
# SGD lr 0.05, batch 128, 64 steps per epoch, float32; dp beside NumPy (hand-written backward
# pass), PyTorch eager and JAX (jit and eager, when installed), in one run.
#
#   bench/w2/run.sh                  (from anywhere; about 1-2 minutes)
#   FEATURES=f bench/w2/run.sh       (dp built with cargo features f)
#   ALSO_FEATURES=f bench/w2/run.sh  (both dp builds, side by side)
#
# dp (bench/w2/mlp.dp DATA REPS) runs the warm-up epoch 1 and then REPS copies of epoch 2 from
# the same post-warm-up weights; seconds per epoch = (T(REPS = R) - T(REPS = 1)) / (R - 1), T the
# median wall time of DP_RUNS processes (R = DP_REPS, default 6). The references report the median
# of 5 repeats of epoch 2 (`w2_mlp.py`). The value is the mean loss of the timed epoch; it must
# agree with 2.051475525 to 1e-6 relative (float32 throughout; the references agree to 10 digits).
# Environment: see ../tensors_common.sh (DP, FEATURES, ALSO_FEATURES, SKIP_BUILD, DATA, VENV,
# DP_RUNS, DP_REPS) and REFS (default "numpy:hand torch:eager jax:jit jax:eager").
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tensors_common.sh"
PROG=$HERE/mlp.dp
JIT_PROG=$HERE/jit.dp
REF_VALUE=2.051475525
TOL=1e-6
R=${DP_REPS:-6}
REFS=${REFS:-numpy:hand torch:eager jax:jit jax:eager}

machine_note
ensure_data

dp_row() {   # label how
    add_row "$1" "$DP_PER" "$(echo "$DP_LINE" | field value)" $TOL \
        "warm-up epoch mean loss $(echo "$DP_LINE" | field warmup)" "$DP_RSS" \
        "$2"
}

ref_row() {   # name
    add_row "$1" "$(echo "$REF_LINE" | field seconds)" "$(echo "$REF_LINE" | field value)" \
        $TOL "" "$REF_RSS" ""
}

run_dp_rows "$R"
run_ref_rows w2_mlp.py

print_table "W2 mlp, 784-256-10, batch 128: seconds per epoch (64 SGD steps), mean loss of epoch 2" \
    "$REF_VALUE" "s/epoch" ""
echo "  references: median of 5 repeats of epoch 2 after the warm-up epoch (w2_mlp.py)"
exit $STATUS
