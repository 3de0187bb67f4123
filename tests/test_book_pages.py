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


def test_verdict_counts_the_claim_check_rows():
    ok = ClaimCheck("a")
    ok.add("x", paper="p", measured="m", passed=True)
    ok.add("y", paper="p", measured="m", passed=True)
    bad = ClaimCheck("b")
    bad.add("z", paper="p", measured="m", passed=False)
    assert _book.chapter_verdict(_doctree_with(ok)) == (2, 0)
    assert _book.chapter_verdict(_doctree_with(ok, bad)) == (2, 1)
    assert _book.chapter_verdict(nodes.section()) == (0, 0)
    assert _book.verdict_text(2, 0, erratum=False).startswith("✅")
    assert _book.verdict_text(2, 0, erratum=True).startswith("⚠️")
    assert _book.verdict_text(2, 1, erratum=False).startswith("❌")
    assert _book.verdict_text(0, 0, erratum=False) == "not executed in this build"


def test_erratum_detection():
    assert _book.ERRATUM_RE.search("text\n```{admonition} Erratum: the saddle\n:class: warning\n")
    assert not _book.ERRATUM_RE.search("```{admonition} Running this chapter\n")
