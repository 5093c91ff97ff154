#!/usr/bin/env bash
# Handler lookup under many suspended segments (issue 16, point 10): the time of
# `grad (fun x -> down n x) 1.0` (deep_reset.dp), whose recursion opens a `reset` at every
# level, at n = 8k, 16k, 32k and 64k. Each tracked operation finds its `grad`'s handler; that
# must cost O(live differentiation levels), not O(segments) (quadratic overall).
# Goal: the 64k time within 10x the 8k time (linear growth is 8x).
#
#   bench/handlers/run.sh            (from anywhere)
#
# Environment:
#   DP=path        dp binary (default <repo>/target/release/dp, built first unless SKIP_BUILD=1)
#   BEFORE=path    a second dp binary, timed beside it in the same run (e.g. an older commit)
#   SKIP_BUILD=1   do not run cargo
#   RUNS=k         processes per point, the median reported (default 3)
#   SIZES="..."    the values of n (default "8000 16000 32000 64000")
#
# Times are wall-clock seconds of the whole process (start-up, parse and check included).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
RUNS=${RUNS:-3}
SIZES=${SIZES:-"8000 16000 32000 64000"}

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    (cd "$ROOT" && cargo build --release --bin dp) >&2 || { echo "dp build failed" >&2; exit 1; }
fi

median_time() {   # binary n -> median wall seconds of RUNS processes (checks the answer)
    local bin=$1 n=$2 times=() out t0 t1 want
    want=$(python3 -c "print(repr((1 + 1e-9) ** $n)[:8])")
    for _ in $(seq "$RUNS"); do
        t0=$(date +%s.%N)
        out=$("$bin" run "$HERE/deep_reset.dp" "$n") || { echo "n/a"; return; }
        t1=$(date +%s.%N)
        [ "${out:0:8}" = "$want" ] || { echo "wrong:$out"; return; }
        times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p" | xargs printf '%.3f'
}

row() {   # label binary
    local label=$1 bin=$2 first="" line="| $1 |" t
    for n in $SIZES; do
        t=$(median_time "$bin" "$n")
        line="$line $t s |"
        [ -z "$first" ] && first=$t
        last=$t
    done
    echo "$line $(echo "$last / $first" | bc -l 2>/dev/null | xargs printf '%.2f')x |"
}

header="| dp |"; sep="|---|"
for n in $SIZES; do header="$header n = $n |"; sep="$sep---|"; done
echo "$header last / first |"
echo "$sep---|"
row "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo dp)" "$DP"
if [ -n "${BEFORE:-}" ]; then row "before ($BEFORE)" "$BEFORE"; fi
