# Shared by bench/w2 … bench/w5/run.sh (sourced, not run): locating the repository, the
# references and the data, building dp, timing dp by whole processes, running the Python
# references under GNU time, and printing the comparison table.
#
# The sourcing script sets HERE (its own directory) first. Environment (see bench/README.md):
#   DP=path            dp binary (default: <repo>/target/release/dp, or <repo>/target/<features>/
#                      release/dp when FEATURES is set; built first unless SKIP_BUILD=1)
#   FEATURES=f         cargo features of the dp build (built in its own target directory, so the
#                      default build in target/release is left alone)
#   ALSO_FEATURES=f    a second dp row, built with features f ("default" = no features); its
#                      binary can be given as ALSO_DP=path
#   SKIP_BUILD=1       run no cargo build
#   DATA=dir           make_data.py's output (default /tmp/bench-data; written if missing)
#   VENV=dir           reference venv (default $HOME/.venvs/dp-reference); Python rows skipped
#                      without it; rows of a module that is not installed are skipped
#   REFS="sys:variant …"  which reference rows to run (each script has its default)
#   DP_RUNS=k          processes per dp measurement, median taken (default 3)
#   DP_REPS=R          repetitions in the long dp run (each script has its default)
#   JIT=0              no `dp jit` row (the workload's step staged, where the script has one)

set -u
ROOT=$(cd "$HERE/../.." && pwd)
REF=$(cd "$ROOT/../shared/bench/reference" 2>/dev/null && pwd) || REF=""
VENV=${VENV:-$HOME/.venvs/dp-reference}
PY=$VENV/bin/python
DATA=${DATA:-/tmp/bench-data}
DP_RUNS=${DP_RUNS:-3}
TIME=/usr/bin/time
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
STATUS=0

note() { echo "# $*" >&2; }
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -1; }   # key=value of a line
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else printf "%.4f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3g", a / b; else printf "n/a" }'; }
relerr() { awk -v x="$1" -v r="$2" 'BEGIN { if (x == "") { print "n/a"; exit } d = (x - r) / r; if (d < 0) d = -d; printf "%.1e", d + 0 }'; }
mb() { awk -v k="$1" 'BEGIN { if (k + 0 > 0) printf "%.0f", k / 1024; else printf "n/a" }'; }

features_label() { case ${1:-} in ""|default) echo "";; *) echo " [$1]";; esac; }
target_of() {   # features -> cargo target directory
    case ${1:-} in ""|default) echo "$ROOT/target";; *) echo "$ROOT/target/$(echo "$1" | tr ' ,' '__')";; esac
}
build_dp() {   # features
    local f=${1:-}
    case $f in
        ""|default) note "cargo build --release (in $ROOT)"
                    (cd "$ROOT" && cargo build --release) >&2 ;;
        *) note "cargo build --release --features $f --target-dir $(target_of "$f")"
           (cd "$ROOT" && cargo build --release --features "$f" --target-dir "$(target_of "$f")") >&2 ;;
    esac || note "dp build ($f) FAILED"
}

FEATURES=${FEATURES:-}
DP_SET_BY_USER=${DP:+1}
DP=${DP:-$(target_of "$FEATURES")/release/dp}
DP_LABELS=("dp$(features_label "$FEATURES")")
DP_BINS=("$DP")
if [ -n "${ALSO_FEATURES:-}" ]; then
    DP_LABELS+=("dp$(features_label "$ALSO_FEATURES")")
    DP_BINS+=("${ALSO_DP:-$(target_of "$ALSO_FEATURES")/release/dp}")
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    [ -n "${DP_SET_BY_USER:-}" ] || build_dp "$FEATURES"
    [ -z "${ALSO_FEATURES:-}" ] || [ -n "${ALSO_DP:-}" ] || build_dp "$ALSO_FEATURES"
fi

machine_note() {
    note "machine: $(nproc) cpus, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); load average $(cut -d' ' -f1-3 /proc/loadavg)"
}

ensure_data() {
    if [ -f "$DATA/w5_B.npy" ] && [ -f "$DATA/w4_text.npy" ] && [ -f "$DATA/w3_E.npy" ] && [ -f "$DATA/w2_X.npy" ]; then
        return 0
    fi
    if [ -n "$REF" ] && [ -x "$PY" ]; then
        note "writing the benchmark data to $DATA (make_data.py, 43 MB)"
        "$PY" "$REF/../make_data.py" "$DATA" >&2 && return 0
    fi
    note "no benchmark data in $DATA and cannot write it (needs ../shared/bench/make_data.py and the venv)"
    exit 2
}

have_module() { [ -x "$PY" ] && "$PY" -c "import $1" 2>/dev/null; }

# Rows of the table: label|seconds|value|tolerance|extra|rss_kb|note
ROWS=()
add_row() { ROWS+=("$1|$2|$3|$4|$5|$6|$7"); }

# ---- dp, timed by whole processes ---------------------------------------------------------------
# dp_once BIN PROG ARGS... -> "wall_seconds peak_rss_kb output-line"
dp_once() {
    local bin=$1 prog=$2 t0 t1 out rss=n/a
    shift 2
    t0=$(date +%s.%N)
    if [ -x "$TIME" ]; then
        out=$("$TIME" -f %M -o "$TMP/rss" "$bin" run "$prog" "$@" 2>"$TMP/dp.err") || {
            cat "$TMP/dp.err" >&2; return 1; }
        rss=$(tail -1 "$TMP/rss")
    else
        out=$("$bin" run "$prog" "$@" 2>"$TMP/dp.err") || { cat "$TMP/dp.err" >&2; return 1; }
    fi
    t1=$(date +%s.%N)
    echo "$(awk -v a="$t1" -v b="$t0" 'BEGIN { printf "%.4f", a - b }') $rss $(echo "$out" | tail -1)"
}

# dp_measure BIN PROG R ARGS_BEFORE_REPS -- ARGS_AFTER_REPS
#   Runs DP_RUNS pairs of processes, REPS = 1 and REPS = R, alternately (so drift hits both
#   alike), and sets DP_PER = (median T(R) - median T(1)) / (R - 1), DP_LINE (the output of the
#   last REPS = R run), DP_RSS (largest peak RSS of the REPS = R runs, kB), DP_T1, DP_TR.
dp_measure() {
    local bin=$1 prog=$2 r=$3 k a b line1=""
    shift 3
    local pre=() post=() seen=0
    for a in "$@"; do
        if [ "$a" = -- ]; then seen=1; elif [ $seen = 0 ]; then pre+=("$a"); else post+=("$a"); fi
    done
    : > "$TMP/t1"; : > "$TMP/tr"; : > "$TMP/rssr"
    for k in $(seq "$DP_RUNS"); do
        a=$(dp_once "$bin" "$prog" "${pre[@]}" 1 "${post[@]}") || return 1
        b=$(dp_once "$bin" "$prog" "${pre[@]}" "$r" "${post[@]}") || return 1
        echo "$a" | cut -d' ' -f1 >> "$TMP/t1"
        echo "$b" | cut -d' ' -f1 >> "$TMP/tr"
        echo "$b" | cut -d' ' -f2 >> "$TMP/rssr"
        line1=$(echo "$a" | cut -d' ' -f3-)
        DP_LINE=$(echo "$b" | cut -d' ' -f3-)
        note "  reps=1: $(echo "$a" | cut -d' ' -f1) s   reps=$r: $(echo "$b" | cut -d' ' -f1) s"
    done
    DP_T1=$(median < "$TMP/t1"); DP_TR=$(median < "$TMP/tr")
    DP_RSS=$(sort -g "$TMP/rssr" | tail -1)
    DP_PER=$(awk -v a="$DP_TR" -v b="$DP_T1" -v r="$r" 'BEGIN { printf "%.4g", (a - b) / (r - 1) }')
    note "  T(reps=1) = $DP_T1 s, T(reps=$r) = $DP_TR s (medians of $DP_RUNS) -> $DP_PER s per repetition"
    awk -v a="$DP_TR" -v b="$DP_T1" 'BEGIN { exit !(a - b < 0.1 * b) }' &&
        note "  WARNING: the timed repetitions are under 10% of a process's time; noisy (raise DP_REPS or DP_RUNS)"
    if [ "$(echo "$line1" | field value)" != "$(echo "$DP_LINE" | field value)" ]; then
        note "  WARNING: reps=1 and reps=$r printed different values: '$line1' vs '$DP_LINE'"
    fi
    return 0
}

# ---- Python references --------------------------------------------------------------------
# ref_run SCRIPT SYSTEM VARIANT ARGS... -> sets REF_LINE (the measurement line), REF_RSS (kB)
ref_run() {
    local script=$1 sys=$2 var=$3
    shift 3
    note "running $script --system $sys --variant $var $*"
    if [ -x "$TIME" ]; then
        "$TIME" -f %M -o "$TMP/ref_rss" "$PY" "$REF/$script" --system "$sys" --variant "$var" \
            --data "$DATA" "$@" > "$TMP/ref.out" 2> >(cat >&2) || { note "$sys $var FAILED"; return 1; }
        REF_RSS=$(tail -1 "$TMP/ref_rss")
    else
        "$PY" "$REF/$script" --system "$sys" --variant "$var" --data "$DATA" "$@" > "$TMP/ref.out" ||
            { note "$sys $var FAILED"; return 1; }
        REF_RSS=n/a
    fi
    REF_LINE=$(grep -E '^W[0-9] ' "$TMP/ref.out" | tail -1)
    echo "$REF_LINE" >&2
    [ -n "$REF_LINE" ]
}

# refs_available -> 0 when the reference scripts and venv exist (notes why not otherwise)
refs_available() {
    if [ -z "$REF" ]; then note "../shared/bench/reference not found: Python rows skipped"; return 1; fi
    if [ ! -x "$PY" ]; then note "no reference venv at $VENV: Python rows skipped"; return 1; fi
    return 0
}

# ---- the two loops every workload runs ----------------------------------------------------
# run_dp_rows R: times every dp binary on $PROG (dp_measure) and calls the workload's hook
#   `dp_row LABEL HOW` with DP_LINE, DP_PER and DP_RSS set; HOW describes the timing.
run_dp_rows() {   # R [ARGS after REPS, e.g. STEPS DTYPE]
    local r=$1 i
    shift
    for i in "${!DP_BINS[@]}"; do
        dp_rows_of "${DP_BINS[$i]}" "${DP_LABELS[$i]}" "$PROG" "$r" "$@"
    done
    # The staged row: the workload's program with its step under `jit` (JIT_PROG, set by the
    # workload's script; JIT=0 leaves it out), on the first dp binary.
    if [ -n "${JIT_PROG:-}" ] && [ "${JIT:-1}" != 0 ]; then
        dp_rows_of "${DP_BINS[0]}" "${DP_LABELS[0]} jit" "$JIT_PROG" "$r" "$@"
    fi
}

dp_rows_of() {   # BIN LABEL PROG R [ARGS after REPS]
    local bin=$1 label=$2 prog=$3 r=$4
    shift 4
    if [ ! -x "$bin" ]; then note "no dp binary at $bin: $label skipped"; return 0; fi
    note "timing $label ($bin $(basename "$prog")): $DP_RUNS x (reps=1, reps=$r)"
    if dp_measure "$bin" "$prog" "$r" "$DATA" -- "$@"; then
        echo "$DP_LINE" >&2
        dp_row "$label" "(T(reps=$r) - T(reps=1)) / $((r - 1)), medians of $DP_RUNS processes"
    else
        note "$label FAILED"; STATUS=1
    fi
}

# run_ref_rows SCRIPT: runs every "system:variant" of $REFS that is installed and calls the
#   workload's hook `ref_row NAME` with REF_LINE and REF_RSS set.
run_ref_rows() {
    local script=$1 sv sys var
    refs_available || return 0
    for sv in $REFS; do
        sys=${sv%%:*} var=${sv#*:}
        have_module "$sys" || { note "$sys not installed in $VENV: $sv skipped"; continue; }
        ref_run "$script" "$sys" "$var" || { STATUS=1; continue; }
        ref_row "$sys $var"
    done
}

# ---- table ----------------------------------------------------------------------------------
# print_table TITLE REFERENCE_VALUE UNIT EXTRA_HEADER
#   value agreement: |value - REFERENCE_VALUE| / REFERENCE_VALUE <= the row's tolerance
print_table() {
    local title=$1 refv=$2 unit=$3 xh=$4 dp_s="" r name s v tol x rss nt e ok
    IFS='|' read -r name dp_s v tol x rss nt <<<"${ROWS[0]:-}"
    case $name in dp*) ;; *) dp_s="";; esac
    echo
    echo "$title"
    printf '%-22s %11s %18s %8s %8s %4s %9s %8s  %s\n' system "$unit" value "rel.err" tol ok "dp/this" "RSS MB" "$xh"
    for r in "${ROWS[@]}"; do
        IFS='|' read -r name s v tol x rss nt <<<"$r"
        e=$(relerr "$v" "$refv")
        ok=$(awk -v e="$e" -v t="$tol" 'BEGIN { print (e != "n/a" && e + 0 <= t + 0) ? "yes" : "NO" }')
        [ "$ok" = yes ] || STATUS=1
        printf '%-22s %11s %18s %8s %8s %4s %9s %8s  %s\n' "$name" "$(awk -v x="$s" 'BEGIN { if (x == "") print "n/a"; else printf "%.4g", x }')" \
            "$(awk -v x="$v" 'BEGIN { if (x == "") print "n/a"; else printf "%.10g", x }')" \
            "$e" "$tol" "$ok" "$(ratio "$dp_s" "$s")" "$(mb "$rss")" "$x"
    done
    for r in "${ROWS[@]}"; do IFS='|' read -r name s v tol x rss nt <<<"$r"; [ -z "$nt" ] || echo "  $name: $nt"; done
    echo "  reference value $refv (WORKLOADS.md); ok = rel.err <= tol; dp/this = ${DP_LABELS[0]} seconds / this row's"
    echo "  RSS = peak resident set of the whole process (GNU time %M): dp's REPS = R run, the reference's whole script run"
}
