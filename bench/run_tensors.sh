#!/usr/bin/env bash
# The tensor workloads W2-W5 (../shared/bench/WORKLOADS.md), one after the other, each dp beside
# its references (bench/w2 … bench/w5/run.sh). Builds dp once, writes the data once, prints the
# four tables; exits non-zero if any script failed or any value disagreed.
#
#   bench/run_tensors.sh                        (from anywhere; about 8-12 minutes)
#   ALSO_FEATURES=f bench/run_tensors.sh        (adds rows for dp built with cargo features f)
#   FEATURES=f bench/run_tensors.sh             (dp built with features f only)
#   ONLY="w2 w5" bench/run_tensors.sh           (a subset)
#
# Environment: ONLY, and everything ../bench/tensors_common.sh reads (DP, FEATURES,
# ALSO_FEATURES, ALSO_DP, SKIP_BUILD, DATA, VENV, DP_RUNS), passed on to each script; DP_REPS
# and REFS are per workload, so set them when running one script.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ONLY=${ONLY:-w2 w3 w4 w5}
note() { echo "# $*" >&2; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    build() {   # features
        case ${1:-} in
            ""|default) note "cargo build --release"; (cd "$ROOT" && cargo build --release) >&2 ;;
            *) local t
               t=$ROOT/target/$(echo "$1" | tr ' ,' '__')
               note "cargo build --release --features $1 --target-dir $t"
               (cd "$ROOT" && cargo build --release --features "$1" --target-dir "$t") >&2 ;;
        esac || note "dp build (${1:-default}) FAILED"
    }
    [ -n "${DP:-}" ] || build "${FEATURES:-}"
    [ -z "${ALSO_FEATURES:-}" ] || [ -n "${ALSO_DP:-}" ] || build "$ALSO_FEATURES"
fi
export SKIP_BUILD=1
note "start $(date -u +%FT%TZ), commit $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet 2>/dev/null || echo '+changes')"

STATUS=0
FAILED=""
for w in $ONLY; do
    note "==================== $w ===================="
    DP_REPS= REFS= "$HERE/$w/run.sh" || { STATUS=1; FAILED="$FAILED $w"; }
done
note "end $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ $STATUS = 0 ] || note "FAILED or values disagreed:$FAILED"
exit $STATUS
