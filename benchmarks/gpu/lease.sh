#!/usr/bin/env bash
# Both GPU checks in one short job on a GPU machine (a rented instance, a batch queue) from which only a few files are
# copied back.
# From the repository root:
#
#     bash benchmarks/gpu/lease.sh [OUT_DIR]        # default OUT_DIR: $OUT, else benchmarks/gpu_out/lease
#
#   1. benchmarks/gpu_check.sh (unit tests on CUDA beside every chapter at paper scale, the claim records compared
#      with the committed CPU ledger run), within LEASE_CHECK_S seconds (default 420);
#   2. benchmarks/gpu/bench.sh, within LEASE_BENCH_S seconds (default 150; each of its steps within
#      BENCH_LIMIT_S, default here 45; LEASE_BENCH=0 leaves it out).
# The work happens in a scratch folder (LEASE_WORK, default /tmp/companion_lease); OUT_DIR receives at most five
# files, written as soon as each part ends, so that what finished comes back even if the call is cut short:
#   RESULTS.md (gpu_check's, to commit as benchmarks/gpu/RESULTS.md), check_summary.txt, bench_summary.txt,
#   check.tgz and bench.tgz (everything else: logs, executed notebooks, claim records, JSON).
# Every knob of gpu_check.sh and bench.sh passes through: to rerun only what failed, e.g.
#   GPU_CHECK_CHAPTERS=09_,12_ GPU_CHECK_TESTS="tests/unit/test_gd.py" LEASE_BENCH=0 bash benchmarks/gpu/lease.sh
# GPU_CHECK_DEVICE=cpu and BENCH_DEVICE=cpu make the whole of it a dry run without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUT_DIR=${1:-${OUT:-benchmarks/gpu_out}/lease}
WORK=${LEASE_WORK:-/tmp/companion_lease}
mkdir -p "$OUT_DIR"
rm -rf "$WORK" && mkdir -p "$WORK"
pack() {  # pack NAME FOLDER: FOLDER as OUT_DIR/NAME.tgz
  tar czf "$OUT_DIR/$1.tgz" -C "$(dirname "$2")" "$(basename "$2")" 2>/dev/null || echo "== could not pack $2"
}

timeout "${LEASE_CHECK_S:-420}" bash benchmarks/gpu_check.sh "$WORK/check"
rc=$?
[ "$rc" = 124 ] && echo "== gpu_check stopped at LEASE_CHECK_S=${LEASE_CHECK_S:-420} s" | tee -a "$WORK/check/summary.txt"
for f in RESULTS.md summary.txt; do
  [ -e "$WORK/check/$f" ] && cp "$WORK/check/$f" "$OUT_DIR/$([ $f = summary.txt ] && echo check_summary.txt || echo $f)"
done
pack check "$WORK/check"

if [ "${LEASE_BENCH:-1}" = 1 ]; then
  BENCH_LIMIT_S=${BENCH_LIMIT_S:-45} timeout "${LEASE_BENCH_S:-150}" bash benchmarks/gpu/bench.sh "$WORK/bench"
  [ "$?" = 124 ] && echo "== bench.sh stopped at LEASE_BENCH_S=${LEASE_BENCH_S:-150} s" | tee -a "$WORK/bench/summary.txt"
  cp "$WORK/bench/summary.txt" "$OUT_DIR/bench_summary.txt" 2>/dev/null
  pack bench "$WORK/bench"
fi
echo "== lease.sh wall time $((SECONDS - T0)) s; in $OUT_DIR: $(ls "$OUT_DIR" | tr '\n' ' ')"
