"""The claim check reads its rows from the registry: texts and numbers come from there, the chapter supplies the
measurement and the outcome; unregistered rows, registered rows that did not run, and value rows without their
control fail; the falsify switch swaps the controls in; records carry the row's id, kind, revisions and provenance."""

import copy
import json
import sys
from pathlib import Path

import nbformat
import pytest

from companion import claims, registry

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import robustness  # noqa: E402

RAW = {
    "chapter": "ch-toy",
    "rows": [
        {
            "id": "toy.bound",
            "claim": "the lemma holds",
            "refs": ["A Lemma 4.5"],
            "kind": "bound",
            "source": "'the gradient is Lipschitz'",
            "paper": "LHS ≤ RHS",
            "rule": {
                "text": "every ratio ≤ {limit}",
                "params": {"limit": {"value": 1, "from": "the lemma's constant"}},
            },
            "scales": ["quick", "paper"],
            "registered": "2026-11-29",
        },
        {
            "id": "toy.slope",
            "claim": "slope at L = {L}",
            "refs": ["A Theorem 4.8"],
            "kind": "value",
            "source": "'O(T^{-1/L})'",
            "paper": "-1/L",
            "rule": {
                "text": "the 99 % interval contains the expected value",
                "params": {"confidence": {"value": 0.99, "from": "a stated rule"}},
                "expected": {"computed": "-1/L for each L", "from": "Theorem 4.8"},
                "wrong": {"value": -1.0, "label": "-1 (a linear rate)", "from": "a reader's guess"},
            },
            "scales": ["quick", "paper"],
            "registered": "2026-11-29",
            "revisions": [
                {
                    "date": "2026-11-30",
                    "after_data": True,
                    "was": "95 % interval",
                    "now": "99 % interval",
                    "rationale": "seed offset 2 fell outside the 95 % interval",
                    "impact": "seed offset 2: fails -> holds",
                    "commit": "abc1234",
                }
            ],
        },
        {
            "id": "toy.mean",
            "claim": "the mean is 0",
            "refs": ["B Appendix A"],
            "kind": "value",
            "source": "'E x = 0'",
            "paper": "0",
            "rule": {
                "text": "|mean| within 4 standard errors",
                "expected": {"value": 0, "from": "symmetry"},
                "wrong": {"value": 1, "from": "a shifted mean"},
            },
            "scales": ["paper"],
            "registered": "2026-11-29",
        },
    ],
    "retired": [{"id": "toy.old", "claim": "an old row", "retired": "2026-11-30", "reason": "replaced by toy.slope",
                 "replaced_by": "toy.slope"}],
}  # fmt: skip


def _check(raw=RAW, scale="quick", monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setenv("COMPANION_SCALE", scale)
    return claims.ClaimCheck("ch-toy", registry=registry.parse(copy.deepcopy(raw), "toy.yml"))


def test_texts_and_numbers_come_from_the_registry(monkeypatch):
    monkeypatch.delenv("COMPANION_FALSIFY", raising=False)
    check = _check(monkeypatch=monkeypatch)
    rule = check.rule("toy.bound")
    assert rule["limit"] == 1.0 and rule.kind == "bound" and rule.fingerprint
    check.add("toy.bound", measured="max 0.4", passed=0.4 <= rule["limit"])
    interval = (-0.55, -0.45)
    check.compare("toy.slope", measured="-0.5 [-0.55, -0.45]", test=lambda v: interval[0] <= v <= interval[1],
                  expected=-0.5, fields={"L": 2})  # fmt: skip
    b, s = check.rows
    assert b.claim == "the lemma holds" and b.threshold == "every ratio ≤ 1"
    assert s.claim == "slope at L = 2" and s.control == "-1 (a linear rate)" and s.control_passed is False
    assert s.revised_after_data and s.revisions[0]["was"] == "95 % interval"
    assert check.all_passed  # toy.mean is registered at paper scale only


def test_unregistered_and_retired_rows_and_wrong_scales_are_refused(monkeypatch):
    check = _check(monkeypatch=monkeypatch)
    with pytest.raises(KeyError, match="not registered"):
        check.add("toy.new", measured="1", passed=True)
    with pytest.raises(KeyError, match="retired"):
        check.rule("toy.old")
    with pytest.raises(ValueError, match="scales"):
        check.compare("toy.mean", measured="0.01", test=lambda v: abs(v) < 0.1)


def test_a_registered_row_that_did_not_run_fails_the_check(monkeypatch):
    check = _check(monkeypatch=monkeypatch)
    check.add("toy.bound", measured="0.4", passed=True)
    assert not check.all_passed and check.missing() == ["toy.slope"]
    assert "registered row toy.slope did not run at quick scale" in check.failures()
    paper = _check(scale="paper", monkeypatch=monkeypatch)
    assert paper.missing() == ["toy.bound", "toy.slope", "toy.mean"]


def test_value_rows_need_their_control_and_the_registered_values(monkeypatch):
    check = _check(monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match="control"):
        check.add("toy.slope", measured="-0.5", passed=True, fields={"L": 2})
    with pytest.raises(ValueError, match="computes expected"):
        check.compare("toy.slope", measured="-0.5", test=lambda v: True, fields={"L": 2})
    with pytest.raises(ValueError, match="registered as -1"):
        check.compare("toy.slope", measured="-0.5", test=lambda v: True, expected=-0.5, wrong=-2.0, fields={"L": 2})
    with pytest.raises(ValueError, match="needs fields="):
        check.compare("toy.slope", measured="-0.5", test=lambda v: True, expected=-0.5)
    with pytest.raises(ValueError, match="boolean"):
        check.add("toy.bound", measured="0.4", passed="yes")
    check.add("toy.bound", measured="0.4", passed=True)
    with pytest.raises(ValueError, match="twice"):
        check.add("toy.bound", measured="0.4", passed=True)


def test_the_falsify_switch_judges_the_rows_on_their_controls(monkeypatch):
    check = _check(monkeypatch=monkeypatch)
    check.add("toy.bound", measured="0.4", passed=True)
    check.compare("toy.slope", measured="-0.5", test=lambda v: abs(v + 0.5) < 0.05, expected=-0.5, fields={"L": 2})
    monkeypatch.setenv("COMPANION_FALSIFY", "1")
    assert not check.all_passed and "wrong value -1 (a linear rate) is rejected" in check.failures()
    wide = _check(monkeypatch=monkeypatch)
    wide.add("toy.bound", measured="0.4", passed=True)
    wide.compare("toy.slope", measured="-0.5", test=lambda v: abs(v) < 10, expected=-0.5, fields={"L": 2})
    assert wide.all_passed and "cannot fail" in wide.failures()


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda r: r["rows"][1]["rule"].pop("wrong"), "nearest wrong value"),
        (lambda r: r["rows"][0].update(kind="claim"), "kind must be one of"),
        (lambda r: r["rows"][0].update(id="other.bound"), "id must be 'toy."),
        (lambda r: r["rows"][0].update(scales=["fast"]), "scales"),
        (lambda r: r["rows"][0]["rule"]["params"]["limit"].pop("from"), "needs 'from'"),
        (lambda r: r["rows"][1]["revisions"][0].pop("after_data"), "after seeing data"),
        (lambda r: r["rows"][1]["revisions"][0].update(date="2026-11-01"), "date order"),
        (lambda r: r["rows"].append(copy.deepcopy(r["rows"][0])), "two rows"),
        (lambda r: r["retired"][0].update(id="toy.bound"), "never reused"),
        (lambda r: r["rows"][2]["rule"]["wrong"].update(value=0), "same number"),
    ],
)
def test_the_registry_format_is_enforced(edit, match):
    raw = copy.deepcopy(RAW)
    edit(raw)
    with pytest.raises(registry.RegistryError, match=match):
        registry.parse(raw, "toy.yml")


def test_the_fingerprint_sees_the_rule_not_the_wording():
    raw = copy.deepcopy(RAW["rows"][0])
    fp = registry.fingerprint(raw)
    assert registry.fingerprint({**raw, "claim": "reworded", "source": "another quote"}) == fp
    assert registry.fingerprint({**raw, "rule": {**raw["rule"], "text": "every  ratio ≤ {limit}"}}) == fp
    tighter = copy.deepcopy(raw)
    tighter["rule"]["params"]["limit"]["value"] = 1.5
    assert registry.fingerprint(tighter) != fp
    assert registry.fingerprint({**raw, "scales": ["paper"]}) != fp
    assert registry.fingerprint({**raw, "kind": "consistency"}) != fp


def test_records_carry_the_id_kind_revisions_and_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPANION_SEED", "3")
    check = _check(monkeypatch=monkeypatch)
    check.add("toy.bound", measured="0.4", passed=True)
    check.compare("toy.slope", measured="-0.5", test=lambda v: abs(v + 0.5) < 0.05, expected=-0.5, fields={"L": 2})
    path = check.write(tmp_path)
    assert path.name == "ch-toy.seed3.json"
    recs = json.loads(path.read_text())
    for key in ("id", "kind", "chapter", "claim", "paper", "measured", "verdict", "seed_offset", "scale", "device",
                "dtype", "torch", "commit", "wall_s", "threshold", "source", "refs", "revision_count",
                "revised_after_data", "registered"):  # fmt: skip
        assert key in recs[0], key
    assert [r["kind"] for r in recs] == ["bound", "value"] and recs[1]["revised_after_data"] == 1
    page = check._repr_html_()
    assert "companion-claims" in page and "rule revised after data, 2026-11-30" in page
    assert "id='claim-toy.slope'" in page and "<details" in page
    assert [t["id"] for t in check.rows[1].replaces] == ["toy.old"] and not check.rows[0].replaces
    assert "replaces 1 retired row" in page and "retired 2026-11-30: replaced by toy.slope" in page
    assert check.accepted_controls() == []  # toy.slope's control (the wrong exponent) was rejected
    wide = _check(monkeypatch=monkeypatch)
    wide.compare("toy.slope", measured="-0.5", test=lambda v: abs(v) < 10, expected=-0.5, fields={"L": 2})
    assert wide.accepted_controls() == ["toy.slope"]
    assert claims.load_records(tmp_path) == recs


def test_estimates_give_the_recorded_value_and_interval(monkeypatch):
    from companion import stats

    check = _check(monkeypatch=monkeypatch)
    est = stats.Estimate(-0.5, -0.55, -0.45, 0.99, "t-interval")
    check.compare("toy.slope", measured=est, test=est.contains, expected=-0.5, fields={"L": 2})
    row = check.rows[0]
    assert row.value == -0.5 and row.interval == [-0.55, -0.45] and row.measured == str(est)
    rate = stats.wilson(7, 40, confidence=0.99)
    check.add("toy.bound", measured=rate, passed=True)
    row = check.rows[1]
    assert row.measured == str(rate) == "7/40 = 0.175 [0.071, 0.372] (99% Wilson)"
    assert row.value == 0.175 and row.interval == [rate.low, rate.high]
    with pytest.raises(ValueError, match="vectorised"):
        _check(monkeypatch=monkeypatch).add("toy.bound", measured=stats.wilson([1, 2], 40), passed=True)


def _chapter(tmp_path: Path, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, tmp_path / "toy.ipynb")
    (tmp_path / "toy.md").write_text("toy")
    return tmp_path / "toy.md"


TOY = """
from companion import claims, device, registry
reg = registry.parse({"chapter": "ch-toy", "rows": [{"id": "toy.mean", "claim": "mean is 0", "refs": ["B Appendix A"],
    "kind": "value", "source": "'E x = 0'", "paper": "0", "scales": ["quick", "paper"], "registered": "2026-11-29",
    "rule": {"text": "|mean| <= z/sqrt(n)", "params": {"z": {"value": 4, "from": "4 standard errors"}},
             "expected": {"value": 0, "from": "symmetry"}, "wrong": {"value": 1, "from": "a shifted mean"}}}]})
g = device.generator(0)
x = float(device.randn((4000,), generator=g, device="cpu").mean())
check = claims.ClaimCheck("ch-toy", registry=reg)
z = check.rule("toy.mean")["z"]
check.compare("toy.mean", measured=f"{x:.4f}", test=lambda v: abs(x - v) <= z / 4000 ** 0.5)
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
    assert "| toy | `toy.mean` mean is 0 | ✅ | ✅ |" in table


def test_merge_table_replaces_one_chapters_lines_in_place_and_names_it_in_the_header():
    head = "| chapter | claim | 0 | 1 |\n| --- | --- | --- | --- |"
    old = (
        "Measured 2026-12-02 on x86_64 (2 CPU cores, Linux), `quick` scale, seed offsets 0–1 (`COMPANION_SEED`). "
        "✅ holds · ❌ fails\n\n" + head + "\n| 01_a | `a.x` x | ✅ | ✅ |\n| 02_b | `b.old` old | ✅ | ✅ |\n"
        "| 03_c | `c.y` y | ✅ | ❌ |\n"
    )
    new = (
        "Measured 2026-12-04 on x86_64 (2 CPU cores, Linux), `quick` scale, seed offsets 0–1 (`COMPANION_SEED`). "
        "✅ holds · ❌ fails\n\n" + head + "\n| 02_b | `b.new` new | ✅ | ✅ |\n| 02_b | `b.two` two | ❌ | ✅ |\n"
    )
    merged = robustness.merge_table(old, new, ["02_b"]).splitlines()
    assert merged[0].startswith("Measured 2026-12-02") and "Re-measured 2026-12-04 on x86_64" in merged[0]
    assert "Linux): 02_b. ✅ holds" in merged[0]
    assert merged[4:] == [
        "| 01_a | `a.x` x | ✅ | ✅ |",
        "| 02_b | `b.new` new | ✅ | ✅ |",
        "| 02_b | `b.two` two | ❌ | ✅ |",
        "| 03_c | `c.y` y | ✅ | ❌ |",
    ]
    with pytest.raises(SystemExit, match="seed columns"):
        robustness.merge_table(old, new.replace("| 0 | 1 |", "| 0 | 1 | 2 |"), ["02_b"])
    again = robustness.merge_table(robustness.merge_table("\n".join(merged) + "\n", new, ["03_c"]), new, ["02_b"])
    assert again.splitlines()[0].count("Re-measured") == 2, "a re-measurement supersedes the older note on the same chapters"
    assert again.splitlines()[0].index(": 03_c.") < again.splitlines()[0].index(": 02_b.")


def test_compare_with_several_wrong_values_fails_its_control_on_any(monkeypatch):
    """A value row may register a tuple of wrong values (e.g. ``(0, 1)`` for a √m growth): its control is accepted,
    and the row's control fails, when the test accepts any one of them."""
    monkeypatch.delenv("COMPANION_FALSIFY", raising=False)
    raw = copy.deepcopy(RAW)
    raw["rows"][2]["scales"] = ["quick", "paper"]
    raw["rows"][2]["rule"]["wrong"] = {"value": [1, 2], "from": "two shifted means"}
    for interval, control in (((-0.1, 0.1), False), ((-0.1, 1.5), True), ((-0.1, 2.5), True)):
        check = _check(raw, monkeypatch=monkeypatch)
        assert check.compare("toy.mean", measured="m", test=lambda v, i=interval: i[0] <= v <= i[1]) is True
        assert check.rows[-1].control_passed is control
    raw["rows"][2]["rule"]["wrong"] = {"value": [1, 0], "from": "one of them is the expected value"}
    with pytest.raises(ValueError, match="distinct"):
        _check(raw, monkeypatch=monkeypatch).compare("toy.mean", measured="m", test=lambda v: True)
