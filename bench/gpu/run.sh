#!/usr/bin/env bash
# The GPU backend on a machine with an NVIDIA GPU: W5 matmul-grad and W2 mlp
# (../shared/bench/WORKLOADS.md) with `dp run --device gpu`, unstaged and staged (`jit`,
# bench/wK/jit.dp), beside PyTorch CUDA, and W6 (the Transformer, bench/w6) unstaged and
# staged, in one run;
# checks that the values agree and prints seconds, GFLOP/s and the ratios.
#
#   bench/gpu/run.sh            (from anywhere; a few minutes, most of it building dp)
#   DP_CPU=1 bench/gpu/run.sh   (also dp on the CPU, for the GPU/CPU ratio)
#
# Needs: a Vulkan driver for the GPU (the NVIDIA driver ships one; `vulkaninfo --summary` lists
# it), the benchmark data (make_data.py; written to $DATA when the reference venv exists), and a
# Python with torch built for CUDA: $PY_CUDA (default: the reference venv's python, see
# ../tensors_common.sh). Without torch the torch rows are skipped.
#
# dp runs bench/w5/matmul_grad.dp and bench/w2/mlp.dp unchanged, through a wrapper that adds
# `--device gpu` (so load_npy puts the data on the GPU); seconds per iteration (W5) or per epoch
# (W2) = (T(REPS = R) - T(REPS = 1)) / (R - 1), T the median wall time of DP_RUNS processes, so
# start-up, shader compilation, loading and warm-up cancel out. PyTorch reports the median of 10
# (W5) or 5 (W2) timed repeats after warm-up, synchronising the device around each.
# GFLOP/s: W5 counts 3 matmuls of 2·1024³; W2 counts, per step, the forward products
# (2·128·784·256 + 2·128·256·10) and the backward ones PyTorch computes (dW1, dW2, dH:
# 2·128·784·256 + 2·2·128·256·10), 64 steps per epoch.
# Agreement: every value (loss; W5 also the sums of dA and dB) within GPU_TOL (default 1e-4,
# relative) of PyTorch's, and the losses within GPU_TOL of WORKLOADS.md's references
# (float32 on a GPU sums in another order than on the CPU, hence not the CPU scripts' 1e-5/1e-6).
# Environment: DP, SKIP_BUILD, DATA, VENV, DP_RUNS (see ../tensors_common.sh), PY_CUDA,
# W5_REPS (default 201), W2_REPS (default 11), W6_STEPS (default 51), GPU_TOL, DP_CPU. The
# defaults make the timed repetitions long beside a process's start-up on an H200 (a W5
# iteration takes about a millisecond there; with 11 the estimate drowned in start-up noise
# and came out negative); on lavapipe, where only correctness counts, pass small ones.
# W6: `examples/transformer.dp bench FILE STEPS [jit]` (seconds per training step, as W5's; the
# first loss checked against bench/w6's references, 4.051776409); no CUDA reference row.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tensors_common.sh"
PY_CUDA=${PY_CUDA:-$PY}
W5_R=${W5_REPS:-201}
W2_R=${W2_REPS:-11}
TOL=${GPU_TOL:-1e-4}
W5_FLOP=$((3 * 2 * 1024 * 1024 * 1024))
W2_FLOP=$(( (2 * 128 * 784 * 256 + 2 * 128 * 256 * 10 + 2 * 128 * 784 * 256 + 2 * 2 * 128 * 256 * 10) * 64 ))

machine_note
if command -v nvidia-smi >/dev/null 2>&1; then
    note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
fi
ensure_data

REAL=${DP_BINS[0]}
[ -x "$REAL" ] || { note "no dp binary at $REAL"; exit 1; }
GPU_DP=$TMP/dp-gpu   # `dp run FILE ARGS` -> `dp run --device gpu FILE ARGS`
printf '#!/bin/sh\nsub=$1; shift\nexec "%s" "$sub" --device gpu "$@"\n' "$REAL" > "$GPU_DP"
chmod +x "$GPU_DP"
echo 'let () = println (show (sum (ones [4])))' > "$TMP/probe.dp"
if ! DP_GPU_TRACE=1 "$GPU_DP" run "$TMP/probe.dp" > "$TMP/probe.out" 2> "$TMP/probe.err"; then
    cat "$TMP/probe.err" >&2
    note "dp --device gpu found no usable adapter"
    exit 1
fi
note "dp: $(grep -m1 'adapter' "$TMP/probe.err" | sed 's/^dp gpu: //')"
HAVE_TORCH=0
if [ -x "$PY_CUDA" ] && "$PY_CUDA" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    HAVE_TORCH=1
else
    note "no CUDA-enabled torch at $PY_CUDA (set PY_CUDA): torch rows skipped"; STATUS=1
fi

gflops() { awk -v f="$1" -v s="$2" 'BEGIN { if (s + 0 > 0) printf "%.1f", f / s / 1e9; else printf "n/a" }'; }
# agree NAME X REFERENCE -> notes and fails when |X - REF| / |REF| > TOL
agree() {
    local e; e=$(relerr "$2" "$3")
    if awk -v e="$e" -v t="$TOL" 'BEGIN { exit !(e != "n/a" && e + 0 <= t) }'; then
        note "  $1: $2 vs $3 (rel $e) ok"
    else
        note "  $1: $2 vs $3 (rel $e > $TOL) DISAGREE"; STATUS=1
    fi
}
row() { printf '%-12s %12s %10s %20s %10s\n' "$@"; }
# gpu_measure LABEL PROG R ARGS_BEFORE -- ARGS_AFTER: dp_measure through the `--device gpu`
# wrapper; sets GPU_PER and GPU_VALUE (n/a and "" with a note when the run fails).
gpu_measure() {
    local label=$1
    shift
    GPU_PER=n/a GPU_VALUE=""
    if dp_measure "$GPU_DP" "$@"; then
        echo "$DP_LINE" >&2
        GPU_PER=$DP_PER GPU_VALUE=$(echo "$DP_LINE" | field value)
    else
        note "$label FAILED"; STATUS=1
    fi
}

# ---- W5 -------------------------------------------------------------------------------------
note "W5: dp --device gpu, $DP_RUNS x (reps=1, reps=$W5_R)"
W5_DA="" W5_DB=""
gpu_measure "dp gpu W5" "$ROOT/bench/w5/matmul_grad.dp" "$W5_R" "$DATA" --
W5_DP=$GPU_PER W5_DPV=$GPU_VALUE
if [ -n "$W5_DPV" ]; then
    W5_DA=$(echo "$DP_LINE" | field dA_sum) W5_DB=$(echo "$DP_LINE" | field dB_sum)
fi
# The same iterations staged (`jit`): the backward pass's elementwise chains are generated
# shaders (crates/dp-tensor/src/gpu/fused.rs).
gpu_measure "dp gpu jit W5" "$ROOT/bench/w5/jit.dp" "$W5_R" "$DATA" --
W5_JIT=$GPU_PER W5_JITV=$GPU_VALUE
W5_CPU=n/a
if [ "${DP_CPU:-0}" = 1 ] && dp_measure "$REAL" "$ROOT/bench/w5/matmul_grad.dp" "$W5_R" "$DATA" --; then
    W5_CPU=$DP_PER
fi
W5_T=n/a W5_TV="" W5_TDA="" W5_TDB=""
if [ $HAVE_TORCH = 1 ] && line=$("$PY_CUDA" "$HERE/torch_cuda.py" w5 "$DATA" | grep '^W5 '); then
    echo "$line" >&2
    W5_T=$(echo "$line" | field seconds) W5_TV=$(echo "$line" | field value)
    W5_TDA=$(echo "$line" | field dA_sum) W5_TDB=$(echo "$line" | field dB_sum)
fi
agree "W5 dp loss vs WORKLOADS" "$W5_DPV" 415.6228
agree "W5 dp jit loss vs WORKLOADS" "$W5_JITV" 415.6228
if [ -n "$W5_TV" ]; then
    agree "W5 dp loss vs torch" "$W5_DPV" "$W5_TV"
    agree "W5 dp dA_sum vs torch" "$W5_DA" "$W5_TDA"
    agree "W5 dp dB_sum vs torch" "$W5_DB" "$W5_TDB"
fi

# ---- W2 -------------------------------------------------------------------------------------
note "W2: dp --device gpu, $DP_RUNS x (reps=1, reps=$W2_R)"
gpu_measure "dp gpu W2" "$ROOT/bench/w2/mlp.dp" "$W2_R" "$DATA" --
W2_DP=$GPU_PER W2_DPV=$GPU_VALUE
gpu_measure "dp gpu jit W2" "$ROOT/bench/w2/jit.dp" "$W2_R" "$DATA" --
W2_JIT=$GPU_PER W2_JITV=$GPU_VALUE
W2_CPU=n/a
if [ "${DP_CPU:-0}" = 1 ] && dp_measure "$REAL" "$ROOT/bench/w2/mlp.dp" "$W2_R" "$DATA" --; then
    W2_CPU=$DP_PER
fi
W2_T=n/a W2_TV=""
if [ $HAVE_TORCH = 1 ] && line=$("$PY_CUDA" "$HERE/torch_cuda.py" w2 "$DATA" | grep '^W2 '); then
    echo "$line" >&2
    W2_T=$(echo "$line" | field seconds) W2_TV=$(echo "$line" | field value)
fi
agree "W2 dp loss vs WORKLOADS" "$W2_DPV" 2.051475525
agree "W2 dp jit loss vs WORKLOADS" "$W2_JITV" 2.051475525
[ -z "$W2_TV" ] || agree "W2 dp loss vs torch" "$W2_DPV" "$W2_TV"

# ---- W6 -------------------------------------------------------------------------------------
# The example reads its text relative to the repository root; its initial weights are dp's.
W6_R=${W6_STEPS:-51}
W6_INIT=$(cd "$DATA" && pwd)/w6_init.safetensors
W6_DP=n/a W6_DPV="" W6_JIT=n/a W6_JITV=""
cd "$ROOT" || exit 2
if "$REAL" run examples/transformer.dp init "$W6_INIT"; then
    note "W6: dp --device gpu, $DP_RUNS x (steps=1, steps=$W6_R), unstaged and staged"
    gpu_measure "dp gpu W6" examples/transformer.dp "$W6_R" bench "$W6_INIT" --
    W6_DP=$GPU_PER W6_DPV=$GPU_VALUE
    gpu_measure "dp gpu jit W6" examples/transformer.dp "$W6_R" bench "$W6_INIT" -- jit
    W6_JIT=$GPU_PER W6_JITV=$GPU_VALUE
    agree "W6 dp loss vs bench/w6's references" "$W6_DPV" 4.051776409
    agree "W6 dp jit loss vs bench/w6's references" "$W6_JITV" 4.051776409
else
    note "could not write $W6_INIT: W6 skipped"; STATUS=1
fi

# ---- table ----------------------------------------------------------------------------------
echo
echo "W5 matmul-grad, A, B 1024 x 1024 float32: seconds per iteration (loss, dA, dB)"
row system s/iter GFLOP/s value "dp/this"
row "dp gpu" "$W5_DP" "$(gflops $W5_FLOP "$W5_DP")" "${W5_DPV:-n/a}" 1
row "dp gpu jit" "$W5_JIT" "$(gflops $W5_FLOP "$W5_JIT")" "${W5_JITV:-n/a}" "$(ratio "$W5_DP" "$W5_JIT")"
row "torch cuda" "$W5_T" "$(gflops $W5_FLOP "$W5_T")" "${W5_TV:-n/a}" "$(ratio "$W5_DP" "$W5_T")"
[ "${DP_CPU:-0}" != 1 ] || row "dp cpu" "$W5_CPU" "$(gflops $W5_FLOP "$W5_CPU")" "" "$(ratio "$W5_DP" "$W5_CPU")"
echo
echo "W2 mlp, 784-256-10, batch 128: seconds per epoch (64 SGD steps), mean loss of epoch 2"
row system s/epoch GFLOP/s value "dp/this"
row "dp gpu" "$W2_DP" "$(gflops $W2_FLOP "$W2_DP")" "${W2_DPV:-n/a}" 1
row "dp gpu jit" "$W2_JIT" "$(gflops $W2_FLOP "$W2_JIT")" "${W2_JITV:-n/a}" "$(ratio "$W2_DP" "$W2_JIT")"
row "torch cuda" "$W2_T" "$(gflops $W2_FLOP "$W2_T")" "${W2_TV:-n/a}" "$(ratio "$W2_DP" "$W2_T")"
[ "${DP_CPU:-0}" != 1 ] || row "dp cpu" "$W2_CPU" "$(gflops $W2_FLOP "$W2_CPU")" "" "$(ratio "$W2_DP" "$W2_CPU")"
echo
echo "W6 transformer, batch 16 x 64, d 64: seconds per training step (loss, gradient, AdamW)"
row system s/step "" "first loss" "dp/this"
row "dp gpu" "$W6_DP" "" "${W6_DPV:-n/a}" 1
row "dp gpu jit" "$W6_JIT" "" "${W6_JITV:-n/a}" "$(ratio "$W6_DP" "$W6_JIT")"
echo
echo "  dp/this = dp gpu seconds / this row's (below 1: dp is faster); values agree within $TOL: $([ $STATUS = 0 ] && echo yes || echo NO, see the notes above)"
exit $STATUS
