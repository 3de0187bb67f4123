"""The claim registry (book/claims/*.yml): one file per chapter, read by the chapter's claim check; every row well
formed, naming results of the inventory; every change of a rule along the git history recorded as a revision."""

import copy
import re
import sys
from pathlib import Path

import pytest

from companion import _book, registry

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import registry as history  # noqa: E402  (tools/registry.py)

REGS = registry.load_all(ROOT / "book" / "claims")
CHAPTERS = _book.toc_chapters(ROOT)


def test_every_chapter_has_a_registry_and_its_claim_check_reads_it():
    labels = {doc: _book.chapter_label(ROOT, doc) for doc in CHAPTERS}
    assert set(labels.values()) == set(REGS), "one registry file per chapter, named after its label"
    for doc, label in labels.items():
        text = (ROOT / f"{doc}.md").read_text()
        assert f'claims.ClaimCheck("{label}"' in text, f"{doc}: the claim check reads the registry of {label}"
        called = set(re.findall(r"check\.(?:add|compare|rule)\(\s*f?[\"']([a-z0-9.\-{}_]+)[\"']", text))
        literal = {c for c in called if "{" not in c and not c.endswith(".")}  # not a prefix joined to a name
        unknown = literal - set(REGS[label].rows)
        assert unknown == set(), f"{doc}: rows not registered in book/claims: {sorted(unknown)}"


def test_every_registered_ref_is_a_result_of_the_inventory():
    results = {r["id"] for r in _book.coverage_inventory(ROOT)}
    bad = [(r.id, ref) for reg in REGS.values() for r in reg.rows.values() for ref in r.refs if ref not in results]
    assert bad == [], f"registered rows name results missing from book/coverage/*.yml: {bad}"


def test_row_ids_are_unique_across_the_book():
    ids = [r for reg in REGS.values() for r in (*reg.rows, *(x.id for x in reg.retired))]
    assert len(ids) == len(set(ids))


@pytest.mark.skipif(not history.git_available(), reason="not a git checkout: the registry's history cannot be read")
def test_every_change_of_a_rule_along_the_history_is_recorded():
    assert history.history_problems() == []


def _version(name, rows, retired=()):
    return history.Version(name, {"toy.yml": {"chapter": "ch-toy", "rows": rows, "retired": list(retired)}})


ROW = {
    "id": "toy.rate",
    "kind": "value",
    "rule": {"text": "interval contains 1/2", "expected": {"value": 0.5, "from": "symmetry"},
             "wrong": {"value": 0.75, "from": "a guess"}},
    "scales": ["quick", "paper"],
    "revisions": [],
}  # fmt: skip


def test_an_unrecorded_change_a_silent_deletion_and_a_rewritten_revision_are_caught():
    before = _version("v1", [ROW])
    moved = copy.deepcopy(ROW)
    moved["rule"]["expected"]["value"] = 0.45
    assert "without a new revision entry" in history.compare(before, _version("v2", [moved]))[0]
    revised = copy.deepcopy(moved)
    revised["revisions"] = [{"date": "2026-12-01", "after_data": True, "was": "1/2", "now": "0.45", "rationale": "r",
                             "impact": "i"}]  # fmt: skip
    assert history.compare(before, _version("v2", [revised])) == []
    assert "disappeared" in history.compare(before, _version("v2", []))[0]
    assert history.compare(before, _version("v2", [], [{"id": "toy.rate"}])) == []
    rewritten = copy.deepcopy(revised)
    rewritten["revisions"][0]["after_data"] = False
    assert "rewritten" in history.compare(_version("v2", [revised]), _version("v3", [rewritten]))[0]
    dated = copy.deepcopy(revised)  # an empty commit may be filled in later; a written one may not be changed
    dated["revisions"][0]["commit"] = "69dc405"
    assert history.compare(_version("v2", [revised]), _version("v3", [dated])) == []
    redated = copy.deepcopy(dated)
    redated["revisions"][0]["commit"] = "abcdef0"
    assert "rewritten" in history.compare(_version("v3", [dated]), _version("v4", [redated]))[0]
    not_a_hash = copy.deepcopy(revised)
    not_a_hash["revisions"][0]["commit"] = "later"
    assert "rewritten" in history.compare(_version("v2", [revised]), _version("v3", [not_a_hash]))[0]
    assert "deleted" in history.compare(before, history.Version("v2", {}))[0]
    assert "taken off" in history.compare(_version("v1", [], [{"id": "toy.rate"}]), _version("v2", []))[0]


def test_every_row_states_its_rule_and_value_rows_their_control():
    for reg in REGS.values():
        for r in reg.rows.values():
            assert r.text and r.source and r.paper, r.id
            if r.kind == "value":
                assert r.wrong is not None, f"{r.id}: a value row names its wrong value"


def test_the_claim_check_cells_of_every_chapter_are_the_last_entry_of_their_log():
    """The test's logic lives in the chapter's code: a change of its claim-check cells must be logged (and, where it
    changes a rule, name the row, which then needs a revision of that date)."""
    assert set(history.chapter_sources()) == set(REGS)
    assert history.code_problems() == []


def test_a_changed_threshold_in_a_claim_cell_changes_the_fingerprint_but_layout_does_not(tmp_path):
    source = history.chapter_sources()["ch-smoothness"]
    text = source.read_text()
    before = history.code_fingerprint(source)
    assert re.search(r'<= r\["tol"\]', text), "the example below edits the degree rows' tolerance test"
    loosened = tmp_path / "loosened.md"
    loosened.write_text(re.sub(r'<= r\["tol"\]', '<= 100 * r["tol"]', text, count=1))
    assert history.code_fingerprint(loosened) != before
    cells = history.claim_cells(source)
    relaid = tmp_path / "relaid.md"
    relaid.write_text(text.replace(cells[0], "# a comment\n" + cells[0].replace("\n", "\n\n", 1), 1))
    assert history.code_fingerprint(relaid) == before


def test_the_claim_code_log_is_checked_and_only_grows():
    row = {"id": "toy.rate", "claim": "x <= 1", "refs": ["A Lemma 4.1"], "kind": "bound", "source": "'x <= 1'",
           "paper": "<= 1", "scales": ["quick"], "registered": "2026-12-01",
           "rule": {"text": "x <= {limit}", "params": {"limit": {"value": 1, "from": "the lemma"}}},
           "revisions": [{"date": "2026-12-02", "after_data": True, "was": "a", "now": "b", "rationale": "r",
                          "impact": "i"}]}  # fmt: skip
    entry = {"date": "2026-12-02", "fingerprint": "0123456789ab", "change": "the tolerance", "rules_changed": ["toy.rate"]}
    reg = registry.parse({"chapter": "ch-toy", "rows": [row], "claim_code": [entry]})
    assert reg.claim_code[0].rules_changed == ("toy.rate",)
    with pytest.raises(registry.RegistryError, match="needs a revision of toy.rate dated 2026-12-03"):
        registry.parse({"chapter": "ch-toy", "rows": [row], "claim_code": [{**entry, "date": "2026-12-03"}]})
    with pytest.raises(registry.RegistryError, match="12 hex digits"):
        registry.parse({"chapter": "ch-toy", "rows": [row], "claim_code": [{**entry, "fingerprint": "later"}]})
    v1 = history.Version("v1", {"toy.yml": {"chapter": "ch-toy", "rows": [row], "claim_code": [entry]}})
    grown = {"chapter": "ch-toy", "rows": [row], "claim_code": [entry, {**entry, "fingerprint": "ba9876543210"}]}
    assert history.compare(v1, history.Version("v2", {"toy.yml": grown})) == []
    rewritten = {"chapter": "ch-toy", "rows": [row], "claim_code": [{**entry, "change": "nothing"}]}
    assert "claim_code log was rewritten" in history.compare(v1, history.Version("v2", {"toy.yml": rewritten}))[0]
