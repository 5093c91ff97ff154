#!/usr/bin/env bash
# Instruction counts of two dp binaries on bench/compare.sh's programs (valgrind's callgrind,
# whole process, DP_NUM_THREADS=1): the one before/after measure that the load of a shared
# machine does not move (issue 11's "within 3%" when wall time is too noisy to decide it).
# About 50× slower than a plain run; W3 takes several minutes per binary.
#
#   BEFORE=/path/to/old/dp AFTER=target/release/dp bench/instructions.sh
#
# Environment: BEFORE, AFTER (as compare.sh), DATA=dir (make_data.py's output, default
# /tmp/bench-data), ONLY="fib w2" (a subset of the names below).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
AFTER=${AFTER:-$HERE/../target/release/dp}
BEFORE=${BEFORE:?set BEFORE to the dp binary to compare against}
DATA=${DATA:-/tmp/bench-data}
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 1; }
count() {   # binary program args... -> instructions
    local bin=$1
    shift
    DP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" run "$@" 2>&1 \
        | sed -n 's/.*Collected : //p'
}
echo "| program | before | after | after / before |"
echo "|---|---|---|---|"
while read -r name prog args; do
    if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then continue; fi
    read -r -a argv <<< "$args"
    b=$(count "$BEFORE" "$HERE/$prog" "${argv[@]}")
    a=$(count "$AFTER" "$HERE/$prog" "${argv[@]}")
    echo "| $name | $b | $a | $(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.3f", a / b }') |"
done <<LIST
fib interp/fib.dp
loop interp/loop.dp
w1 w1/w1.dp 100000 1
w2 w2/mlp.dp $DATA 1
w3 w3/treelstm.dp $DATA 1
w5 w5/matmul_grad.dp $DATA 1
nested nested/deep.dp 80000
LIST
