#!/usr/bin/env bash
# `checkpoint` trades memory for time (issue 15): W1's value_and_grad at N iterations, plain
# (bench/w1/w1.dp, its warm-up call only: REPS = 0) and with the loop in checkpointed chunks
# (bench/w1/checkpoint.dp), one process each under GNU time: peak RSS, wall time, and both
# printed results (the value must agree, the gradient to rounding: the chunks sum it in
# another order).
#
#   bench/w1/checkpoint.sh [N] [CHUNK]      (defaults: N = 10000000, CHUNK = 1000)
#
# The plain run at N = 10^7 holds ~7 GB of adjoint records (136 bytes per operation,
# bench/RESULTS.md). DP=path picks the binary (default <repo>/target/release/dp; no build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
N=${1:-10000000}
CHUNK=${2:-1000}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

measure() { # name, then the command
    local name=$1
    shift
    /usr/bin/time -v "$@" >"$TMP/$name.out" 2>"$TMP/$name.time"
    local kb wall
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$TMP/$name.time")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$TMP/$name.time")
    echo "$name|$kb|$wall|$(tail -1 "$TMP/$name.out")"
}

plain=$(measure plain "$DP" run "$HERE/w1.dp" "$N" 0)
ckpt=$(measure checkpointed "$DP" run "$HERE/checkpoint.dp" "$N" "$CHUNK")
printf '%-13s %12s %10s  %s\n' run "peak RSS MB" wall result
for row in "$plain" "$ckpt"; do
    IFS='|' read -r name kb wall out <<<"$row"
    printf '%-13s %12.1f %10s  %s\n' "$name" "$(echo "$kb / 1024" | bc -l)" "$wall" "$out"
done
p=$(echo "$plain" | cut -d'|' -f2)
c=$(echo "$ckpt" | cut -d'|' -f2)
echo "checkpointed / plain peak RSS: $(echo "scale=4; $c / $p" | bc -l)"
