#!/usr/bin/env bash
# load_csv on a ~100 MB numeric CSV (issue 13, Performance: faster than numpy.loadtxt, within
# 2x of pandas.read_csv's C parser), side by side in the same run. Each is timed in its own
# process, best of 3, for reading the file into a float32 array (dp: `load_csv`, then the
# table's size is printed so the work cannot be skipped; the start-up of each process is
# measured separately and subtracted: `dp` loading its prelude, Python importing NumPy/pandas).
#   PYTHON=/path/to/venv/bin/python bench/io/csv.sh      # a venv with numpy and pandas
set -euo pipefail
cd "$(dirname "$0")/../.."
DP=${DP:-target/release/dp}
PY=${PYTHON:-python3}
ROWS=${ROWS:-750000}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PY" - "$dir" "$ROWS" <<'PY'
import sys, numpy as np
d, rows = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
a = rng.standard_normal((rows, 10)).astype(np.float32)
with open(f"{d}/data.csv", "w") as f:
    f.write(",".join(f"c{i}" for i in range(10)) + "\n")
    np.savetxt(f, a, delimiter=",", fmt="%.6e")
PY
cat >"$dir/load.dp" <<DP
let t = load_csv "$dir/data.csv"
let () = println (shape t)
DP
cat >"$dir/empty.dp" <<DP
let () = println [1000000, 10]
DP
cat >"$dir/np_load.py" <<PY
import sys, numpy as np
if sys.argv[1] == "load":
    a = np.loadtxt("$dir/data.csv", delimiter=",", dtype=np.float32, skiprows=1)
    print(list(a.shape))
PY
cat >"$dir/pd_load.py" <<PY
import sys, numpy as np, pandas as pd
if sys.argv[1] == "load":
    a = pd.read_csv("$dir/data.csv", dtype=np.float32, engine="c").to_numpy()
    print(list(a.shape))
PY
best() { # best of 3 wall seconds of a command
  local b=""
  for _ in 1 2 3; do
    local s e
    s=$(date +%s.%N)
    "$@" >/dev/null || { echo "failed: $*" >&2; kill $$; }
    e=$(date +%s.%N)
    local t
    t=$(awk "BEGIN{print $e - $s}")
    if [ -z "$b" ] || awk "BEGIN{exit !($t < $b)}"; then b=$t; fi
  done
  echo "$b"
}
net() { awk "BEGIN{printf \"%.2f\", $1 - $2}"; }
size=$(du -m "$dir/data.csv" | cut -f1)
dp_t=$(net "$(best "$DP" run "$dir/load.dp")" "$(best "$DP" run "$dir/empty.dp")")
np_t=$(net "$(best "$PY" "$dir/np_load.py" load)" "$(best "$PY" "$dir/np_load.py" none)")
pd_t=$(net "$(best "$PY" "$dir/pd_load.py" load)" "$(best "$PY" "$dir/pd_load.py" none)")
echo "load_csv of a ${size} MB numeric CSV ($ROWS rows x 10 columns, %.6e), best of 3, start-up subtracted"
printf "| reader | seconds |\n|---|---|\n"
printf "| dp load_csv | %s |\n| numpy.loadtxt (float32) | %s |\n| pandas.read_csv (C engine, float32) | %s |\n" "$dp_t" "$np_t" "$pd_t"
