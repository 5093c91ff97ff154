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

program() { echo "$HERE/deep_reset.dp"; }
expected() { echo "$1.0"; }

. "$ROOT/bench/scaling_common.sh"
scaling_table
