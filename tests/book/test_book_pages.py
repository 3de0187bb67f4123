"""companion._book, the Sphinx glue of the website: the landing page's chapter table is computed from _toc.yml, the
chapters' prf boxes and their executed claim-check outputs (tools/browser_check.py checks the rendered pages)."""

from pathlib import Path

import pytest

sphinx = pytest.importorskip("sphinx")
from docutils import nodes  # noqa: E402

from companion import _book, registry  # noqa: E402
from companion.claims import ClaimCheck  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_toc_chapters_are_the_jupytext_chapters_in_toc_order():
    docs = _book.toc_chapters(ROOT)
    assert docs and docs[0] == "book/paper_a/01_setup"
    assert all((ROOT / f"{d}.md").read_text().startswith("---\njupytext:") for d in docs)
    assert "book/status" not in docs and "book/index" not in docs


def test_every_chapter_states_a_result_for_the_table():
    for doc in _book.toc_chapters(ROOT):
        titles = [m.group("title").strip() for m in _book.PRF_TITLE_RE.finditer((ROOT / f"{doc}.md").read_text())]
        assert titles and all(titles), f"{doc}: no titled prf box to name the result it reproduces"


def _doctree_with(*checks):
    doc = nodes.section()
    for c in checks:
        doc += nodes.raw("", c._repr_html_(), format="html")
    doc += nodes.raw("", "<p>unrelated ✅ emoji outside a claim table</p>", format="html")
    return doc


RAW = {
    "chapter": "ch-toy",
    "rows": [
        {"id": f"toy.{name}", "claim": name, "refs": ["B Lemma 9"], "kind": kind, "source": "'...'", "paper": "p",
         "rule": {"text": "ratio <= 1 (the lemma's constant)"}, "scales": ["quick", "paper"],
         "registered": "2026-11-29", **extra}
        for name, kind, extra in [
            ("x", "bound", {}),
            ("y", "consistency", {}),
            ("corrected", "bound", {"erratum": "the paper's statement"}),
            ("revised", "bound", {"revisions": [{"date": "2026-11-30", "after_data": True, "was": "a", "now": "b",
                                                "rationale": "r", "impact": "i"}]}),
        ]
    ],
}  # fmt: skip


def _toy(*outcomes):
    reg = registry.parse(RAW, "toy.yml")
    check = ClaimCheck("ch-toy", registry=reg)
    for name, passed in outcomes:
        check.add(f"toy.{name}", measured="m", passed=passed)
    return check


def test_verdict_counts_rows_by_kind_from_the_embedded_records():
    ok = _toy(("x", True), ("y", True))
    recs = _book.chapter_records(_doctree_with(ok))
    assert [r["id"] for r in recs] == ["toy.x", "toy.y"] and recs[0]["refs"] == ["B Lemma 9"]
    text = _book.verdict_text(recs)
    assert text.startswith("✅ holds") and "1 evidence rows (1 bound, 0 value)" in text and "1 consistency" in text
    err = _book.verdict_text(_book.chapter_records(_doctree_with(_toy(("x", True), ("corrected", True)))))
    assert err.startswith("⚠️ paper corrected") and "1 erratum" in err
    bad = _book.verdict_text(_book.chapter_records(_doctree_with(_toy(("x", False), ("revised", True)))))
    assert bad.startswith("❌ 1 of 2 rows fail") and "1 revised after data" in bad
    assert _book.verdict_text([]) == "not executed in this build"


def test_the_coverage_page_counts_each_chapters_rows_by_kind():
    recs = _book.chapter_records(_doctree_with(_toy(("x", True), ("y", True), ("corrected", True), ("revised", False))))
    tally = _book.chapter_tally(recs, {"B Lemma 9"})
    # x, corrected and revised are bound rows; the failing one does not check the result, the others do
    assert tally == {"ch-toy": ["3 (3 bound, 0 value)", "1", "1", "1", "1"]}
    assert _book.chapter_tally(recs, {"B Lemma 10"})["ch-toy"][-1] == "0"


def test_a_result_counts_as_checked_only_by_an_evidence_row():
    item = {"id": "B Lemma 9"}
    consistency_only = _book.chapter_records(_doctree_with(_toy(("y", True))))
    assert _book.result_status(item, consistency_only) == "unchecked"
    assert _book.result_status({**item, "excused": {"category": "definition"}}, []) == "excused"
    assert _book.result_status(item, _book.chapter_records(_doctree_with(_toy(("x", True))))) == "holds"


def test_dependency_graph_is_drawn(tmp_path):
    results = [{"id": "A Lemma 4.3"}, {"id": "A Lemma 4.5", "uses": ["A Lemma 4.3"]}, {"id": "A Eq. (14)"}]
    status = {"A Lemma 4.3": "holds", "A Lemma 4.5": "erratum", "A Eq. (14)": "excused"}
    _book.dependency_graph(results, status, tmp_path / "g.svg", "paper A")
    assert (tmp_path / "g.svg").read_text().lstrip().startswith("<?xml")
    assert [_book.short_id(i) for i in ("A Lemma 4.5", "B Theorem 10", "A Eq. (14)")] == ["L4.5", "T10", "(14)"]


def test_titles_in_the_browser_tab_are_plain_text():
    assert _book.plain_title(r"4. The \(O(T^{-1/L})\) rate") == "4. The O(T^(-1/L)) rate"
    assert _book.plain_title(r"10. Sample complexity: \(n \propto d\)") == "10. Sample complexity: n ∝ d"


def test_coverage_inventory_ids_are_unique_and_well_formed():
    items = _book.coverage_inventory(ROOT)
    ids = [i["id"] for i in items]
    assert len(ids) == len(set(ids)), "duplicate ids in book/coverage/*.yml"
    assert all(i.split(" ", 1)[0] in ("A", "B", "C") for i in ids), ids


def test_statements_render_their_maths():
    par = _book.with_math(r"$\|J\| \le T\sqrt n$ (fully connected) or $C\sqrt n$")
    kinds = [type(c).__name__ for c in par.children]
    assert kinds == ["math", "Text", "math"] and par.children[0].astext() == r"\|J\| \le T\sqrt n"
    assert all(i.get("statement", "").count("$") % 2 == 0 for i in _book.coverage_inventory(ROOT))
