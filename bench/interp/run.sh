#!/usr/bin/env bash
# Interpreter speed: naive `fib 30` and a 10-million-iteration tail-recursive loop, in dp,
# CPython 3 and OCaml bytecode (ocamlc + ocamlrun), timed side by side in one run.
#
#   bench/interp/run.sh            (from anywhere)
#
# Environment:
#   DP=path        dp binary (default: <repo>/target/release/dp, built first with
#                  `cargo build --release` unless SKIP_BUILD=1)
#   SKIP_BUILD=1   do not run cargo
#   PYTHON=cmd     CPython (default python3; pyenv shims are resolved to the real executable,
#                  because a shim is a shell script that adds its own start-up time)
#   RUNS=n         timed runs per program (default 5; the median is reported), after 1 warm-up
#   BUILD_DIR=dir  where the OCaml bytecode is compiled (default /tmp/dp-bench-interp)
#   NO_HYPERFINE=1 use the date-based loop even when hyperfine is installed
#
# Times are wall-clock seconds of the whole process (start-up included: a few ms for dp and
# ocamlrun, ~15-20 ms for CPython). Uses hyperfine when installed, else a date-based loop.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUNS=${RUNS:-5}
BUILD_DIR=${BUILD_DIR:-/tmp/dp-bench-interp}
DP=${DP:-$ROOT/target/release/dp}
PY=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)') || { echo "no python3" >&2; exit 1; }

PROGRAMS="fib loop"
declare -A EXPECT=([fib]=832040 [loop]=50000005000000)

note() { echo "# $*" >&2; }

# ---- build ---------------------------------------------------------------------------------
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    note "cargo build --release (in $ROOT)"
    (cd "$ROOT" && cargo build --release) >&2 || note "dp build FAILED; dp columns will be n/a"
fi
DP_OK=1
if [ ! -x "$DP" ]; then note "no dp binary at $DP"; DP_OK=0; fi

OCAML_OK=1
if command -v ocamlc >/dev/null && command -v ocamlrun >/dev/null; then
    mkdir -p "$BUILD_DIR"
    for p in $PROGRAMS; do
        cp "$HERE/$p.ml" "$BUILD_DIR/$p.ml"
        (cd "$BUILD_DIR" && ocamlc -o "$p.byte" "$p.ml") || OCAML_OK=0
    done
    note "OCaml $(ocamlc -version) bytecode in $BUILD_DIR"
else
    note "ocamlc/ocamlrun not found (apt-get install -y ocaml); OCaml columns will be n/a"
    OCAML_OK=0
fi
note "CPython: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
note "machine: $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"

cmd_for() {   # system program -> command line (no spaces in paths assumed by hyperfine -N)
    case $1 in
        dp) echo "$DP run $HERE/$2.dp" ;;
        py) echo "$PY $HERE/$2.py" ;;
        ml) echo "ocamlrun $BUILD_DIR/$2.byte" ;;
    esac
}
available() {
    case $1 in dp) [ $DP_OK = 1 ] ;; ml) [ $OCAML_OK = 1 ] ;; py) true ;; esac
}

# median wall seconds of RUNS runs of a command line (after one warm-up run)
time_cmd() {
    local cmd=$1
    if [ "${NO_HYPERFINE:-0}" != 1 ] && command -v hyperfine >/dev/null; then
        local csv
        csv=$(mktemp)
        hyperfine -N --warmup 1 --runs "$RUNS" --style none --export-csv "$csv" "$cmd" >/dev/null 2>&1 \
            || { rm -f "$csv"; return 1; }
        awk -F, 'NR == 2 { printf "%.4f\n", $4 }' "$csv"   # command,mean,stddev,median,...
        rm -f "$csv"
    else
        $cmd >/dev/null 2>&1 || return 1
        local i t0 t1
        for i in $(seq "$RUNS"); do
            t0=$(date +%s.%N)
            $cmd >/dev/null 2>&1 || return 1
            t1=$(date +%s.%N)
            awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.6f\n", a - b }'
        done | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f\n", m }'
    fi
}

# ---- check results, then time ----------------------------------------------------------------
declare -A SECS
STATUS=0
for p in $PROGRAMS; do
    for s in dp py ml; do
        SECS[$s.$p]=n/a
        available $s || continue
        cmd=$(cmd_for $s $p)
        out=$($cmd 2>/dev/null | tr -d '[:space:]')
        if [ "$out" != "${EXPECT[$p]}" ]; then
            note "MISMATCH: '$cmd' printed '$out', expected ${EXPECT[$p]}"
            SECS[$s.$p]=wrong
            STATUS=1
            continue
        fi
        note "timing: $cmd"
        SECS[$s.$p]=$(time_cmd "$cmd") || { SECS[$s.$p]=failed; STATUS=1; }
    done
done

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else printf "n/a" }'
}

echo
if [ "${NO_HYPERFINE:-0}" != 1 ] && command -v hyperfine >/dev/null; then timer=$(hyperfine --version); else timer="date loop"; fi
echo "Interpreter benchmarks: median of $RUNS runs, wall seconds per process ($timer)"
printf '%-28s %10s %10s %12s %10s %10s\n' program "dp s" "CPython s" "OCaml bc s" dp/CPython dp/OCaml
for p in $PROGRAMS; do
    case $p in fib) label="fib 30";; loop) label="loop 10M (tail calls)";; esac
    printf '%-28s %10s %10s %12s %10s %10s\n' "$label" "${SECS[dp.$p]}" "${SECS[py.$p]}" "${SECS[ml.$p]}" \
        "$(ratio "${SECS[dp.$p]}" "${SECS[py.$p]}")" "$(ratio "${SECS[dp.$p]}" "${SECS[ml.$p]}")"
done
echo "results: fib 30 = ${EXPECT[fib]}, loop = ${EXPECT[loop]} (every available side checked)"
echo "machine: $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
exit $STATUS
