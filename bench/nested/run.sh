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

program() { echo "$HERE/deep.dp"; }
expected() { echo "$1.0"; }

. "$ROOT/bench/scaling_common.sh"
scaling_table
