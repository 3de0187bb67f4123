"""Extract the claim-check tables from executed notebooks and compare two runs (CPU vs GPU).

``python benchmarks/claims_compare.py A.ipynb B.ipynb [--json out.json]`` prints, for every claim of the
chapter, the measured value and the verdict in run A and in run B, the relative difference of the numbers
in the "measured" column, and whether the verdicts agree. Exit status 1 when a verdict differs or a claim is
missing from one run.

Run A and run B draw their random numbers from different generators when they run on different devices
(``torch.Generator('cuda')`` streams differ from the CPU's), so Monte-Carlo numbers differ by sampling
error; identical inputs give identical numbers up to float64 rounding. The verdicts must agree either way.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", re.S)
TITLE = re.compile(r"<caption>Claim check: (.*?)</caption>", re.S)
NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def extract(nb_path: str | Path) -> list[dict]:
    """Every claim row rendered by :class:`companion.claims.ClaimCheck` in an executed notebook."""
    nb = json.loads(Path(nb_path).read_text())
    rows = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/html")
            if not text:
                continue
            text = "".join(text) if isinstance(text, list) else text
            if "claim-check" not in text:
                continue
            title = TITLE.search(text)
            for claim, paper, measured, verdict in ROW.findall(text):
                rows.append({"check": html.unescape(title.group(1)) if title else "",
                             "claim": html.unescape(claim), "paper": html.unescape(paper),
                             "measured": html.unescape(measured), "passed": "holds" in verdict})
    return rows


def numbers(s: str) -> list[float]:
    return [float(x) for x in NUM.findall(s)]


def compare(a: list[dict], b: list[dict]) -> tuple[list[dict], bool]:
    key = lambda r: (r["check"], r["claim"])  # noqa: E731
    bmap = {key(r): r for r in b}
    out, ok = [], True
    for r in a:
        s = bmap.pop(key(r), None)
        if s is None:
            out.append({**r, "other": None, "verdicts_agree": False, "max_rel_diff": None})
            ok = False
            continue
        na, nb = numbers(r["measured"]), numbers(s["measured"])
        diff = None
        if na and len(na) == len(nb):
            diff = max(abs(x - y) / max(abs(x), abs(y), 1e-300) for x, y in zip(na, nb))
        agree = r["passed"] == s["passed"]
        ok &= agree
        out.append({**r, "other": s["measured"], "other_passed": s["passed"], "verdicts_agree": agree, "max_rel_diff": diff})
    for s in bmap.values():
        out.append({**s, "other": None, "verdicts_agree": False, "max_rel_diff": None, "only_in": "B"})
        ok = False
    return out, ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--labels", default="A,B")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    la, lb = args.labels.split(",")
    a, b = extract(args.a), extract(args.b)
    if not a or not b:
        print(f"no claim-check table found in {'A' if not a else 'B'} ({args.a if not a else args.b})")
        return 1
    rows, ok = compare(a, b)
    print(f"| claim | {la} measured | {la} | {lb} measured | {lb} | rel. diff | verdicts agree |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        d = "" if r["max_rel_diff"] is None else f"{r['max_rel_diff']:.1e}"
        print(f"| {r['claim']} | {r['measured']} | {'holds' if r['passed'] else 'fails'} | {r['other']} | "
              f"{'holds' if r.get('other_passed') else ('—' if r['other'] is None else 'fails')} | {d} | "
              f"{'yes' if r['verdicts_agree'] else 'NO'} |")
    print(f"\nall verdicts agree: {ok}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "all_verdicts_agree": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
