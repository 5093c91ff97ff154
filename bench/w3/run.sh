#!/usr/bin/env bash
# W3 treelstm (../shared/bench/WORKLOADS.md): binary TreeLSTM over 300 random trees, per-node
# cross-entropy, Adagrad, one tree per step, float32; dp beside PyTorch eager, JAX jit-cells
# (when installed) and HIPS autograd, in one run.
#
#   bench/w3/run.sh                  (from anywhere; about 3-5 minutes, half of it autograd)
#   REFS="torch:eager jax:jit-cells" bench/w3/run.sh      (without autograd)
#
# dp (bench/w3/treelstm.dp DATA REPS) runs the warm-up epoch 1 and then REPS copies of epoch 2
# from the same post-warm-up state; seconds per epoch = (T(REPS = R) - T(REPS = 1)) / (R - 1), T
# the median wall time of DP_RUNS processes (R = DP_REPS, default 3). The references time one
# repeat of epoch 2 (`w3_treelstm.py`). The value is the summed loss of the timed epoch; it must
# agree with 20374.25 to 1e-5 relative (float32; the references spread 1.6e-6).
# Environment: see ../tensors_common.sh (DP, FEATURES, ALSO_FEATURES, SKIP_BUILD, DATA, VENV,
# DP_RUNS, DP_REPS) and REFS (default "torch:eager jax:jit-cells autograd:eager"; jax eager
# takes ~7 minutes an epoch and jit-cells-grad ~1 minute, add them by hand).
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tensors_common.sh"
PROG=$HERE/treelstm.dp
JIT_PROG=$HERE/jit.dp
REF_VALUE=20374.25
TOL=1e-5
R=${DP_REPS:-3}
REFS=${REFS:-torch:eager jax:jit-cells autograd:eager}

machine_note
ensure_data

dp_row() {   # label how
    add_row "$1" "$DP_PER" "$(echo "$DP_LINE" | field value)" $TOL \
        "warm-up epoch loss $(echo "$DP_LINE" | field warmup)" "$DP_RSS" \
        "$2"
}

ref_row() {   # name
    add_row "$1" "$(echo "$REF_LINE" | field seconds)" "$(echo "$REF_LINE" | field value)" \
        $TOL "$(echo "$REF_LINE" | grep -o 'scaled=.*')" "$REF_RSS" ""
}

run_dp_rows "$R"
run_ref_rows w3_treelstm.py

print_table "W3 treelstm, 300 trees, hidden 150: seconds per epoch (300 Adagrad steps), summed loss of epoch 2" \
    "$REF_VALUE" "s/epoch" ""
echo "  references: one timed repeat of epoch 2 after the warm-up epoch (w3_treelstm.py)"
exit $STATUS
