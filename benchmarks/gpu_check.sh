#!/usr/bin/env bash
# The GPU check: the unit tests, every chapter at paper scale, and the claim records compared with the CPU's,
# in one call on one CUDA GPU. Run from the repository root:
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]          # default OUT_DIR: $OUT, else benchmarks/gpu_out
#
# Steps (each logged to OUT_DIR/summary.txt, its output beside it; a failing step does not stop the others):
#   1. environment: nvidia-smi, torch and CUDA versions; the notebook packages (see "Notebook packages" below);
#   2. the whole unit-test suite on CUDA (tests/, the policy device is CUDA), in the background, while
#   3. every chapter executes at paper scale on CUDA, GPU_CHECK_WORKERS (default 4) at a time
#      (benchmarks/gpu/run_chapters.py): executed notebooks in OUT_DIR/chapters/notebooks, claim records
#      (COMPANION_CLAIMS_DIR) in OUT_DIR/chapters/claims, per-chapter wall times in OUT_DIR/chapters/chapters.json;
#   4. the claim records compared row by row with the CPU paper-scale build's (benchmarks/claims_compare.py):
#      the same verdict on every row, the measured numbers to the largest relative difference printed.
#      CPU_CLAIMS names the CPU side: by default the committed ledger run of the same scale
#      (book/_generated/runs/cpu-paper.json, written by `tools/ledger.py record`), so a fresh checkout needs no CPU
#      build first; or a built site's claims.json (`make book`: _build/html/claims.json) or a records folder;
#   5. OUT_DIR/RESULTS.md: date, GPU, torch and CUDA versions, test summary, per-chapter times, the claim table,
#      and this script's wall time (to be committed as benchmarks/gpu/RESULTS.md); a TERM or INT (a time limit
#      around the script) still writes it, from what finished and marked as stopped.
#
# Budget: designed to fit in 9 minutes on one H200 (chapter times measured there earlier were 17-66 s each at
# paper scale; four at a time with the unit tests beside them). The script prints its own wall time; the
# benchmark (benchmarks/gpu/bench.sh) is a separate call.
#
# Tests left out here: tests/book/ (the chapters, the website and the browser check: step 3 runs every chapter at
# paper scale instead, and the website is built on the CPU). The unit tests (tests/unit/, tests/*.py) and the
# repository checks run; those that need the development set (ruff, docutils, jupyter-book, playwright) skip
# when it is absent.
#
# Notebook packages: the GPU machine has torch, numpy, scipy, matplotlib, pytest and tqdm but not nbformat,
# nbclient, ipykernel, ipywidgets or jupytext, nor python-flint (the package's ball arithmetic, which the certificates
# of several chapters and their unit tests use). The chapters need no MyST-NB (companion.glue stands in for its
# glue). Bring them as wheels for CPython 3.12 in the ignored folder .whl/ of the working tree (prepared on any
# machine with network access, ~33 MB, python-flint 10 MB of it):
#
#     pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
#         -d .whl nbformat nbclient ipykernel jupytext ipywidgets pyyaml networkx python-flint
#
# and carry .whl with the tree; this script installs them with
# `pip install --no-index --find-links .whl --target /tmp/site ...` and puts /tmp/site on PYTHONPATH (the
# notebook kernels inherit it).
#
# Knobs: PYTHON (default .venv/bin/python if present, else python3); GPU_CHECK_DEVICE (default cuda; `cpu` is a
# dry run of this script without a GPU); GPU_CHECK_SCALE (default paper); GPU_CHECK_CHAPTERS (comma-separated
# stem prefixes, default all); GPU_CHECK_TESTS (pytest arguments, default the suite described above);
# GPU_CHECK_WORKERS (default 4); CPU_CLAIMS (see step 4); COMPANION_SEED (the seed offset, default 0: another offset
# draws other data, so the numbers differ from the CPU side's and the verdicts must agree all the same).
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
OUT_DIR=${1:-${OUT:-benchmarks/gpu_out}}
mkdir -p "$OUT_DIR"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEV=${GPU_CHECK_DEVICE:-cuda}
SCALE=${GPU_CHECK_SCALE:-paper}
WORKERS=${GPU_CHECK_WORKERS:-4}
CPU_CLAIMS=${CPU_CLAIMS:-book/_generated/runs/cpu-$SCALE.json}
TESTS=${GPU_CHECK_TESTS:-tests --ignore=tests/book}
export PYTHONPATH="$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
export COMPANION_PROGRESS=0 COMPANION_DEVICE=$DEV
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
log() { echo "== $*" | tee -a "$SUMMARY"; }

log "gpu_check on $(hostname) at $(date -u +%FT%TZ), device $DEV, chapters at $SCALE scale, seed offset ${COMPANION_SEED:-0}, python $PYTHON"
{ nvidia-smi || echo "no nvidia-smi"; } > "$OUT_DIR/env.txt" 2>&1
"$PYTHON" - >> "$OUT_DIR/env.txt" 2>&1 <<'EOF'
import os, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "threads", torch.get_num_threads(), "cpus", os.cpu_count())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory // 2**30, "GiB")
EOF
tail -n 2 "$OUT_DIR/env.txt" >> "$SUMMARY"
if [ "$DEV" = cuda ] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  log "CUDA is not available to $PYTHON: stopping (GPU_CHECK_DEVICE=cpu for a dry run)"; exit 2
fi

# 1. notebook packages
NB_OK=1
NB_IMPORTS="import nbformat, nbclient, ipykernel, jupytext, ipywidgets, yaml, networkx, flint"
if ! "$PYTHON" -c "$NB_IMPORTS" 2>/dev/null; then
  if [ -d .whl ]; then
    "$PYTHON" -m pip install -q --no-index --find-links .whl --target /tmp/site \
      nbformat nbclient ipykernel jupytext ipywidgets pyyaml networkx python-flint > "$OUT_DIR/wheels.log" 2>&1
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
  fi
  if ! "$PYTHON" -c "$NB_IMPORTS" 2>/dev/null; then
    NB_OK=0
    log "notebook packages missing (see the header of this script for the wheels): chapters not executed"
  else
    log "notebook packages installed from .whl into /tmp/site"
  fi
fi

# Steps 4 and 5 are functions: run at the end, or on a signal (below).

# 4. the claim records against the CPU build's
compare_claims() {
  CMP="claims not compared"
  if [ "$NB_OK" = 1 ] && [ -e "$CPU_CLAIMS" ]; then
    "$PYTHON" benchmarks/claims_compare.py "$CPU_CLAIMS" "$OUT_DIR/chapters/claims" --labels "cpu,$DEV" \
      --json "$OUT_DIR/claims_compare.json" > "$OUT_DIR/claims_compare.md" 2>&1
    CMP="claims compared (exit $?: 0 = every verdict agrees)"
    log "$CMP (table: claims_compare.md)"
    tail -n 15 "$OUT_DIR/claims_compare.md" | sed 's/^/    /' >> "$SUMMARY"
  elif [ "$NB_OK" = 1 ]; then
    log "no CPU claim records at $CPU_CLAIMS (set CPU_CLAIMS to a claims.json or a records folder): $CMP"
  fi
}

# 5. the summary to commit
write_results() {
  WALL=$((SECONDS - T0))
  "$PYTHON" - "$OUT_DIR" "$WALL" "$SCALE" "$STOPPED" > "$OUT_DIR/RESULTS.md" <<'EOF'
import json, os, sys, time
from pathlib import Path
out, wall, scale, stopped = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
env = (out / "env.txt").read_text().strip().splitlines()
print(f"# GPU check, {time.strftime('%Y-%m-%d', time.gmtime())}\n")
seed = os.environ.get("COMPANION_SEED", "0")
print("Produced by `bash benchmarks/gpu_check.sh` in one call; its wall time: "
      f"**{wall // 60} min {wall % 60} s**; seed offset {seed} (`COMPANION_SEED`).\n")
if stopped:
    print("**Stopped by a signal before the end**: what follows is what had finished (chapters whose records are "
          "missing show as rows only in the CPU run).\n")
print("```\n" + "\n".join(l for l in env if l.startswith(("python", "gpu"))) + "\n```\n")
tests = (out / "tests.log").read_text().strip().splitlines() if (out / "tests.log").exists() else []
print("## Unit tests on the device\n\n`" + (tests[-1] if tests else "not run") + "`\n")
ch = out / "chapters" / "chapters.json"
if ch.exists():
    c = json.loads(ch.read_text())
    print(f"## Chapters at {scale} scale ({c['workers']} at a time, {c['wall_s']:.0f} s wall)\n")
    print("| chapter | seconds | result |\n|---|---:|---|")
    for r in c["chapters"]:
        print(f"| {r['chapter']} | {r['seconds']:.1f} | {'ran to the end' if not r['error'] else 'stopped: ' + ' '.join(r['error'].split())[:200]} |")
    print()
cmp = out / "claims_compare.md"
print("## Claim records, CPU build against this device\n")
print(cmp.read_text() if cmp.exists() else "not compared (no CPU records)")
EOF
  log "RESULTS.md written; gpu_check wall time ${WALL} s; outputs in $OUT_DIR"
}

# A TERM or INT (a time limit around this script) still leaves RESULTS.md: what finished, compared, marked stopped.
STOPPED=0
on_signal() {
  trap - TERM INT
  STOPPED=1
  log "stopped by a signal after $((SECONDS - T0)) s: RESULTS.md from what finished"
  compare_claims
  write_results
  exit 143
}

trap on_signal TERM INT

# 2. the unit tests, in the background
( "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" -rfEs $TESTS \
    --junitxml="$OUT_DIR/tests.xml" > "$OUT_DIR/tests.log" 2>&1; echo $? > "$OUT_DIR/tests.rc" ) &
TESTS_PID=$!

# 3. every chapter
if [ "$NB_OK" = 1 ]; then
  t=$SECONDS
  "$PYTHON" benchmarks/gpu/run_chapters.py "$OUT_DIR/chapters" --scale "$SCALE" --device "$DEV" \
    --workers "$WORKERS" --only "${GPU_CHECK_CHAPTERS:-}" > "$OUT_DIR/chapters.log" 2>&1
  log "chapters: exit $? in $((SECONDS - t)) s (log: chapters.log)"
  sed 's/^/    /' "$OUT_DIR/chapters.log" >> "$SUMMARY"
fi

wait "$TESTS_PID"
log "unit tests on $DEV: exit $(cat "$OUT_DIR/tests.rc") (log: tests.log)"
tail -n 30 "$OUT_DIR/tests.log" | sed 's/^/    /' >> "$SUMMARY"

compare_claims
write_results
