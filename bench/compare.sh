#!/usr/bin/env bash
# Two dp binaries side by side on the interpreter benchmarks and the workloads W1–W5 (issue 11:
# "no speed regression, each within 3%"), in one run: for each program, RUNS rounds, each
# running BEFORE then AFTER (so drift and other load hit both alike); the median whole-process
# wall time of each and their ratio. Every program prints its result; the two binaries must
# print the same last line (checked).
#
#   BEFORE=/path/to/old/dp AFTER=target/release/dp bench/compare.sh
#
# Environment:
#   BEFORE, AFTER  the dp binaries (AFTER defaults to <repo>/target/release/dp; no build is run)
#   RUNS=k         rounds (default 5)
#   DATA=dir       make_data.py's output for W2–W5 (default /tmp/bench-data; W2–W5 are
#                  skipped when it is missing)
#   ONLY="a b"     a subset of the program names below
#   CLOCK=cpu      time the process's user + system CPU seconds instead of its wall time
#                  (GNU time): on a machine shared with other work, CPU time moves far less
#                  with the load than wall time does (single-threaded programs; W2/W5's
#                  threaded products then count every thread's time)
#
# Whole-process times include start-up, checking and each program's warm-up, the same work
# for both binaries: ratios are what this measures, not per-step times (the w*/run.sh
# scripts measure those against the reference systems).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AFTER=${AFTER:-$ROOT/target/release/dp}
BEFORE=${BEFORE:?set BEFORE to the dp binary to compare against}
RUNS=${RUNS:-5}
DATA=${DATA:-/tmp/bench-data}

# name|program and arguments (relative to bench/)
PROGRAMS=(
    "fib|interp/fib.dp"
    "loop|interp/loop.dp"
    "w1|w1/w1.dp 100000 3"
    "w2|w2/mlp.dp $DATA 1"
    "w3|w3/treelstm.dp $DATA 1"
    "w4|w4/char_rnn.dp $DATA 1"
    "w5|w5/matmul_grad.dp $DATA 3"
    "nested|nested/deep.dp 80000"
)

once() {   # binary program args... -> "seconds last-line"
    local bin=$1 t0 t1 out
    shift
    if [ "${CLOCK:-wall}" = cpu ]; then
        out=$(/usr/bin/time -f "%U %S" -o /tmp/compare.time "$bin" run "$@" 2>/dev/null | tail -1) || out="FAILED"
        echo "$(awk '{ printf "%.4f", $1 + $2 }' /tmp/compare.time) $out"
        return
    fi
    t0=$(date +%s.%N)
    out=$("$bin" run "$@" 2>/dev/null | tail -1) || out="FAILED"
    t1=$(date +%s.%N)
    echo "$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.4f", a - b }') $out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# machine: $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo || echo 'no avx512'); load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| program | before (s) | after (s) | after / before |"
echo "|---|---|---|---|"
for entry in "${PROGRAMS[@]}"; do
    name=${entry%%|*}
    read -r -a cmd <<< "${entry#*|}"
    if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then continue; fi
    if [[ $name == w[2-5] ]] && [ ! -f "$DATA/w2_X.npy" ]; then echo "| $name | (no data in $DATA) | | |"; continue; fi
    cmd[0]=$HERE/${cmd[0]}
    : > /tmp/compare.before; : > /tmp/compare.after
    for _ in $(seq "$RUNS"); do
        b=$(once "$BEFORE" "${cmd[@]}"); a=$(once "$AFTER" "${cmd[@]}")
        echo "${b%% *}" >> /tmp/compare.before; echo "${a%% *}" >> /tmp/compare.after
        if [ "${b#* }" != "${a#* }" ]; then echo "# $name: outputs differ: '${b#* }' vs '${a#* }'" >&2; fi
        echo "# $name: before ${b%% *} s, after ${a%% *} s (${a#* })" >&2
    done
    tb=$(median < /tmp/compare.before); ta=$(median < /tmp/compare.after)
    echo "| $name | $tb | $ta | $(awk -v a="$ta" -v b="$tb" 'BEGIN { printf "%.3f", a / b }') |"
done
