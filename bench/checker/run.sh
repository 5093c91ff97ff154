#!/usr/bin/env bash
# The type checker's speed on large inputs (issue "Types you can trust", Performance): `dp check`
# on a 500,000-definition file, on a 100,000-deep nested `let`, and — for a checker that refuses
# deep nesting — on the same number of `let`s split into items 1,900 deep. Side by side with
# another build of dp given as BEFORE=path/to/dp (e.g. one built at an earlier commit).
#   BEFORE=/path/to/old/dp bench/checker/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DP=${DP:-target/release/dp}
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q
dir=$(mktemp -d)
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
with open(f"{d}/defs.dp", "w") as f:
    for i in range(500000):
        f.write(f"let f{i} x = x * {i % 97} + {i}\n")
n = 100000
with open(f"{d}/deep_let.dp", "w") as f:
    f.write("let r =\n" + "".join(f"  let x{i} = {i} in\n" for i in range(n)) + f"  x{n - 1}\n")
with open(f"{d}/chunked_let.dp", "w") as f:
    for c in range(53):
        f.write(f"let r{c} =\n" + "".join(f"  let x{i} = {i} in\n" for i in range(1900)) + "  x1899\n")
PY
best() { # best of 3 wall seconds and the peak RSS of that run, or "refused"
  local bin=$1 file=$2 b="" m=""
  for _ in 1 2 3; do
    if ! /usr/bin/time -o "$dir/time" -f "%e %M" "$bin" check "$file" >/dev/null 2>&1; then echo "refused"; return; fi
    read -r t mem <"$dir/time"
    if [ -z "$b" ] || awk "BEGIN{exit !($t < $b)}"; then b=$t; m=$mem; fi
  done
  echo "$b s, $((m / 1024)) MB"
}
printf "| input | this dp | before |\n|---|---|---|\n"
for f in defs deep_let chunked_let; do
  printf "| %s | %s | %s |\n" "$f.dp ($(du -h "$dir/$f.dp" | cut -f1))" "$(best "$DP" "$dir/$f.dp")" \
    "$( [ -n "${BEFORE:-}" ] && best "$BEFORE" "$dir/$f.dp" || echo -)"
done
rm -rf "$dir"
