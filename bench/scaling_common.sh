# Shared by bench/nested/run.sh and bench/handlers/run.sh (sourced, not run): a table of one
# dp program's whole-process times at several sizes n, with last / first as the growth factor.
# The sourcing script sets HERE, ROOT, DP, RUNS, SIZES and defines
#   program                  the .dp file to run (given n as its argument)
#   expected n               what the program must print for n
# then calls `scaling_table`.

median_time() {   # binary n -> median wall seconds of RUNS processes (checks the answer)
    local bin=$1 n=$2 times=() out t0 t1 want
    want=$(expected "$n")
    for _ in $(seq "$RUNS"); do
        t0=$(date +%s.%N)
        out=$("$bin" run "$(program)" "$n") || { echo "n/a"; return; }
        t1=$(date +%s.%N)
        [ "$out" = "$want" ] || { echo "wrong:$out"; return; }
        times+=("$(echo "$t1 - $t0" | bc -l)")
    done
    printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (RUNS + 1) / 2 ))p" | xargs printf '%.3f'
}

row() {   # label binary
    local label=$1 bin=$2 first="" last="" line="| $1 |" t
    for n in $SIZES; do
        t=$(median_time "$bin" "$n")
        line="$line $t s |"
        [ -z "$first" ] && first=$t
        last=$t
    done
    echo "$line $(echo "$last / $first" | bc -l 2>/dev/null | xargs printf '%.2f')x |"
}

scaling_table() {
    if [ "${SKIP_BUILD:-0}" != 1 ]; then
        (cd "$ROOT" && cargo build --release --bin dp) >&2 || { echo "dp build failed" >&2; exit 1; }
    fi
    local header="| dp |" sep="|---|" n
    for n in $SIZES; do header="$header n = $n |"; sep="$sep---|"; done
    echo "$header last / first |"
    echo "$sep---|"
    row "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo dp)" "$DP"
    if [ -n "${BEFORE:-}" ]; then row "before ($BEFORE)" "$BEFORE"; fi
}
