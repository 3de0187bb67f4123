"""Commit a run's claim records, so that the status page can say where each chapter last ran.

    python tools/ledger.py record _build/claims --name cpu-paper      # after `make book`
    python tools/ledger.py record gpu/claims.json --name cuda-paper   # after benchmarks/gpu_check.sh
    python tools/ledger.py record DIR --name cpu-paper --merge       # re-ran some chapters: replace only those
    python tools/ledger.py show
    python tools/ledger.py tables                                    # README's timing and precision tables

``record`` reads the records of one run (a folder written with ``COMPANION_CLAIMS_DIR``, or a ``claims.json``),
keeps the fields the ledger and the README's tables use (no texts: those are in the registry) and writes
``book/_generated/runs/<name>.json``. The status page's ledger (chapters × CPU, CUDA, float32 on CUDA) is built from
these files by the book build (``companion._book``), never typed by hand. ``tables`` rewrites the README's
per-chapter timing table (from the runs ``cpu-quick`` and ``cpu-paper``) and precision table (from
``cpu-float32-quick``, a quick run with ``COMPANION_DTYPE=float32``) between their ``<!-- generated: … -->`` markers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "book" / "_generated" / "runs"
KEEP = (
    "id", "chapter", "kind", "verdict", "measured", "value", "interval", "control_passed", "fields",
    "seed_offset", "scale", "device", "dtype", "requested_dtype", "float64_reason", "torch", "python", "machine",
    "cpu_count", "commit", "falsify", "wall_s", "date",
)  # fmt: skip


def read_records(source: Path) -> list[dict]:
    """The records of a run: a folder of ``<label>.seed<k>[.falsify].json`` files, or one ``claims.json``."""
    source = Path(source)
    if source.is_dir():
        out = []
        for path in sorted(source.glob("*.json")):
            out += json.loads(path.read_text())
        return out
    return json.loads(source.read_text())


def compact(records: list[dict]) -> list[dict]:
    return [{k: r[k] for k in KEEP if k in r} for r in records if not r.get("falsify")]


def record(source: Path, name: str, merge: bool = False) -> Path:
    """Write ``book/_generated/runs/<name>.json`` from the records in ``source``. With ``merge``, only the chapters
    in ``source`` are replaced; the recorded runs of the other chapters are kept as they are (each keeps its own
    commit and date, which the README's tables and the status page show)."""
    records = compact(read_records(source))
    if not records:
        raise SystemExit(f"no claim records in {source}")
    dirty = sorted({r["chapter"] for r in records if str(r.get("commit", "")).endswith("+dirty")})
    if dirty:  # the ledger says which commit each chapter ran at: a run of uncommitted code has none
        raise SystemExit(f"records of uncommitted code (commit ...+dirty) for {', '.join(dirty)}: commit, then run again")
    if merge:
        new = {r["chapter"] for r in records}
        order = {label: i for i, (label, _) in enumerate(chapters())}
        kept = [r for r in load_run(name) if r["chapter"] not in new]
        records = sorted(kept + records, key=lambda r: order.get(r["chapter"], len(order)))  # stable within a chapter
    RUNS.mkdir(parents=True, exist_ok=True)
    out = RUNS / f"{name}.json"
    out.write_text(json.dumps({"records": records}, indent=0, ensure_ascii=False) + "\n")
    return out


def chapters() -> list[tuple[str, str]]:
    """``(label, "N. Title")`` of every chapter, in the order of ``_toc.yml``."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = []
    for part in toc.get("parts", []):
        for c in part.get("chapters", []):
            md = ROOT / f"{c['file']}.md"
            text = md.read_text() if md.exists() else ""
            label, title = re.search(r"^\((ch-[a-z0-9-]+)\)=$", text, re.M), re.search(r"^# (.+)$", text, re.M)
            if text.startswith("---\njupytext:") and label and title:
                out.append((label.group(1), _plain(title.group(1))))
    return out


def _plain(title: str) -> str:
    """A chapter title without its TeX, for a Markdown table: ``n \\propto d`` -> ``n ∝ d``."""
    for tex, text in (("\\propto", "∝"), ("$", "")):
        title = title.replace(tex, text)
    return re.sub(r"\s+", " ", title).strip()


def load_run(name: str) -> list[dict]:
    path = RUNS / f"{name}.json"
    return json.loads(path.read_text())["records"] if path.exists() else []


def _by_chapter(records: list[dict]) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for r in records:
        out[r["chapter"]].append(r)
    return out


def _machine(records: list[dict]) -> str:
    """Date, machine and device of a run, and every commit its chapters ran at (a chapter re-run later keeps its own)."""
    r = records[0]
    commits = sorted({x["commit"][:7] for x in records})
    what = "commit" if len(commits) == 1 else "commits"
    where = f"{r.get('machine', '?')}, {r.get('cpu_count', '?')} CPU cores, {r['device']}"
    return f"{r['date'][:10]}, {where}, {what} {', '.join(commits)}"


def timing_table() -> str:
    quick, paper = _by_chapter(load_run("cpu-quick")), _by_chapter(load_run("cpu-paper"))
    if not quick or not paper:
        return "(no recorded runs: `tools/ledger.py record` the runs cpu-quick and cpu-paper first)\n"
    lines = ["| chapter | quick (s) | paper (s) |", "| --- | ---: | ---: |"]
    total = [0.0, 0.0]
    for label, title in chapters():
        q = max((r["wall_s"] for r in quick.get(label, [])), default=float("nan"))
        p = max((r["wall_s"] for r in paper.get(label, [])), default=float("nan"))
        total = [total[0] + q, total[1] + p]
        lines.append(f"| {title} | {q:.0f} | {p:.0f} |")
    lines.append(f"| all chapters | {total[0]:.0f} | {total[1]:.0f} |")
    q0, p0 = [r for rs in quick.values() for r in rs], [r for rs in paper.values() for r in rs]
    return (
        "\n".join(lines)
        + f"\n\nQuick: {_machine(q0)}. Paper: {_machine(p0)}. Each chapter's wall time from its first import of the"
        " package to its claim check (its records' `wall_s`), kernel start not included.\n"
    )


def precision_table() -> str:
    runs = _by_chapter(load_run("cpu-float32-quick"))
    if not runs:
        return "(no recorded float32 run: record a quick run with COMPANION_DTYPE=float32 as cpu-float32-quick)\n"
    lines = ["| chapter | float32 | why float64 where needed |", "| --- | --- | --- |"]
    for label, title in chapters():
        recs = runs.get(label, [])
        reason = next((r.get("float64_reason") for r in recs if r.get("float64_reason")), None)
        fails = sum(r["verdict"] == "fails" for r in recs)
        if not recs:
            verdict, why = "not run", ""
        elif reason:
            verdict, why = "float64", reason
        elif fails:
            verdict, why = f"float32: {fails} of {len(recs)} rows fail", ""
        else:
            verdict, why = "**float32 keeps all verdicts**", ""
        lines.append(f"| {title} | {verdict} | {why} |")
    return "\n".join(lines) + f"\n\nFloat32 run: {_machine([r for rs in runs.values() for r in rs])}, quick scale.\n"


def write_tables(readme: Path = ROOT / "README.md") -> None:
    text = readme.read_text()
    for name, body in (("timings", timing_table()), ("precision", precision_table())):
        pattern = re.compile(rf"(<!-- generated: {name} .*?-->\n).*?(<!-- end generated -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no '<!-- generated: {name} ... -->' block")
        text = pattern.sub(lambda m: m.group(1) + body + m.group(2), text)
    readme.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="commit one run's records to book/_generated/runs/<name>.json")
    rec.add_argument("source", type=Path)
    rec.add_argument("--name", required=True, help="e.g. cpu-paper, cuda-paper, cuda-float32-paper")
    rec.add_argument("--merge", action="store_true", help="replace only the chapters in source, keep the others")
    sub.add_parser("show", help="the recorded runs")
    sub.add_parser("tables", help="rewrite the README's timing and precision tables from the recorded runs")
    args = ap.parse_args(argv)
    if args.cmd == "tables":
        write_tables()
        print("README.md: timing and precision tables rewritten from book/_generated/runs/")
        return 0
    if args.cmd == "record":
        out = record(args.source, args.name, merge=args.merge)
        print(f"wrote {out.relative_to(ROOT)}")
        return 0
    for path in sorted(RUNS.glob("*.json")):
        recs = json.loads(path.read_text())["records"]
        chapters = sorted({r["chapter"] for r in recs})
        print(
            f"{path.stem}: {len(recs)} rows, {len(chapters)} chapters, {recs[0]['device']} {recs[0]['dtype']} "
            f"{recs[0]['scale']}, {max(r['date'] for r in recs)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
