"""companion._book, the Sphinx glue of the website: the landing page's chapter table is computed from _toc.yml, the
chapters' prf boxes and their executed claim-check outputs (tools/browser_check.py checks the rendered pages)."""

from pathlib import Path

import pytest

sphinx = pytest.importorskip("sphinx")
from docutils import nodes  # noqa: E402

from companion import _book  # noqa: E402
from companion.claims import ClaimCheck  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


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


ROW = dict(refs="B Lemma 9", source="'...'", threshold="ratio <= 1 (the lemma's constant)", paper="p", measured="m")


def test_verdict_comes_from_the_embedded_records():
    ok = ClaimCheck("a", chapter="a")
    ok.add("x", passed=True, **ROW)
    ok.add("y", passed=True, **ROW)
    err = ClaimCheck("b", chapter="b")
    err.add("corrected", passed=True, erratum="the paper's statement", **ROW)
    bad = ClaimCheck("c", chapter="c")
    bad.add("z", passed=False, **ROW)
    recs = _book.chapter_records(_doctree_with(ok))
    assert [r["claim"] for r in recs] == ["x", "y"] and recs[0]["refs"] == ["B Lemma 9"]
    assert _book.verdict_text(recs).startswith("✅")
    assert _book.verdict_text(_book.chapter_records(_doctree_with(ok, err))).startswith("⚠️ paper contradicted in 1")
    assert _book.verdict_text(_book.chapter_records(_doctree_with(ok, bad))).startswith("❌ 1 of 3")
    assert _book.verdict_text([]) == "not executed in this build"


def test_coverage_inventory_ids_are_unique_and_well_formed():
    items = _book.coverage_inventory(ROOT)
    ids = [i["id"] for i in items]
    assert len(ids) == len(set(ids)), "duplicate ids in book/coverage/*.yml"
    assert all(i.split(" ", 1)[0] in ("A", "B", "C") for i in ids), ids


def test_statements_render_their_maths():
    par = _book.with_math(r"$\|J\| \le T\sqrt n$ (fully connected) or $C\sqrt n$")
    kinds = [type(c).__name__ for c in par.children]
    assert kinds == ["math", "Text", "math"] and par.children[0].astext() == r"\|J\| \le T\sqrt n"
    assert all(i.get("tex", "$").count("$") % 2 == 0 for i in _book.coverage_inventory(ROOT))
