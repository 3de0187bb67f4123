"""benchmarks/claims_compare.py: two runs' claim records compared row by row (the GPU check's step 4), the committed
ledger run read as the CPU side."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import claims_compare  # noqa: E402

LEDGER = ROOT / "book" / "_generated" / "runs" / "cpu-paper.json"


def _full(rid, verdict="holds", control=False, measured="ratio 0.5"):
    """A record as a chapter writes it with COMPANION_CLAIMS_DIR (claim text and ``passed`` included)."""
    return {"id": rid, "chapter": "ch-setup", "claim": "the ratio is at most 1", "paper": "<= 1", "measured": measured,
            "passed": verdict != "fails", "verdict": verdict, "control_passed": control, "falsify": False}  # fmt: skip


def _ledger(tmp_path, records):
    path = tmp_path / "cpu-paper.json"
    path.write_text(json.dumps({"records": [{k: v for k, v in r.items() if k not in ("claim", "passed")} for r in records]}))
    return path


def _gpu(tmp_path, records):
    folder = tmp_path / "claims"
    folder.mkdir()
    (folder / "ch-setup.seed0.json").write_text(json.dumps(records))
    return folder


def test_the_committed_ledger_run_agrees_with_itself():
    rows = claims_compare.extract(LEDGER)
    assert len(rows) > 100 and all(r["id"] for r in rows)
    assert claims_compare.main([str(LEDGER), str(LEDGER)]) == 0


def test_ledger_records_match_chapter_records_by_id(tmp_path):
    recs = [_full("setup.a"), _full("setup.b", verdict="erratum")]
    a = _ledger(tmp_path, recs)
    b = _gpu(tmp_path, [_full("setup.a", measured="ratio 0.5000001"), _full("setup.b", verdict="erratum")])
    rows, ok = claims_compare.compare(claims_compare.extract(a), claims_compare.extract(b))
    assert ok and [r["id"] for r in rows] == ["setup.a", "setup.b"]
    assert 0 < rows[0]["max_rel_diff"] < 1e-6


def test_a_flipped_verdict_a_flipped_control_and_a_missing_row_fail(tmp_path):
    a = _ledger(tmp_path, [_full("setup.a"), _full("setup.b"), _full("setup.c")])
    b = _gpu(tmp_path, [_full("setup.a", verdict="fails"), _full("setup.b", control=True)])
    rows, ok = claims_compare.compare(claims_compare.extract(a), claims_compare.extract(b))
    assert not ok
    assert [r["verdicts_agree"] for r in rows] == [False, False, False]
    assert rows[2].get("only_in") == "A"
    assert claims_compare.main([str(a), str(b)]) == 1


def test_the_table_names_an_accepted_control_and_different_seed_offsets(tmp_path, capsys):
    a = _ledger(tmp_path, [{**_full("setup.a"), "seed_offset": 0}])
    b = _gpu(tmp_path, [{**_full("setup.a", control=True), "seed_offset": 3}])
    assert claims_compare.main([str(a), str(b), "--labels", "cpu,cuda"]) == 1
    out = capsys.readouterr().out
    assert "Seed offsets differ (cpu: 0; cuda: 3)" in out
    assert "| holds | ratio 0.5 | holds, control accepted |" in out


def test_the_summary_counts_the_rows_whose_numbers_differ(tmp_path, capsys):
    a = _ledger(tmp_path, [_full("setup.a"), _full("setup.b", measured="spread 9e-15")])
    b = _gpu(tmp_path, [_full("setup.a"), _full("setup.b", measured="spread 7e-15")])
    assert claims_compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "2 claims; all verdicts agree: True; 1 print different numbers in the two runs" in out
    assert "largest relative difference: 2.22e-01 (ch-setup: setup.b)" in out  # a ledger row names its id
