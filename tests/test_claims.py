"""The claim check: rows need a source, a threshold and refs; value rows carry a negative control that the
falsify switch swaps in; records carry provenance; a chapter can be run on another stream with its controls."""

import json
import sys
from pathlib import Path

import nbformat
import pytest

from companion import claims

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import robustness  # noqa: E402

ROW = dict(
    refs="A Lemma 4.5",
    source="'the gradient is Lipschitz'",
    threshold="ratio <= 1 (the lemma's constant)",
    paper="<= 1",
    measured="0.4",
)


def test_rows_need_source_threshold_and_refs():
    check = claims.ClaimCheck("t", chapter="t")
    for missing in ("refs", "source", "threshold"):
        row = {**ROW, missing: ""}
        with pytest.raises(ValueError, match=missing):
            check.add("row", passed=True, **row)
    with pytest.raises(ValueError, match="boolean"):
        check.add("row", passed="yes", **ROW)
    check.add("row", passed=True, **ROW)
    with pytest.raises(ValueError, match="two rows"):
        check.add("row", passed=True, **ROW)


def test_compare_evaluates_the_rule_at_the_paper_value_and_the_control(monkeypatch):
    monkeypatch.delenv("COMPANION_FALSIFY", raising=False)
    check = claims.ClaimCheck("t", chapter="t")
    interval = (-0.55, -0.45)
    contains = lambda v: interval[0] <= v <= interval[1]  # noqa: E731
    check.compare("slope", expected=-0.5, wrong=-1.0, test=contains, **ROW)
    row = check.rows[0]
    assert row.passed and row.control == "-1" and row.control_passed is False
    assert check.all_passed
    monkeypatch.setenv("COMPANION_FALSIFY", "1")
    assert not check.all_passed  # the control is swapped in and rejected
    assert "wrong value -1 is rejected" in check.failures()
    with pytest.raises(ValueError, match="distinct"):
        check.compare("same", expected=1.0, wrong=1.0, test=contains, **ROW)


def test_a_control_that_is_accepted_is_reported(monkeypatch):
    monkeypatch.setenv("COMPANION_FALSIFY", "1")
    check = claims.ClaimCheck("t", chapter="t")
    check.compare("too wide", expected=0.0, wrong=1.0, test=lambda v: abs(v) < 10, **ROW)
    assert check.all_passed  # a row that cannot fail passes even falsified
    assert "cannot fail" in check.failures()


def test_records_carry_provenance_and_the_html_embeds_them(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_SEED", "3")
    monkeypatch.setenv("COMPANION_SCALE", "quick")
    check = claims.ClaimCheck("t", chapter="01_x")
    check.add("bound", passed=True, **ROW)
    check.add("erratum row", passed=True, erratum="c = 1", **{**ROW, "paper": "c = ln 2"})
    path = check.write(tmp_path)
    assert path.name == "01_x.seed3.json"
    recs = json.loads(path.read_text())
    for key in (
        "chapter",
        "claim",
        "paper",
        "measured",
        "verdict",
        "seed_offset",
        "scale",
        "device",
        "dtype",
        "torch",
        "commit",
        "wall_s",
        "threshold",
        "source",
        "refs",
    ):
        assert key in recs[0], key
    assert [r["verdict"] for r in recs] == ["holds", "erratum"]
    page = check._repr_html_()
    assert "companion-claims" in page and "⚠️ erratum" in page and "<s>c = 1</s>" in page
    assert claims.load_records(tmp_path) == recs


def _chapter(tmp_path: Path, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, tmp_path / "toy.ipynb")
    (tmp_path / "toy.md").write_text("toy")
    return tmp_path / "toy.md"


TOY = """
from companion import claims, device
g = device.generator(0)
x = float(device.randn((4000,), generator=g, device="cpu").mean())
check = claims.ClaimCheck("toy", chapter="toy")
check.compare("mean is 0", refs="B Appendix A", source="'E x = 0'", threshold="|mean| <= 4/sqrt(n) (4 s.e.)",
              paper="0", measured=f"{x:.4f}", test=lambda v: abs(x - v) <= 4 / 4000 ** 0.5, expected=0.0, wrong=1.0)
check.report()
assert check.all_passed, check.failures()
"""


def test_runner_reads_records_on_another_stream_and_with_controls(tmp_path):
    source = _chapter(tmp_path, TOY)
    plain = robustness.run_chapter(source, seed=2, timeout=120)
    assert plain.problems == [] and plain.records[0]["seed_offset"] == 2 and not plain.error
    falsified = robustness.run_chapter(source, seed=1, falsify=True, timeout=120)
    assert "AssertionError" in falsified.error and "is rejected" in falsified.error
    assert falsified.problems == []  # the row holds on the data, its control is rejected
    table = robustness.seeds_table({"toy": [plain, falsified]}, "quick")
    assert "| toy | mean is 0 | ✅ | ✅ |" in table
