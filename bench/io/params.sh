#!/usr/bin/env bash
# Checkpoints: dp's save_params/load_params beside Python's safetensors.numpy save_file/load_file
# on the same 100.7 MB of float32 parameters (24 layers: a 1024×1024 matrix and a 1024 bias),
# in one run on one machine. Each side times only the save and the load (best of REPS, in its
# own process, after the parameters are made), writing to the same directory.
#
#   bench/io/params.sh
#
# Environment:
#   DP=path         dp binary (default <repo>/target/release/dp, built first unless SKIP_BUILD=1)
#   PY=path         Python with numpy and safetensors (default /tmp/dp-pyvenv/bin/python)
#   REPS=n          timed repetitions, best taken (default 5)
#   DIR=dir         where the files go (default a fresh temporary directory, removed after; a
#                   DIR you name is kept)
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
PY=${PY:-/tmp/dp-pyvenv/bin/python}
REPS=${REPS:-5}
if [ -z "${DIR:-}" ]; then DIR=$(mktemp -d); MADE=1; else MADE=""; fi
if [ -z "${SKIP_BUILD:-}" ] && [ "$DP" = "$ROOT/target/release/dp" ]; then
  (cd "$ROOT" && cargo build --release -q)
fi
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  commit: $(git -C "$ROOT" rev-parse --short HEAD)  cpus: $(nproc)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')  avx512: $(grep -c avx512f /proc/cpuinfo || true) of $(nproc) cpus"
"$PY" -c 'import numpy, safetensors; print("numpy", numpy.__version__, " safetensors", safetensors.__version__)'
"$DP" run "$HERE/params.dp" "$DIR/dp.safetensors" "$REPS"
"$PY" - "$DIR/py.safetensors" "$REPS" <<'PYEOF'
import sys, time
import numpy as np
from safetensors.numpy import save_file, load_file
path, reps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
params = {}
for i in range(24):
    params[f"{i}.w"] = rng.standard_normal((1024, 1024), dtype=np.float32)
    params[f"{i}.b"] = np.zeros(1024, dtype=np.float32)
def best(f):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
    return min(times)
save_s = best(lambda: save_file(params, path))
load_s = best(lambda: load_file(path))
print(f"safetensors.numpy  save {save_s:.3f} s   load {load_s:.3f} s")
PYEOF
# Each side reads the other's file (names and shapes agree).
"$PY" -c "
import sys; from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert sorted(a) == sorted(b) and all(a[k].shape == b[k].shape for k in a), 'names or shapes differ'
print('files agree:', len(a), 'tensors,', sum(v.nbytes for v in a.values()), 'bytes')
" "$DIR/dp.safetensors" "$DIR/py.safetensors"
ls -l "$DIR"/*.safetensors | awk '{print $5, $NF}'
if [ -n "$MADE" ]; then rm -rf "$DIR"; fi
