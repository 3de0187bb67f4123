"""Sphinx glue for the book's pages: ``sphinx.extra_extensions: [companion._book]`` in _config.yml.

It lives in the package rather than in book/ so that a build with a copied ``--config`` (tests/conftest.py)
still finds it; nothing in the package imports it (it needs Sphinx, which only the book build has).

* The claim records: every chapter's claim check embeds its rows as JSON in its table's HTML
  (:meth:`companion.claims.ClaimCheck.report`); the build collects them from the executed chapters and writes them
  to ``claims.json`` at the site's root (chapter, row, paper value, measured value, interval, verdict, seed, scale,
  device, dtype, torch version, commit, wall time).
* The ``{companion-chapters}`` directive (on the landing page): a table of every chapter in ``_toc.yml``, in
  order, with the result it reproduces (the titles of its ``prf:`` boxes) and the verdict of its claim check as
  this build executed it, from the records: how many rows hold, how many test the corrected statement of an
  erratum (the paper contradicted), how many fail. A build without execution says so in the verdict column.
* The ``{companion-coverage}`` directive (the coverage page): every numbered result of the three papers, listed
  in ``book/coverage/{A,B,C}.yml``, with the chapters and rows that check it and their verdicts (from the records),
  or the reason it is not checked.

* The ``.ipynb`` download button of each chapter serves the chapter's **paired notebook** (``book/<part>/<NN>_x.ipynb``,
  the file the Colab button opens, no outputs) instead of sphinx-book-theme's copy of myst-nb's executed
  notebook. The ``.md`` button serves the jupytext source (the theme's ``_sources`` copy, unchanged).
* Drops duplicate ``<script>`` entries: sphinx-thebe adds its inline ``const THEBE_JS_URL = …`` once per
  ``env-before-read-docs``, which fires twice in a jupyter-book build, and the second copy throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page (seen by tools/browser_check.py).
* Adds ``_static/companion.css`` (figures as white cards in the dark theme, the explorer note, the claim tables).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive

PRF_TITLE_RE = re.compile(r"^\s*(?:```+|:::+)\{prf:(?!proof\b)\w+\}[ \t]*(?P<title>[^\n]*)$", re.M)


# ------------------------------------------------------------------------------- the chapter table
class chapter_table(nodes.General, nodes.Element):
    """Placeholder for the chapter table, replaced at doctree-resolved (when every chapter has been read)."""


class coverage_table(nodes.General, nodes.Element):
    """Placeholder for the coverage table, replaced at doctree-resolved."""


class ChapterTableDirective(Directive):
    has_content = False
    node = chapter_table

    def run(self):
        env = self.state.document.settings.env
        if not hasattr(env, "companion_chapter_table_docs"):
            env.companion_chapter_table_docs = set()
        env.companion_chapter_table_docs.add(env.docname)
        return [self.node()]


class CoverageTableDirective(ChapterTableDirective):
    node = coverage_table


def toc_chapters(srcdir: Path) -> list[str]:
    """Docnames of the jupytext chapters listed in ``_toc.yml``, in order."""
    toc = yaml.safe_load((Path(srcdir) / "_toc.yml").read_text())
    docs = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [
        d
        for d in docs
        if (Path(srcdir) / f"{d}.md").exists() and (Path(srcdir) / f"{d}.md").read_text().startswith("---\njupytext:")
    ]


CLAIMS_JSON_RE = re.compile(r"<script type='application/json' class='companion-claims'>(?P<data>.*?)</script>", re.S)


def chapter_records(doctree) -> list[dict]:
    """The claim records embedded in an executed chapter's claim-check output (empty when not executed)."""
    out: list[dict] = []
    for raw in doctree.findall(nodes.raw):
        for m in CLAIMS_JSON_RE.finditer(raw.astext()):
            out += json.loads(m.group("data"))  # "<\/" in the HTML is JSON for "</"
    return out


def verdict_text(records: list[dict]) -> str:
    if not records:
        return "not executed in this build"
    held = sum(r["verdict"] == "holds" for r in records)
    errata = sum(r["verdict"] == "erratum" for r in records)
    failed = sum(r["verdict"] == "fails" for r in records)
    if failed:
        return f"❌ {failed} of {len(records)} checks fail"
    if errata:
        return f"⚠️ paper contradicted in {errata} (erratum; the corrected statement holds), {held} hold"
    return f"✅ holds ({held} checks)"


def _records_by_chapter(app) -> dict[str, list[dict]]:
    env = app.env
    return {doc: chapter_records(env.get_doctree(doc)) for doc in toc_chapters(Path(app.srcdir)) if doc in env.all_docs}


def _row(cells) -> nodes.row:
    r = nodes.row()
    for c in cells:
        entry = nodes.entry()
        entry += c if isinstance(c, nodes.Node) else nodes.paragraph(text=c)
        r += entry
    return r


def _table(cls: str, columns: dict[str, int]):
    """An empty docutils table with a header row: ``(table, body, row)``, where ``row(cells)`` makes a body row."""
    table = nodes.table(classes=[cls, "colwidths-given"])
    tgroup = nodes.tgroup(cols=len(columns))
    table += tgroup
    for width in columns.values():
        tgroup += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    tgroup += head
    tgroup += body
    head += _row(list(columns))
    return table, body, _row


def _chapter_table(app, fromdoc: str):
    env, srcdir = app.env, Path(app.srcdir)
    table, body, row = _table("chapter-table", {"Chapter": 32, "Result it reproduces": 46, "Verdict of its claim check": 22})
    for doc in toc_chapters(srcdir):
        if doc not in env.all_docs:
            continue
        # the title's own nodes, so that a formula in it ("the $O(T^{-1/L})$ rate") is typeset, not shown as TeX
        title = [c.deepcopy() for c in env.titles[doc].children] if doc in env.titles else [nodes.Text(doc)]
        link = nodes.paragraph()
        link += nodes.reference("", "", *title, internal=True, refuri=app.builder.get_relative_uri(fromdoc, doc))
        source = (srcdir / f"{doc}.md").read_text()
        results = "; ".join(m.group("title").strip() for m in PRF_TITLE_RE.finditer(source)) or "—"
        body += row([link, results, verdict_text(chapter_records(env.get_doctree(doc)))])
    return table


def coverage_inventory(srcdir: Path) -> list[dict]:
    """The numbered results of the three papers (``book/coverage/{A,B,C}.yml``), in order."""
    out: list[dict] = []
    for path in sorted((Path(srcdir) / "book" / "coverage").glob("*.yml")):
        out += yaml.safe_load(path.read_text()) or []
    return out


def with_math(text: str) -> nodes.paragraph:
    """Plain text with ``$…$`` spans rendered as inline maths (MathJax)."""
    par = nodes.paragraph()
    for k, part in enumerate(text.split("$")):
        if part:
            par += nodes.math(part, part) if k % 2 else nodes.Text(part)
    return par


def _coverage_table(app, fromdoc: str):
    by_chapter = _records_by_chapter(app)
    env = app.env
    table, body, row = _table("coverage-table", {"Result": 22, "Statement": 40, "Checked by (verdict), or why not": 38})
    mark = {"holds": "✅", "erratum": "⚠️", "fails": "❌"}
    for item in coverage_inventory(Path(app.srcdir)):
        cell = nodes.paragraph()
        hits = [(doc, r) for doc, recs in by_chapter.items() for r in recs if item["id"] in r.get("refs", [])]
        for doc, r in hits:
            title = env.titles[doc].astext() if doc in env.titles else doc
            cell += nodes.reference(
                "",
                title.split(".")[0] if title[:1].isdigit() else title,
                internal=True,
                refuri=app.builder.get_relative_uri(fromdoc, doc),
            )
            cell += nodes.Text(f" {mark[r['verdict']]} {r['claim']}; ")
        if not hits:
            cell += nodes.Text(item.get("reason") or "not executed in this build")
        body += row([f"{item['id']}: {item.get('title', '')}", with_math(item.get("tex") or item.get("statement", "")), cell])
    return table


def _replace_chapter_tables(app, doctree, docname):
    for node in list(doctree.findall(chapter_table)):
        node.replace_self(_chapter_table(app, docname))
    for node in list(doctree.findall(coverage_table)):
        node.replace_self(_coverage_table(app, docname))


def _write_claims_json(app, exception):
    """``claims.json`` at the site's root: every record of this build's executed chapters."""
    if exception is not None or app.builder.format != "html":
        return
    records = [r for recs in _records_by_chapter(app).values() for r in recs]
    Path(app.outdir, "claims.json").write_text(json.dumps(records, indent=1, ensure_ascii=False))


def _always_reread_table_pages(app, env, added, changed, removed):
    # the table depends on every chapter's outputs: re-read the page that holds it on every build
    return sorted(getattr(env, "companion_chapter_table_docs", set()) - set(removed))


def _purge(app, env, docname):
    getattr(env, "companion_chapter_table_docs", set()).discard(docname)


def _merge(app, env, docnames, other):
    env.companion_chapter_table_docs = getattr(env, "companion_chapter_table_docs", set()) | getattr(
        other, "companion_chapter_table_docs", set()
    )


def _skip(self, node):
    raise nodes.SkipNode


def _paired_notebook_download(app, pagename, templatename, context, doctree):
    if not context.get("ipynb_source"):
        return
    paired = Path(app.srcdir, pagename).with_suffix(".ipynb")
    if paired.exists():
        target = Path(app.outdir, "_sources", context["ipynb_source"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paired, target)


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), repr(sorted(getattr(js, "attributes", {}).items())))  # None == ""
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def setup(app):
    # priority 502: after sphinx-book-theme's add_launch_buttons (501), which copies the executed notebook there
    app.connect("html-page-context", _paired_notebook_download, priority=502)
    # 502 too: a later handler may never run, since Sphinx stops at the first one returning a template name
    app.connect("html-page-context", _dedupe_scripts, priority=502)
    app.add_css_file("companion.css")
    app.add_node(chapter_table, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_node(coverage_table, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_directive("companion-chapters", ChapterTableDirective)
    app.add_directive("companion-coverage", CoverageTableDirective)
    app.connect("build-finished", _write_claims_json)
    app.connect("doctree-resolved", _replace_chapter_tables)
    app.connect("env-get-outdated", _always_reread_table_pages)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
