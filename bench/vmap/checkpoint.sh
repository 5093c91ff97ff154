#!/usr/bin/env bash
# `checkpoint` inside `vmap` under an outer `grad` trades memory for time (issue 15): the
# gradient of a shared parameter through B examples' chains of L steps (checkpoint.dp), plain
# and in checkpointed chunks, one process each under GNU time: peak RSS, wall time and both
# results (value and gradient must agree).
#
#   bench/vmap/checkpoint.sh [B D L CHUNK]      (defaults: 128 512 2000 50)
#
# DP=path picks the binary (default <repo>/target/release/dp; no build).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
B=${1:-128} D=${2:-512} L=${3:-2000} CHUNK=${4:-50}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "B=$B D=$D L=$L CHUNK=$CHUNK, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for c in 0 "$CHUNK"; do
    /usr/bin/time -v "$DP" run "$HERE/checkpoint.dp" "$B" "$D" "$L" "$c" >"$TMP/out" 2>"$TMP/time"
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$TMP/time")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$TMP/time")
    printf 'chunk %-5s peak RSS %8.1f MB  wall %s  %s\n' "$c" "$(echo "$kb / 1024" | bc -l)" "$wall" "$(cat "$TMP/out")"
done
