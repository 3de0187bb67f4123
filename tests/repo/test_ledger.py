"""tools/ledger.py: a run's claim records committed for the status page's ledger, and the README's timing and precision
tables generated from the recorded runs."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import ledger  # noqa: E402


def _record(label, verdict="holds", dtype="float64", reason=None, wall=12.0, falsify=False):
    return {"id": f"{label[3:]}.x", "chapter": label, "kind": "bound", "verdict": verdict, "measured": "m",
            "claim": "a long text the ledger leaves out", "device": "cpu", "dtype": dtype, "scale": "quick",
            "commit": "abcdef123456", "date": "2026-12-01 09:00 UTC", "wall_s": wall, "falsify": falsify,
            "float64_reason": reason, "machine": "x86_64", "cpu_count": 2}  # fmt: skip


def test_record_keeps_the_ledger_fields_and_drops_falsified_runs(tmp_path, monkeypatch):
    src = tmp_path / "claims"
    src.mkdir()
    (src / "ch-setup.seed0.json").write_text(json.dumps([_record("ch-setup")]))
    (src / "ch-setup.seed1.falsify.json").write_text(json.dumps([_record("ch-setup", falsify=True)]))
    monkeypatch.setattr(ledger, "RUNS", tmp_path / "runs")
    out = ledger.record(src, "cpu-quick")
    recs = json.loads(out.read_text())["records"]
    assert len(recs) == 1 and "claim" not in recs[0] and recs[0]["wall_s"] == 12.0
    (src / "ch-setup.seed0.json").write_text(json.dumps([{**_record("ch-setup"), "commit": "abcdef123456+dirty"}]))
    with pytest.raises(SystemExit, match="uncommitted code"):
        ledger.record(src, "cpu-quick")
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(SystemExit, match="no claim records"):
        ledger.record(tmp_path / "empty.json", "x")


def test_record_with_merge_replaces_only_the_chapters_it_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(ledger, "chapters", lambda: [("ch-setup", "1. S"), ("ch-descent", "2. D")])
    src = tmp_path / "claims"
    src.mkdir()
    (src / "all.json").write_text(json.dumps([_record("ch-descent"), _record("ch-setup")]))
    ledger.record(src, "cpu-quick")
    (src / "all.json").unlink()
    (src / "ch-setup.seed0.json").write_text(json.dumps([{**_record("ch-setup"), "commit": "fedcba654321"}]))
    recs = json.loads(ledger.record(src, "cpu-quick", merge=True).read_text())["records"]
    assert [(r["chapter"], r["commit"]) for r in recs] == [("ch-setup", "fedcba654321"), ("ch-descent", "abcdef123456")]
    recs = json.loads(ledger.record(src, "cpu-quick").read_text())["records"]  # without merge: the run alone
    assert [r["chapter"] for r in recs] == ["ch-setup"]


def test_tables_are_written_between_their_markers(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    labels = [label for label, _ in ledger.chapters()]
    for name, kw in (("cpu-quick", {}), ("cpu-paper", {"wall": 100.0})):
        (runs / f"{name}.json").write_text(json.dumps({"records": [_record(lab, **kw) for lab in labels]}))
    f32 = [_record(lab, dtype="float64", reason="needs 1e-12") for lab in labels[:1]]
    f32 += [_record(lab, dtype="float32") for lab in labels[1:]]
    (runs / "cpu-float32-quick.json").write_text(json.dumps({"records": f32}))
    monkeypatch.setattr(ledger, "RUNS", runs)
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- generated: timings (x) -->\nold\n<!-- end generated -->\nb\n"
                      "<!-- generated: precision (x) -->\n<!-- end generated -->\n")  # fmt: skip
    ledger.write_tables(readme)
    text = readme.read_text()
    assert "old" not in text and f"| all chapters | {12 * len(labels)} | {100 * len(labels)} |" in text
    assert "| float64 | needs 1e-12 |" in text and "**float32 keeps all verdicts**" in text


def test_the_status_ledger_shows_each_run_on_its_own_line():
    """One line per committed run of the chapter on that kind of machine (never the records of several runs
    counted together), the latest first, with its scale, a requested dtype that the run did not use, its commit and
    its verdicts; nothing for a machine with no run."""
    pytest.importorskip("docutils", reason="companion._book is a Sphinx extension: the book's build has docutils")
    from companion._book import ledger_cell

    quick = [_record("ch-setup"), _record("ch-setup", verdict="fails"), _record("ch-other")]
    paper = [{**_record("ch-setup"), "scale": "paper", "date": "2026-12-02 10:00 UTC", "commit": "0123456789ab"}]
    f32 = [{**_record("ch-setup"), "requested_dtype": "float32", "date": "2026-11-30 08:00 UTC"}]
    falsified = [_record("ch-setup", verdict="fails", falsify=True)]
    runs = [{"name": n, "records": r} for n, r in (("cpu-quick", quick + falsified), ("cpu-paper", paper), ("f32", f32))]
    assert ledger_cell(runs, "ch-setup", "cpu", "float64") == [
        "paper: 2026-12-02, 0123456: 1 ✅",
        "quick: 2026-12-01, abcdef1: 1 ❌, 1 ✅",
        "quick, float32 requested: 2026-11-30, abcdef1: 1 ✅",
    ]
    assert ledger_cell(runs, "ch-setup", "cuda", "float64") == []


def test_the_readme_tables_are_those_the_recorded_runs_give(tmp_path):
    """The README's timing and precision tables are generated (``tools/ledger.py tables``), never edited by hand:
    regenerating them from the committed runs changes nothing."""
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    ledger.write_tables(readme)
    assert readme.read_text() == (ROOT / "README.md").read_text(), "run `python tools/ledger.py tables`"
