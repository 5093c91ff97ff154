#!/usr/bin/env bash
# Two live reverse levels under a deep recursion (issue 11, "jvp as a delimiter"): the time of
# `grad (fun x -> grad (fun y -> deep n x y) 1.0) 2.0` (deep.dp) at n = 20k, 40k and 80k. Every
# operation in `deep` mixes the two levels and must find which is nested in the other; that
# costs O(segments) when each level is a delimiter, O(stack depth) when it meant reading
# frames (quadratic overall). Goal: the 80k time within 5x the 20k time (linear growth is 4x).
#
#   bench/nested/run.sh            (from anywhere)
#
# Environment:
#   DP=path        dp binary (default <repo>/target/release/dp, built first unless SKIP_BUILD=1)
#   BEFORE=path    a second dp binary, timed beside it in the same run (e.g. an older commit)
#   SKIP_BUILD=1   do not run cargo
#   RUNS=k         processes per point, the median reported (default 3)
#   SIZES="..."    the values of n (default "20000 40000 80000")
#
# Times are wall-clock seconds of the whole process (start-up, parse and check included: a
# few ms).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DP=${DP:-$ROOT/target/release/dp}
RUNS=${RUNS:-3}
SIZES=${SIZES:-"20000 40000 80000"}

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    (cd "$ROOT" && cargo build --release --bin dp) >&2 || { echo "dp build failed" >&2; exit 1; }
fi

median_time() {   # binary n -> median wall seconds of RUNS processes (checks the answer)
    local bin=$1 n=$2 times=() out t0 t1
    for _ in $(seq "$RUNS"); do
        t0=$(date +%s.%N)
        out=$("$bin" run "$HERE/deep.dp" "$n") || { echo "n/a"; return; }
        t1=$(date +%s.%N)
        [ "$out" = "$n.0" ] || { echo "wrong:$out"; return; }
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
    echo "$line $(echo "$last / $first" | bc -l | xargs printf '%.2f')x |"
}

header="| dp |"; sep="|---|"
for n in $SIZES; do header="$header n = $n |"; sep="$sep---|"; done
echo "$header last / first |"
echo "$sep---|"
row "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo dp)" "$DP"
if [ -n "${BEFORE:-}" ]; then row "before ($BEFORE)" "$BEFORE"; fi
