"""Wall time per chapter, as a fraction of its budget.

Three modes:

``quick``  runs the whole quick-scale test command once (``COMPANION_SCALE=quick pytest``, i.e. ``make test``
           without the make) with a JUnit report, and sums the per-test times by file: each chapter notebook
           (nbval runs it cell by cell) and each unit-test module. Budget: 25 s per chapter (about 15 s on an
           idle machine is the aim: the suite runs every chapter at three seeds), 10 min in all.
``paper``  executes every chapter notebook at paper scale, one at a time (nbclient, the same executor the
           book build uses), and times each. Budget: 15 min for the whole book on two cores (150 s per chapter at most).
           ``--scale quick`` executes at quick scale instead; ``--save-dir`` keeps the executed notebooks
           (benchmarks/gpu_check.sh uses both); ``--cells N`` also prints each chapter's N slowest cells (from the
           start and end times nbclient records in every cell's metadata).
``cache``  reads the execution time jupyter-cache recorded for each chapter in the last ``make book``
           (``_build/.jupyter_cache``), without executing anything.

The machine's load average is printed before and after: on a shared machine these times grow with the
load; rerun on an idle machine before comparing with the budgets.

Usage: ``python benchmarks/chapter_times.py quick|paper|cache [--only 09_] [--markdown out.md]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = {"quick": 25.0, "paper": 150.0, "cache": 150.0}
TOTAL_QUICK_BUDGET = 600.0
TOTAL_PAPER_BUDGET = 900.0


def chapters() -> list[Path]:
    """The chapter notebooks listed (uncommented) in _toc.yml, in book order."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = []
    for part in toc.get("parts", []):
        for ch in part.get("chapters", []) or []:
            md = ROOT / (ch["file"] + ".md")
            if md.exists() and md.read_text().startswith("---\njupytext:"):
                out.append(md.with_suffix(".ipynb"))
    return out


def select(only: str | None) -> list[Path]:
    """Chapters whose file name contains one of the comma-separated ``only`` substrings (all if ``None``);
    a chapter not yet listed in _toc.yml is found by its notebook's name."""
    if not only:
        return chapters()
    keys = [k for k in only.split(",") if k]
    out = []
    for key in keys:
        hits = [nb for nb in chapters() if key in nb.name] or sorted(
            p for p in (ROOT / "book").rglob(f"*{key}*.ipynb") if ".ipynb_checkpoints" not in str(p)
        )
        out += [h for h in hits if h not in out]
    return out


def _load() -> str:
    a = os.getloadavg()
    return f"load average {a[0]:.2f} / {a[1]:.2f} / {a[2]:.2f} (1/5/15 min) on {os.cpu_count()} CPUs"


def quick(only: str | None) -> list[tuple[str, float, float | None]]:
    env = dict(os.environ, COMPANION_SCALE="quick", COMPANION_PROGRESS="0")
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        targets = [str(p.relative_to(ROOT)) for p in select(only)] if only else []
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *targets]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:])
        per_file: dict[str, float] = defaultdict(float)
        failed: dict[str, list[str]] = defaultdict(list)
        for case in ET.parse(xml).getroot().iter("testcase"):
            per_file[case.get("classname", "?")] += float(case.get("time", 0.0))
            if case.find("failure") is not None or case.find("error") is not None:
                failed[case.get("classname", "?")].append(case.get("name", "?"))
        for name, cases in failed.items():
            print(f"FAILED in {name}: {', '.join(cases)}")
    rows = []
    for name, secs in per_file.items():
        is_chapter = name.endswith(".ipynb")
        rows.append(
            (
                name.removesuffix(".ipynb").replace(".", "/") + (".ipynb" if is_chapter else ".py"),
                secs,
                BUDGET["quick"] if is_chapter else None,
            )
        )
    rows.sort(key=lambda r: (r[2] is None, r[0]))
    rows.append(
        ("pytest wall time (selected chapters)", wall, None)
        if only
        else ("whole quick test command (wall)", wall, TOTAL_QUICK_BUDGET)
    )
    return rows


def cell_seconds(nb) -> list[tuple[float, int, str]]:
    """``(seconds, index, first line)`` of every executed code cell of ``nb``, slowest first, from the
    ``execution`` timestamps nbclient writes into each cell's metadata."""
    from datetime import datetime

    out = []
    for i, cell in enumerate(nb.cells):
        ex = cell.get("metadata", {}).get("execution", {})
        start, end = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
        if cell.cell_type == "code" and start and end:
            secs = (
                datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
            ).total_seconds()
            first = next((line for line in cell.source.splitlines() if line.strip() and not line.startswith("#")), "")
            out.append((secs, i, first[:70]))
    return sorted(out, reverse=True)


def paper(
    only: str | None, timeout: int, scale: str = "paper", save_dir: str | None = None, cells: int = 0
) -> list[tuple[str, float, float | None]]:
    import nbformat
    from nbclient import NotebookClient

    os.environ.update(COMPANION_SCALE=scale, COMPANION_PROGRESS="0")  # the kernels inherit this environment
    rows = []
    for nb_path in select(only):
        nb = nbformat.read(nb_path, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}})
        t0 = time.perf_counter()
        status = ""
        try:
            client.execute()
        except Exception as exc:  # a failed claim check still has a wall time; say it failed
            status = f"  (FAILED: {type(exc).__name__})"
        secs = time.perf_counter() - t0
        if save_dir:
            Path(save_dir).mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, Path(save_dir) / nb_path.name)
        rows.append((str(nb_path.relative_to(ROOT)) + status, secs, BUDGET[scale if scale == "quick" else "paper"]))
        print(f"  {rows[-1][0]}: {secs:.0f} s", flush=True)
        for cell_secs, index, first in cell_seconds(nb)[:cells]:
            print(f"      cell {index:3d}: {cell_secs:6.1f} s  {first}", flush=True)
    if scale == "paper" and not only:
        rows.append(("all chapters", sum(r[1] for r in rows), TOTAL_PAPER_BUDGET))
    return rows


def cache(path: Path, scale: str = "paper") -> list[tuple[str, float, float | None]]:
    from jupyter_cache import get_cache

    if not path.exists():
        raise SystemExit(f"no jupyter cache at {path}: run `make book` first")
    rows = []
    for rec in get_cache(path).list_cache_records():
        secs = (rec.data or {}).get("execution_seconds")
        if secs is not None:
            rows.append(
                (
                    str(Path(rec.uri).relative_to(ROOT)) if Path(rec.uri).is_relative_to(ROOT) else rec.uri,
                    float(secs),
                    BUDGET[scale],
                )
            )
    rows.sort()
    rows.append(("all chapters", sum(r[1] for r in rows), TOTAL_PAPER_BUDGET if scale == "paper" else None))
    return rows


def table(rows, mode: str) -> str:
    lines = [
        f"| {'chapter / test file':<48} | seconds | budget | time / budget |",
        f"|{'-' * 50}|--------:|-------:|--------------:|",
    ]
    for name, secs, budget in rows:
        frac = f"{secs / budget:.2f}" + (" OVER" if secs > budget else "") if budget else ""
        lines.append(f"| {name:<48} | {secs:7.1f} | {budget or '':>6} | {frac:>13} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["quick", "paper", "cache"])
    p.add_argument(
        "--only", default=None, help="only chapters whose file name contains one of these comma-separated strings, e.g. 08_,09_"
    )
    p.add_argument("--timeout", type=int, default=5400, help="per-cell timeout for paper mode (s)")
    p.add_argument(
        "--scale",
        default="paper",
        choices=["quick", "paper"],
        help="paper mode: the scale to execute at; cache mode: the scale `make book` used (sets the budgets)",
    )
    p.add_argument("--save-dir", default=None, help="paper mode: write the executed notebooks here")
    p.add_argument("--cells", type=int, default=0, help="paper mode: also print each chapter's N slowest cells")
    p.add_argument("--cache-path", default=str(ROOT / "_build" / ".jupyter_cache"))
    p.add_argument("--markdown", default=None, help="also write the table to this file")
    args = p.parse_args(argv)
    before = _load()
    print(f"# chapter times, mode {args.mode}; {before}", flush=True)
    if args.mode == "quick":
        rows = quick(args.only)
    elif args.mode == "paper":
        rows = paper(args.only, args.timeout, args.scale, args.save_dir, args.cells)
    else:
        rows = cache(Path(args.cache_path), args.scale)
    text = table(rows, args.mode)
    after = _load()
    print(text)
    print(f"at end: {after}")
    if args.markdown:
        Path(args.markdown).write_text(f"mode {args.mode}; before: {before}; after: {after}\n\n{text}\n")


if __name__ == "__main__":
    main()
