"""Compare the claim checks of two runs: CPU against GPU, or a build before a change against one after it.

``python benchmarks/claims_compare.py A B [--labels cpu,cuda] [--json out.json]``, where A and B are each

* an executed chapter notebook (``.ipynb``): the records :class:`companion.claims.ClaimCheck` embeds in its
  table (a ``<script class="companion-claims">`` JSON block; older notebooks: the table's cells);
* a ``claims.json`` (every record of a built site, written at its root by the book build);
* a run of the ledger (``book/_generated/runs/cpu-paper.json``: ``{"records": [...]}``, committed by
  ``tools/ledger.py record``, so a fresh checkout has the CPU side without building the book);
* a built site's html folder (its ``claims.json``);
* a folder of records written with ``COMPANION_CLAIMS_DIR`` (``<chapter>.seed<k>[.falsify].json``).

For every claim — matched by row id (``claims.json`` and records carry it); records written before rows had ids
are matched by chapter and position in the chapter (each chapter's rows run in their registered order), the chapter's
file stem read as its label — it prints the measured value and the verdict in run A
and in run B, the largest relative difference of the numbers in the "measured" column, and whether the
verdicts agree (and the controls' outcomes, where both runs record them); then the largest difference over all
claims and the claims whose numbers differ most.
Exit status 1 when a verdict differs or a claim is missing from one run.

Both runs draw their random numbers on the CPU (``companion.device`` moves the drawn tensors to the
device), so a CPU and a GPU run of one chapter start from the same data; their numbers differ by floating
point rounding and its propagation through the experiment. The verdicts must agree.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

SCRIPT = re.compile(r"<script type=['\"]application/json['\"] class=['\"]companion-claims['\"]>(.*?)</script>", re.S)
TR = re.compile(r"<tr>(.*?)</tr>", re.S)
TD = re.compile(r"<td>(.*?)</td>", re.S)
TITLE = re.compile(r"<caption>Claim check: (.*?)</caption>", re.S)
TAG = re.compile(r"<[^>]+>")
NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _labels() -> dict[str, str]:
    """Chapter file stem -> label (``09_failures`` -> ``ch-failures``), from the chapters of ``_toc.yml``."""
    root = Path(__file__).resolve().parents[1]
    out = {}
    for md in sorted((root / "book").rglob("*.md")):
        m = re.search(r"^\((ch-[a-z0-9-]+)\)=$", md.read_text(), re.M)
        if m:
            out[md.stem] = m.group(1)
    return out


def _row(
    chapter: str,
    claim: str,
    paper: str,
    measured: str,
    passed: bool,
    rid: str | None = None,
    control_passed: bool | None = None,
    seed_offset: int | None = None,
) -> dict:
    return {
        "chapter": chapter,
        "claim": claim,
        "paper": paper,
        "measured": measured,
        "passed": bool(passed),
        "id": rid,
        "control_passed": control_passed,
        "seed_offset": seed_offset,
    }


def _from_records(records: list[dict]) -> list[dict]:
    """Rows from records; a ledger's records carry the row id, the verdict and the control's outcome, not the text."""
    return [
        _row(
            r.get("chapter") or r.get("title", ""),
            r.get("claim") or r.get("id", ""),
            r.get("paper", ""),
            r.get("measured", ""),
            r.get("passed", r.get("verdict") in ("holds", "erratum")),
            r.get("id"),
            r.get("control_passed"),
            r.get("seed_offset"),
        )
        for r in records
        if not r.get("falsify")
    ]


def _from_notebook(path: Path) -> list[dict]:
    nb = json.loads(path.read_text())
    rows: list[dict] = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/html")
            if not text:
                continue
            text = "".join(text) if isinstance(text, list) else text
            if "claim-check" not in text:
                continue
            block = SCRIPT.search(text)
            if block:
                rows += _from_records(json.loads(block.group(1).replace("<\\/", "</")))
                continue
            title = TITLE.search(text)  # a table without records: read its cells
            chapter = html.unescape(title.group(1)) if title else ""
            for tr in TR.findall(text):
                cells = TD.findall(tr)  # claim, paper, [threshold,] measured, verdict
                if len(cells) < 4:
                    continue
                claim, paper, measured, verdict = cells[0], cells[1], cells[-2], cells[-1]
                rows.append(
                    _row(
                        chapter,
                        html.unescape(claim),
                        html.unescape(TAG.sub(" ", paper)),
                        html.unescape(TAG.sub(" ", measured)),
                        "holds" in verdict,
                    )
                )
    return rows


def extract(source: str | Path) -> list[dict]:
    """The claim rows of one run (see the module docstring for what ``source`` may be)."""
    path = Path(source)
    if path.is_dir():
        if (path / "claims.json").exists():
            return _from_records(json.loads((path / "claims.json").read_text()))
        records: list[dict] = []
        for f in sorted(path.glob("*.json")):
            records += json.loads(f.read_text())
        return _from_records(records)
    if path.suffix == ".ipynb":
        return _from_notebook(path)
    data = json.loads(path.read_text())
    return _from_records(data["records"] if isinstance(data, dict) else data)


def numbers(s: str) -> list[float]:
    return [float(x) for x in NUM.findall(s)]


def rel_diff(a: str, b: str) -> float | None:
    """Largest relative difference between the numbers of two "measured" strings (None: not comparable)."""
    na, nb = numbers(a), numbers(b)
    if not na or len(na) != len(nb):
        return None
    return max(abs(x - y) / max(abs(x), abs(y), 1e-300) for x, y in zip(na, nb))


def _keys(rows: list[dict], by_position: bool) -> list[tuple]:
    """(label, row id) of each row; (label, position in the chapter) where one run predates the row ids."""
    labels, seen, out = _labels(), {}, []
    for r in rows:
        label = labels.get(r["chapter"], r["chapter"])
        seen[label] = seen.get(label, -1) + 1
        out.append((label, seen[label]) if by_position else (label, r["id"]))
    return out


def compare(a: list[dict], b: list[dict]) -> tuple[list[dict], bool]:
    by_position = not (all(r["id"] for r in a) and all(r["id"] for r in b))
    keyed_a = dict(zip(_keys(a, by_position), a))
    bmap = dict(zip(_keys(b, by_position), b))
    out, ok = [], True
    for k, r in keyed_a.items():
        s = bmap.pop(k, None)
        if s is None:
            out.append({**r, "other": None, "verdicts_agree": False, "max_rel_diff": None, "only_in": "A"})
            ok = False
            continue
        controls = (r["control_passed"], s["control_passed"])
        agree = r["passed"] == s["passed"] and (None in controls or controls[0] == controls[1])
        ok &= agree
        out.append(
            {
                **r,
                "other_claim": s["claim"],
                "other": s["measured"],
                "other_passed": s["passed"],
                "other_control_passed": s["control_passed"],
                "verdicts_agree": agree,
                "max_rel_diff": rel_diff(r["measured"], s["measured"]),
            }
        )
    for s in bmap.values():
        out.append({**s, "other": None, "verdicts_agree": False, "max_rel_diff": None, "only_in": "B"})
        ok = False
    return out, ok


def _verdict(passed: bool, control_passed: bool | None) -> str:
    return ("holds" if passed else "fails") + (", control accepted" if control_passed else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--labels", default="A,B")
    p.add_argument("--json", default=None)
    p.add_argument("--top", type=int, default=5, help="list the claims with the largest differences")
    args = p.parse_args(argv)
    la, lb = args.labels.split(",")
    a, b = extract(args.a), extract(args.b)
    if not a or not b:
        print(f"no claim record found in {'A' if not a else 'B'} ({args.a if not a else args.b})")
        return 1
    rows, ok = compare(a, b)
    offsets = [sorted({str(r["seed_offset"]) for r in run if r["seed_offset"] is not None}) for run in (a, b)]
    if all(offsets) and offsets[0] != offsets[1]:
        print(
            f"Seed offsets differ ({la}: {', '.join(offsets[0])}; {lb}: {', '.join(offsets[1])}): the numbers differ by "
            "the draws as well as by rounding; the verdicts must agree all the same.\n"
        )
    print(f"| chapter | claim | {la} measured | {la} | {lb} measured | {lb} | rel. diff | verdicts agree |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = "" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.1e}"
        other = "—" if r["other"] is None else _verdict(r.get("other_passed"), r.get("other_control_passed"))
        print(
            f"| {r['chapter']} | {r['claim']} | {r['measured']} | {_verdict(r['passed'], r['control_passed'])} | "
            f"{r['other'] if r['other'] is not None else '—'} | {other} | {d} | {'yes' if r['verdicts_agree'] else 'NO'} |"
        )
    diffs = sorted((r for r in rows if r["max_rel_diff"] is not None), key=lambda r: -r["max_rel_diff"])
    not_comparable = sum(1 for r in rows if r["other"] is not None and r["max_rel_diff"] is None)
    differing = sum(1 for r in diffs if r["max_rel_diff"] > 0)
    print(
        f"\n{len(rows)} claims; all verdicts agree: {ok}; {differing} print different numbers in the two runs "
        "(rows whose numbers are float64 residues differ by rounding alone); largest relative difference: "
        + (f"{diffs[0]['max_rel_diff']:.2e} ({diffs[0]['chapter']}: {diffs[0]['claim']})" if diffs else "—")
        + (f"; {not_comparable} claims whose measured text has different numbers of numbers" if not_comparable else "")
    )
    for r in diffs[1 : args.top]:
        print(f"  {r['max_rel_diff']:.2e}  {r['chapter']}: {r['claim']}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"rows": rows, "all_verdicts_agree": ok, "max_rel_diff": diffs[0]["max_rel_diff"] if diffs else None},
                indent=1,
                ensure_ascii=False,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
