"""Commit a run's claim records, so that the status page can say where each chapter last ran.

    python tools/ledger.py record _build/claims --name cpu-paper      # after `make book`
    python tools/ledger.py record gpu/claims.json --name cuda-paper   # after benchmarks/gpu_check.sh
    python tools/ledger.py show

``record`` reads the records of one run (a folder written with ``COMPANION_CLAIMS_DIR``, or a ``claims.json``),
keeps the fields the ledger and the README's tables use (no texts: those are in the registry) and writes
``book/_generated/runs/<name>.json``. The status page's ledger (chapters × CPU, CUDA, float32 on CUDA) is built from
these files by the book build (``companion._book``), never typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "book" / "_generated" / "runs"
KEEP = (
    "id", "chapter", "kind", "verdict", "measured", "value", "interval", "control_passed", "fields",
    "seed_offset", "scale", "device", "dtype", "torch", "python", "machine", "commit", "falsify", "wall_s", "date",
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


def record(source: Path, name: str) -> Path:
    records = compact(read_records(source))
    if not records:
        raise SystemExit(f"no claim records in {source}")
    RUNS.mkdir(parents=True, exist_ok=True)
    out = RUNS / f"{name}.json"
    out.write_text(json.dumps({"records": records}, indent=0, ensure_ascii=False) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="commit one run's records to book/_generated/runs/<name>.json")
    rec.add_argument("source", type=Path)
    rec.add_argument("--name", required=True, help="e.g. cpu-paper, cuda-paper, cuda-float32-paper")
    sub.add_parser("show", help="the recorded runs")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        out = record(args.source, args.name)
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
