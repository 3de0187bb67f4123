#!/usr/bin/env bash
# One-shot GPU check (issue 7). Run from the repository root on a CUDA machine:
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]          # default OUT_DIR: $OUT, else benchmarks/gpu_out
#
# Steps (each logged to OUT_DIR/summary.txt, outputs beside it); a failing step does not stop the others:
#   1. environment: nvidia-smi, torch/CUDA versions;
#   2. the GPU-marked tests (tests/test_gpu.py: CPU/GPU agreement of the engine and the networks, no CUDA
#      sync inside the engine loop) and the engine semantics tests;
#   3. the benchmark on CUDA (benchmarks/run.py unchanged, --device cuda), then the engine section on this
#      machine's CPU for the GPU-over-CPU speed-up;
#   4. Chapter 9 (book/paper_b/09_*.md) at paper scale on CUDA, then on CPU, executed notebooks kept;
#   5. CPU-vs-GPU agreement of every asserted claim of Chapter 9 (benchmarks/claims_compare.py).
#
# Environment knobs: PYTHON (interpreter with torch+CUDA; default .venv/bin/python if present, else python3),
# GPU_CHECK_DEVICE (default cuda; `cpu` is a dry run of this script on a machine without a GPU),
# GPU_CHECK_SCALE (Chapter 9's scale, default paper), GPU_CHECK_QUICK=1 (benchmark at smoke sizes),
# GPU_CHECK_CPU_CHAPTER=0 (skip the CPU run of Chapter 9, e.g. when time is short).
# Nothing is downloaded: the package is used from src/ via PYTHONPATH. The interpreter needs what
# requirements.txt lists for the package and the tests (torch with CUDA, numpy, scipy, matplotlib, tqdm,
# networkx, pytest) and, for steps 4-5, nbformat, nbclient and ipykernel (a `python3` kernel).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-benchmarks/gpu_out}}
mkdir -p "$OUT_DIR"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEV=${GPU_CHECK_DEVICE:-cuda}
SCALE=${GPU_CHECK_SCALE:-paper}
export PYTHONPATH="$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export COMPANION_PROGRESS=0
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
log() { echo "== $*" | tee -a "$SUMMARY"; }
step() {  # step NAME CMD...: run, time, record the exit status
  local name=$1; shift
  local t0=$SECONDS
  "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc in $((SECONDS - t0)) s (log: $name.log)"
  tail -n 25 "$OUT_DIR/$name.log" | sed 's/^/    /' >> "$SUMMARY"
  return $rc
}

log "gpu_check on $(hostname) at $(date -u +%FT%TZ), device $DEV, Chapter 9 scale $SCALE, python $PYTHON"
{ nvidia-smi || echo "no nvidia-smi"; } > "$OUT_DIR/env.txt" 2>&1
"$PYTHON" - >> "$OUT_DIR/env.txt" 2>&1 <<'EOF'
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "threads", torch.get_num_threads(), "cpus", os.cpu_count())
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory // 2**30, "GiB")
EOF
cat "$OUT_DIR/env.txt" >> "$SUMMARY"
if [ "$DEV" = cuda ] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  log "CUDA is not available to $PYTHON: stopping (set GPU_CHECK_DEVICE=cpu for a dry run)"; exit 2
fi

# 2. tests: the GPU-marked ones (skipped on a dry run without CUDA) and the engine semantics tests
step tests_gpu "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" -rs \
  tests/test_gpu.py tests/test_gd_perf_semantics.py --junitxml="$OUT_DIR/tests_gpu.xml"

# 3. the benchmark, unchanged, on the device; then the engine section on this machine's CPU
QUICK=""; [ "${GPU_CHECK_QUICK:-0}" = 1 ] && QUICK="--quick"
step bench_$DEV "$PYTHON" benchmarks/run.py --device "$DEV" $QUICK --json "$OUT_DIR/bench_$DEV.json"
if [ "$DEV" = cuda ]; then
  step bench_cpu_engine "$PYTHON" benchmarks/run.py --device cpu --sections engine --steps 300 $QUICK \
    --json "$OUT_DIR/bench_cpu_engine.json"
  "$PYTHON" - "$OUT_DIR" >> "$SUMMARY" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
g, c = (json.loads((out / f).read_text())["engine"] for f in ("bench_cuda.json", "bench_cpu_engine.json"))
# per-step engine throughput (the two runs may use different step counts)
gs = g["engine_s"] / json.loads((out / "bench_cuda.json").read_text())["args"]["steps"]
cs = c["engine_s"] / json.loads((out / "bench_cpu_engine.json").read_text())["args"]["steps"]
print(f"   engine GPU speed-up over this machine's CPU (time per step, same workload): {cs / gs:.1f}x; "
      f"GPU {g['engine_gflops']:.0f} GFLOP/s = {g['flop_fraction']:.0%} of its float64 GEMM rate")
EOF
fi

# 4. Chapter 9 on the device, then on the CPU, at the chosen scale
CH=$(ls book/paper_b/09_*.ipynb 2>/dev/null | head -n 1)
if [ -z "$CH" ]; then
  log "Chapter 9 (book/paper_b/09_*.ipynb) not found: steps 4-5 skipped"
else
  NAME=$(basename "$CH")
  COMPANION_DEVICE=$DEV step ch09_$DEV "$PYTHON" benchmarks/chapter_times.py paper --only 09_ --scale "$SCALE" \
    --save-dir "$OUT_DIR/ch09_$DEV"
  if [ "$DEV" = cuda ] && [ "${GPU_CHECK_CPU_CHAPTER:-1}" = 1 ]; then
    COMPANION_DEVICE=cpu step ch09_cpu "$PYTHON" benchmarks/chapter_times.py paper --only 09_ --scale "$SCALE" \
      --save-dir "$OUT_DIR/ch09_cpu"
    # 5. every asserted claim, CPU vs GPU
    step claims_cpu_vs_gpu "$PYTHON" benchmarks/claims_compare.py "$OUT_DIR/ch09_cpu/$NAME" \
      "$OUT_DIR/ch09_cuda/$NAME" --labels CPU,GPU --json "$OUT_DIR/claims_cpu_vs_gpu.json"
  fi
fi
log "done at $(date -u +%FT%TZ); outputs in $OUT_DIR"
