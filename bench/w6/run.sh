#!/usr/bin/env bash
# W6 transformer: examples/transformer.dp's character-level causal Transformer (d 64, 4 heads,
# 2 layers, GELU MLP, layer norm, AdamW with linear warm-up then cosine), batch 16 windows of
# 64 characters of examples/data/sonnets.txt, float32; dp beside PyTorch eager and JAX jit
# (w6_transformer.py), from the same initial weights and on the same batches, in one run.
#
#   bench/w6/run.sh                  (from anywhere; about 1-2 minutes)
#
# The initial weights are dp's (`dp run examples/transformer.dp init FILE`, safetensors, keyed
# normal N(0, 0.02²)); the references load that file. dp (`… bench FILE S`) trains S steps
# from it; seconds per step = (T(S = R) - T(S = 1)) / (R - 1), T the median wall time of
# DP_RUNS processes (R = DP_REPS, default 21; at least 10, for loss10), so the first step, the
# parsing and the loading are not counted. The references report the median of steps 3 .. STEPS (default 30).
# Checked values: the loss of step 1 (at the initial weights) must agree between every row to
# 1e-5 relative (the table's value column, against the torch row); the loss of step 10 (after
# nine AdamW updates) is printed beside it (loss10) and must agree to 1e-4.
# A "dp jit" row times the same program with each training step (loss, gradient and AdamW
# update) staged (`… bench FILE S jit`, as the JAX reference jits its whole update; JIT=0
# leaves it out).
# Environment: see ../tensors_common.sh (DP, FEATURES, ALSO_FEATURES, SKIP_BUILD, DP_RUNS,
# DP_REPS; DATA is where the weights file is written, default /tmp/bench-data), VENV (default
# /tmp/bench-venv, which has torch, jax and safetensors) and REFS (default "torch:eager jax:jit").
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV:-/tmp/bench-venv}
. "$HERE/../tensors_common.sh"
PROG=$ROOT/examples/transformer.dp
TOL=1e-5
LOSS10_TOL=1e-4
R=${DP_REPS:-21}
STEPS=${STEPS:-30}
REFS=${REFS:-torch:eager jax:jit}
INIT=$DATA/w6_init.safetensors

machine_note
mkdir -p "$DATA"
# The example reads its text relative to the repository root.
cd "$ROOT" || exit 2
"${DP_BINS[0]}" run "$PROG" init "$INIT" || { note "could not write $INIT"; exit 2; }

LOSS10=()
dp_row() {   # label how
    add_row "$1" "$DP_PER" "$(echo "$DP_LINE" | field value)" $TOL \
        "loss10=$(echo "$DP_LINE" | field loss10)" "$DP_RSS" "$2"
    LOSS10+=("$1|$(echo "$DP_LINE" | field loss10)")
}

ref_row() {   # name
    add_row "$1" "$(echo "$REF_LINE" | field seconds)" "$(echo "$REF_LINE" | field value)" $TOL \
        "loss10=$(echo "$REF_LINE" | field loss10) last=$(echo "$REF_LINE" | field last) (step $STEPS)" "$REF_RSS" ""
    LOSS10+=("$1|$(echo "$REF_LINE" | field loss10)")
}

# dp_measure passes `$DATA REPS`; the example takes `bench FILE STEPS`, so PROG's arguments
# are given through a wrapper that swaps DATA for `bench FILE`.
run_dp_rows_w6() {
    local i bin label
    for i in "${!DP_BINS[@]}"; do
        bin=${DP_BINS[$i]} label=${DP_LABELS[$i]}
        if [ ! -x "$bin" ]; then note "no dp binary at $bin: $label skipped"; continue; fi
        note "timing $label ($bin): $DP_RUNS x (steps=1, steps=$R)"
        # dp_measure BIN PROG R ARGS_BEFORE -- ARGS_AFTER runs `BIN run PROG ARGS_BEFORE R`.
        if dp_measure "$bin" "$PROG" "$R" bench "$INIT" --; then
            echo "$DP_LINE" >&2
            dp_row "$label" "(T(steps=$R) - T(steps=1)) / $((R - 1)), medians of $DP_RUNS processes"
        else
            note "$label FAILED"; STATUS=1
        fi
    done
    # The staged row (`bench FILE STEPS jit`: the training step under `jit`), on the first
    # binary; JIT=0 leaves it out.
    bin=${DP_BINS[0]} label="${DP_LABELS[0]} jit"
    if [ "${JIT:-1}" != 0 ] && [ -x "$bin" ]; then
        note "timing $label ($bin): $DP_RUNS x (steps=1, steps=$R)"
        if dp_measure "$bin" "$PROG" "$R" bench "$INIT" -- jit; then
            echo "$DP_LINE" >&2
            dp_row "$label" "(T(steps=$R) - T(steps=1)) / $((R - 1)), medians of $DP_RUNS processes"
        else
            note "$label FAILED"; STATUS=1
        fi
    fi
}

run_dp_rows_w6
# The references are this directory's script (the shared reference/ has no W6).
REF=$HERE
for sv in $REFS; do
    sys=${sv%%:*} var=${sv#*:}
    [ -x "$PY" ] || { note "no venv at $VENV: Python rows skipped"; break; }
    have_module "$sys" || { note "$sys not installed in $VENV: $sv skipped"; continue; }
    ref_run w6_transformer.py "$sys" "$var" --params "$INIT" --steps "$STEPS" || { STATUS=1; continue; }
    ref_row "$sys $var"
done

# The reference value is the first reference row's step-1 loss (there is no published one).
REF_VALUE=""
for r in "${ROWS[@]}"; do
    IFS='|' read -r name s v _ <<<"$r"
    case $name in dp*) ;; *) REF_VALUE=$v; break;; esac
done
[ -n "$REF_VALUE" ] || { IFS='|' read -r _ _ REF_VALUE _ <<<"${ROWS[0]}"; note "no reference row: dp's own loss shown as the value"; }
print_table "W6 transformer (d 64, 4 heads, 2 layers; batch 16 x 64 characters): seconds per training step; value = loss of step 1" \
    "$REF_VALUE" "s/step" "loss of step 10 (after nine AdamW updates)"
echo "  references: median of steps 3 .. $STEPS (w6_transformer.py); reference value = the first reference row's"
ref10=""
for r in "${LOSS10[@]}"; do
    IFS='|' read -r name l <<<"$r"
    [ -n "$ref10" ] || { case $name in dp*) ;; *) ref10=$l;; esac; }
done
for r in "${LOSS10[@]}"; do
    IFS='|' read -r name l <<<"$r"
    [ -n "$ref10" ] || break
    e=$(relerr "$l" "$ref10")
    # (a run of fewer than 10 steps prints loss10=nan, which fails here)
    ok=$(awk -v e="$e" -v t=$LOSS10_TOL 'BEGIN { print (e ~ /^[0-9.]+e[-+][0-9]+$/ && e + 0 <= t) ? "yes" : "NO" }')
    [ "$ok" = yes ] || STATUS=1
    printf '  %-20s loss10 = %.10g  rel.err %s (tol %s) %s\n' "$name" "$l" "$e" $LOSS10_TOL "$ok"
done
exit $STATUS
