"""Execute every chapter notebook on one device, several at a time, keeping the executed notebooks and the claim
records (``benchmarks/gpu_check.sh`` step 2).

``python benchmarks/gpu/run_chapters.py OUT_DIR [--scale paper] [--workers 4] [--device cuda] [--only 09_,12_]``

Each chapter runs in a fresh ``python3`` kernel (nbclient) with ``COMPANION_SCALE``, ``COMPANION_DEVICE``,
``COMPANION_CLAIMS_DIR=OUT_DIR/claims`` and ``COMPANION_PROGRESS=0``; the executed notebook goes to
``OUT_DIR/notebooks/<chapter>.ipynb``. Prints one line per chapter (wall time, verdict of its claim check, the
error's last line if it stopped) and writes ``OUT_DIR/chapters.json``. Exit status 1 when a chapter stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def chapter_notebooks(only: list[str]) -> list[Path]:
    """The chapter notebooks in ``_toc.yml`` order (those whose stem starts with an entry of ``only``, if given)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [ROOT / f"{c['file']}.ipynb" for part in toc.get("parts", []) for c in part.get("chapters", [])]
    files = [
        f
        for f in files
        if f.exists() and f.with_suffix(".md").exists() and f.with_suffix(".md").read_text().startswith("---\njupytext:")
    ]
    return [f for f in files if not only or any(f.stem.startswith(o) for o in only)]


def run_one(nb_path: Path, out: Path, env_extra: dict, timeout: int) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(nb_path, as_version=4)
    env = {**os.environ, **env_extra}
    t0 = time.perf_counter()
    error = None
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}).execute(
            env=env
        )
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
    except Exception as exc:  # a dead kernel, a timeout: recorded, not raised
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    seconds = time.perf_counter() - t0
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / "notebooks" / nb_path.name)
    return {"chapter": nb_path.stem, "seconds": round(seconds, 1), "error": error}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--scale", default="paper", choices=["quick", "paper"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=4, help="chapters executed at the same time")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS per kernel (default: cpus / workers)")
    p.add_argument("--only", default="", help="comma-separated chapter stem prefixes (default: all)")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.workers)
    env = {
        "COMPANION_SCALE": args.scale,
        "COMPANION_DEVICE": args.device,
        "COMPANION_PROGRESS": "0",
        "COMPANION_CLAIMS_DIR": str((args.out / "claims").resolve()),
        "COMPANION_WIDGETS": "static",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    nbs = chapter_notebooks([o for o in args.only.split(",") if o])
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(run_one, nb, args.out, env, args.timeout) for nb in nbs]
        results = []
        for f in futures:
            r = f.result()
            results.append(r)
            print(
                f"{r['chapter']:28s} {r['seconds']:7.1f} s  {'ok' if not r['error'] else 'STOPPED: ' + r['error'][:200]}",
                flush=True,
            )
    wall = time.perf_counter() - t0
    print(
        f"{len(nbs)} chapters at {args.scale} scale on {args.device}, {args.workers} at a time: {wall:.0f} s wall, "
        f"{sum(r['seconds'] for r in results):.0f} s summed"
    )
    (args.out / "chapters.json").write_text(
        json.dumps(
            {"scale": args.scale, "device": args.device, "workers": args.workers, "wall_s": round(wall, 1), "chapters": results},
            indent=1,
        )
    )
    return 1 if any(r["error"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
