#!/usr/bin/env bash
# The engine's GPU benchmark in one call (see benchmarks/gpu/README.md). From the repository root:
#
#     bash benchmarks/gpu/bench.sh [OUT_DIR]        # default OUT_DIR: $OUT, else benchmarks/gpu_out/bench
#
#   1. scaling: gd.run on paper B's k = 2 workload for E = 512 ... 131072 (float64), as a fraction of the same
#      GPU's square-GEMM rate, beside the workload's two-GEMM ceiling: eager, captured in a CUDA graph, and
#      captured around companion.fused compiled by inductor (BENCH_FUSED_MODES, default
#      "default,max-autotune-no-cudagraphs"); then the same in float32 (BENCH_FLOAT32=1);
#   2. hessian: Lanczos against the dense Hessian at the largest P whose dense Hessian fits (--hessian-width auto);
#   3. engine: gd.run against the per-seed nn.Module loop (the CPU benchmark's first section, on the GPU);
#   4. a torch.profiler table of the captured engine at E = 512.
# Each step has its own time limit (BENCH_LIMIT_S, default 240 s) so one slow step cannot eat the others.
# BENCH_DEVICE=cpu is a dry run without a GPU (every step at run.py's --quick sizes, no inductor modes, the profile
# not captured): it checks the script's plumbing, it measures nothing worth keeping.
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
OUT_DIR=${1:-${OUT:-benchmarks/gpu_out}/bench}
mkdir -p "$OUT_DIR"
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
LIMIT=${BENCH_LIMIT_S:-240}
DEV=${BENCH_DEVICE:-cuda}
if [ "$DEV" = cuda ]; then
  MODES=${BENCH_FUSED_MODES:-default,max-autotune-no-cudagraphs} MODES32=default QUICK=() CAPTURE=(--capture) SEEDS=512
else
  MODES=${BENCH_FUSED_MODES:-} MODES32=${BENCH_FUSED_MODES:-} QUICK=(--quick) CAPTURE=() SEEDS=64
fi
export PYTHONPATH="$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}" COMPANION_PROGRESS=0
step() {  # step NAME CMD...
  local name=$1; shift
  local t=$SECONDS
  timeout "$LIMIT" "$@" > "$OUT_DIR/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - t)) s" | tee -a "$OUT_DIR/summary.txt"
  cat "$OUT_DIR/$name.log" >> "$OUT_DIR/summary.txt"
}
: > "$OUT_DIR/summary.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; } >> "$OUT_DIR/summary.txt" 2>&1
step scaling "$PYTHON" benchmarks/run.py --device "$DEV" ${QUICK[@]+"${QUICK[@]}"} --sections scaling --fused-modes "$MODES" \
  --json "$OUT_DIR/scaling.json"
step hessian "$PYTHON" benchmarks/run.py --device "$DEV" ${QUICK[@]+"${QUICK[@]}"} --sections hessian --json "$OUT_DIR/hessian.json"
if [ "${BENCH_FLOAT32:-1}" = 1 ]; then
  step scaling_float32 "$PYTHON" benchmarks/run.py --device "$DEV" ${QUICK[@]+"${QUICK[@]}"} --sections scaling --dtype float32 \
    --fused-modes "$MODES32" --json "$OUT_DIR/scaling_float32.json"
fi
step engine "$PYTHON" benchmarks/run.py --device "$DEV" ${QUICK[@]+"${QUICK[@]}"} --sections engine --steps 300 \
  --json "$OUT_DIR/engine.json"
step profile "$PYTHON" benchmarks/profile_engine.py --device "$DEV" --seeds "$SEEDS" --steps 50 ${CAPTURE[@]+"${CAPTURE[@]}"}
echo "== bench.sh wall time $((SECONDS - T0)) s" | tee -a "$OUT_DIR/summary.txt"
