"""Run chapters on other random streams and with their negative controls swapped in; tabulate verdicts by seed.

    python tools/robustness.py run book/paper_b/09_failures.md --seed 1 --falsify [--scale paper]
    python tools/robustness.py seeds --seeds 5 [--scale quick] [--out book/_generated/seeds.md]
    python tools/robustness.py seeds --seeds 3 --only 13_ --reuse RECORDS --records RECORDS
    python tools/robustness.py seeds --seeds 21 --only 06_ --keep-table

``run`` executes one chapter's paired notebook with ``COMPANION_SEED`` (the offset added to every seed),
``COMPANION_FALSIFY`` and ``COMPANION_SCALE`` set, reads the claim records it writes and prints, row by row, the
verdict on the data and the verdict of its negative control; it exits non-zero on a *problem*: a row that fails
on the data, a control that is accepted, or a chapter without records. Under ``--falsify`` the chapter's own
``assert`` is expected to fail (that is the point of a control); the records tell whether it failed for the right
reason. ``seeds`` runs every chapter of ``_toc.yml`` at offsets ``0 … N−1`` and writes a verdict × seed table;
with ``--only`` it runs the chapters whose file name contains the pattern and reads the others' runs from the
records of an earlier ``seeds --records`` (``--reuse``), or keeps the other chapters' lines of the table already at
``--out`` (``--keep-table``, which names the re-measured chapters and their date in the table's header), so a table
stays whole when one chapter changes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ChapterRun:
    """What one execution of a chapter left: its claim records, the error (if the notebook raised) and problems."""

    chapter: str
    seed: int
    falsify: bool
    records: list[dict] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0

    @property
    def problems(self) -> list[str]:
        out = []
        if not self.records:
            out.append(f"{self.chapter}: no claim records (the chapter stopped before its claim check: {self.error[-400:]})")
        for r in self.records:
            if not r["passed"]:
                out.append(f"{self.chapter} seed {self.seed}: row {r['claim']!r} fails on the data ({r['measured']})")
            if self.falsify and r.get("control") is not None and r.get("control_passed"):
                out.append(f"{self.chapter} seed {self.seed}: row {r['claim']!r} accepts its wrong value {r['control']}")
        if self.records and self.error and not self.falsify:
            out.append(f"{self.chapter} seed {self.seed}: the notebook raised after its claim check: {self.error[-400:]}")
        if self.falsify and self.records and not any(r.get("control") for r in self.records):
            pass  # a chapter of bound rows only: nothing to swap in
        return out


def chapters() -> list[Path]:
    """The chapter sources (``.md``) in ``_toc.yml`` order."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [ROOT / f"{c['file']}.md" for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [f for f in files if f.exists() and f.read_text().startswith("---\njupytext:")]


def run_chapter(
    source: Path, *, seed: int = 0, falsify: bool = False, scale: str = "quick", timeout: int = 3600, threads: int | None = None
) -> ChapterRun:
    """Execute the paired notebook of ``source`` in a fresh kernel with the given switches.

    The switches go to the kernel's environment only (this process's is left alone), so several chapters can run
    at once from threads; ``threads`` sets the kernel's ``OMP_NUM_THREADS`` (e.g. 1 when two run side by side).
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    source = Path(source).resolve()
    nb_path = source.with_suffix(".ipynb")
    nb = nbformat.read(nb_path, as_version=4)
    run = ChapterRun(source.stem, seed, falsify)
    with tempfile.TemporaryDirectory() as records:
        env = {
            **os.environ,
            "COMPANION_SEED": str(seed),
            "COMPANION_FALSIFY": "1" if falsify else "0",
            "COMPANION_SCALE": scale,
            "COMPANION_CLAIMS_DIR": records,
            "COMPANION_PROGRESS": "0",
            "COMPANION_WIDGETS": "static",
        }
        if threads is not None:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        t0 = time.perf_counter()
        try:
            NotebookClient(
                nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(nb_path.parent)}}
            ).execute(env=env)
        except CellExecutionError as exc:
            run.error = str(exc)
        finally:
            run.seconds = time.perf_counter() - t0
        for path in sorted(Path(records).glob("*.json")):
            run.records += json.loads(path.read_text())
    return run


def _print_run(run: ChapterRun) -> None:
    print(f"{run.chapter}: seed offset {run.seed}, falsify {run.falsify}, {run.seconds:.0f} s, {len(run.records)} rows")
    for r in run.records:
        control = ""
        if r.get("control") is not None:
            control = f" | control {r['control']}: {'ACCEPTED' if r['control_passed'] else 'rejected'}"
        print(f"  [{'PASS' if r['passed'] else 'FAIL'}] {r.get('id', '')} {r['claim']} | {r['measured']}{control}")
    for p in run.problems:
        print("  PROBLEM:", p)


def seeds_table(runs: dict[str, list[ChapterRun]], scale: str) -> str:
    """A markdown table: one line per claim row, one column per seed offset (✅ / ⚠️ erratum holds / ❌)."""
    seeds = sorted({r.seed for rs in runs.values() for r in rs})
    mark = {"holds": "✅", "erratum": "⚠️", "fails": "❌"}
    days = sorted({str(r["date"])[:10] for rs in runs.values() for run in rs for r in run.records if r.get("date")})
    days = days or [dt.date.today().isoformat()]
    lines = [
        f"Measured {days[0] if len(days) == 1 else days[0] + ' to ' + days[-1]} on {platform.machine()} "
        f"({os.cpu_count()} CPU cores, {platform.system()}), `{scale}` scale, seed offsets {seeds[0]}–{seeds[-1]} "
        f"(`COMPANION_SEED`). ✅ holds · ⚠️ the corrected statement of an erratum holds · ❌ fails · "
        "— the chapter stopped before its check.",
        "",
        "| chapter | claim | " + " | ".join(str(s) for s in seeds) + " |",
        "| --- | --- | " + " | ".join("---" for _ in seeds) + " |",
    ]
    for chapter, rs in runs.items():
        names = {(r["id"], r["claim"]): None for run in rs for r in run.records}
        for rid, name in names:
            cells = []
            for s in seeds:
                rec = [r for run in rs if run.seed == s for r in run.records if (r["id"], r["claim"]) == (rid, name)]
                cells.append(mark[rec[0]["verdict"]] if rec else "—")
            lines.append(f"| {chapter} | `{rid}` {name.replace('|', '/')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("run", help="run one chapter")
    one.add_argument("chapter", type=Path)
    one.add_argument("--seed", type=int, default=0)
    one.add_argument("--falsify", action="store_true")
    one.add_argument("--scale", default="quick", choices=["quick", "paper"])
    one.add_argument("--records", type=Path, default=None, help="also write the run's claim records here (JSON)")
    many = sub.add_parser("seeds", help="every chapter at seed offsets 0..N-1; writes a verdict x seed table")
    many.add_argument("--seeds", type=int, default=3)
    many.add_argument("--scale", default="quick", choices=["quick", "paper"])
    many.add_argument("--out", type=Path, default=ROOT / "book" / "_generated" / "seeds.md")
    many.add_argument("--records", type=Path, default=None, help="also keep every run's claim records here (JSON)")
    many.add_argument("--only", default=None, help="run only the chapters whose file name contains this")
    many.add_argument("--reuse", type=Path, default=None, help="with --only: the other chapters' earlier records")
    many.add_argument(
        "--keep-table", action="store_true", help="with --only: keep the other chapters' lines of the table at --out"
    )
    args = parser.parse_args(argv)
    if args.cmd == "run":
        run = run_chapter(args.chapter, seed=args.seed, falsify=args.falsify, scale=args.scale)
        _print_run(run)
        if args.records is not None:
            args.records.mkdir(parents=True, exist_ok=True)
            name = f"{args.chapter.stem}.seed{run.seed}{'.falsify' if run.falsify else ''}.json"
            (args.records / name).write_text(json.dumps(run.records, indent=1))
        return 1 if run.problems else 0
    if args.keep_table and (args.only is None or args.reuse is not None):
        parser.error("--keep-table goes with --only and without --reuse")
    if not args.keep_table and (args.only is None) != (args.reuse is None):
        parser.error("--only and --reuse go together")
    runs: dict[str, list[ChapterRun]] = {}
    problems = []
    for source in chapters():
        for s in range(args.seeds):
            if args.only is not None and args.only not in source.name:
                if args.keep_table:
                    break  # its lines stay as they are in the table at --out
                saved = args.reuse / f"{source.stem}.seed{s}.json"
                if not saved.exists():
                    raise SystemExit(f"--reuse: no records {saved}")
                run = ChapterRun(source.stem, s, False, json.loads(saved.read_text()))
            else:
                run = run_chapter(source, seed=s, scale=args.scale)
                _print_run(run)
            runs.setdefault(source.stem, []).append(run)
            problems += run.problems
    table = seeds_table(runs, args.scale)
    if args.keep_table:
        if not runs:
            raise SystemExit(f"--only {args.only!r}: no chapter matches")
        table = merge_table(args.out.read_text(), table, list(runs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table)
    if args.records is not None:
        args.records.mkdir(parents=True, exist_ok=True)
        for chapter, rs in runs.items():
            for run in rs:
                (args.records / f"{chapter}.seed{run.seed}.json").write_text(json.dumps(run.records, indent=1))
    print(f"wrote {args.out}; {len(problems)} problem(s)")
    return 1 if problems else 0


def merge_table(old: str, new: str, chapters_run: list[str]) -> str:
    """The table ``old`` with the lines of ``chapters_run`` replaced by those of ``new`` (same seed columns); the
    header keeps ``old``'s measurement and names the re-measured chapters with ``new``'s."""
    old_lines, new_lines = old.rstrip("\n").split("\n"), new.rstrip("\n").split("\n")
    if old_lines[2] != new_lines[2]:
        raise SystemExit("--keep-table: the seed columns differ from the table's; run every chapter instead")
    mine = lambda line: any(line.startswith(f"| {c} |") for c in chapters_run)
    body = [line for line in old_lines[4:] if not mine(line)]
    fresh = [line for line in new_lines[4:] if mine(line)]
    order = [line.split(" | ")[0] for line in old_lines[4:]]
    first = min((order.index(f"| {c}") for c in chapters_run if f"| {c}" in order), default=len(body))
    at = sum(1 for line in old_lines[4 : 4 + first] if not mine(line))
    measured = new_lines[0].split(" `")[0].removeprefix("Measured ").rstrip(",")
    superseded = lambda m: set(m.group(1).split(", ")) <= set(chapters_run)  # an older note these lines replace
    header = re.sub(r" Re-measured [^:]+: ([^.]+)\.", lambda m: "" if superseded(m) else m.group(0), old_lines[0])
    header = header.replace(" ✅ holds", f" Re-measured {measured}: {', '.join(chapters_run)}. ✅ holds", 1)
    return "\n".join([header, *old_lines[1:4], *body[:at], *fresh, *body[at:]]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
