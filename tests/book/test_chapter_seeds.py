"""Every chapter on two further random streams, with its negative controls swapped in (quick scale).

nbval executes each chapter at its default seed (``book/**.ipynb``); here each chapter runs again with
``COMPANION_SEED=1`` and ``=2`` (every seed offset by that much) and ``COMPANION_FALSIFY=1`` (every value row judged
on the nearest wrong value instead of the paper's). A run passes when every row holds on the data of that stream
and every negative control is rejected, so one run tests both that the verdicts do not depend on the seed and that
the checks can fail. ``tools/robustness.py`` runs the same at any seed or scale.
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import robustness  # noqa: E402

CHAPTERS = robustness.chapters()


@pytest.mark.slow
@pytest.mark.parametrize("source", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_chapter_holds_on_two_other_streams_and_rejects_its_controls(source):
    """Seed offsets 1 and 2 side by side, one thread each (the machine's two cores)."""
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda s: robustness.run_chapter(source, seed=s, falsify=True, scale="quick", timeout=1800, threads=1), (1, 2)
            )
        )
    problems = [p for run in runs for p in run.problems]
    assert problems == [], "\n".join(problems)
    for run in runs:  # the chapter's assert fails, naming each control it rejected
        for r in (r for r in run.records if r.get("control") is not None):
            assert repr(r["claim"]) in run.error, f"seed {run.seed}: the failure message does not name {r['claim']!r}"
