"""Sphinx glue for the book's pages: ``sphinx.extra_extensions: [companion._book]`` in _config.yml.

It lives in the package rather than in book/ so that a build with a copied ``--config`` (tests/conftest.py)
still finds it; nothing in the package imports it (it needs Sphinx, which only the book build has).

* The ``{companion-chapters}`` directive (on the landing page): a table of every chapter in ``_toc.yml``, in
  order, with the result it reproduces (the titles of its ``prf:`` boxes) and the verdict of its claim check as
  this build executed it (the ✅/❌ rows of the chapter's claim-check output, and whether the chapter has an
  *Erratum* box). Nothing is typed by hand, so a new chapter appears with its measured verdict on the next build;
  a build without execution says so in the verdict column.

* The ``.ipynb`` download button of each chapter serves the chapter's **paired notebook** (``book/<part>/<NN>_x.ipynb``,
  the file the Colab button opens, no outputs) instead of sphinx-book-theme's copy of myst-nb's executed
  notebook. The ``.md`` button serves the jupytext source (the theme's ``_sources`` copy, unchanged).
* Drops duplicate ``<script>`` entries: sphinx-thebe adds its inline ``const THEBE_JS_URL = …`` once per
  ``env-before-read-docs``, which fires twice in a jupyter-book build, and the second copy throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page (seen by tools/browser_check.py).
* Adds ``_static/companion.css`` (figures as white cards in the dark theme, the explorer note, the claim tables).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive

PRF_TITLE_RE = re.compile(r"^\s*(?:```+|:::+)\{prf:(?!proof\b)\w+\}[ \t]*(?P<title>[^\n]*)$", re.M)
ERRATUM_RE = re.compile(r"^\s*(?:```+|:::+)\{admonition\}\s*Erratum", re.M)


# ------------------------------------------------------------------------------- the chapter table
class chapter_table(nodes.General, nodes.Element):
    """Placeholder for the chapter table, replaced at doctree-resolved (when every chapter has been read)."""


class ChapterTableDirective(Directive):
    has_content = False

    def run(self):
        env = self.state.document.settings.env
        if not hasattr(env, "companion_chapter_table_docs"):
            env.companion_chapter_table_docs = set()
        env.companion_chapter_table_docs.add(env.docname)
        return [chapter_table()]


def toc_chapters(srcdir: Path) -> list[str]:
    """Docnames of the jupytext chapters listed in ``_toc.yml``, in order."""
    toc = yaml.safe_load((Path(srcdir) / "_toc.yml").read_text())
    docs = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [d for d in docs if (Path(srcdir) / f"{d}.md").exists()
            and (Path(srcdir) / f"{d}.md").read_text().startswith("---\njupytext:")]


def chapter_verdict(doctree) -> tuple[int, int]:
    """(claims that hold, claims that fail) in the claim-check tables of an executed chapter's outputs."""
    held = failed = 0
    for raw in doctree.findall(nodes.raw):
        text = raw.astext()
        if "claim-check" in text:
            held += text.count("✅")
            failed += text.count("❌")
    return held, failed


def verdict_text(held: int, failed: int, erratum: bool) -> str:
    if held + failed == 0:
        return "not executed in this build"
    if failed:
        return f"❌ {failed} of {held + failed} checks fail"
    if erratum:
        return f"⚠️ partly: the chapter has an erratum; its {held} checks pass"
    return f"✅ yes ({held} checks)"


def _chapter_table(app, fromdoc: str):
    env, srcdir = app.env, Path(app.srcdir)
    table = nodes.table(classes=["chapter-table", "colwidths-given"])
    tgroup = nodes.tgroup(cols=3)
    table += tgroup
    for width in (32, 46, 22):
        tgroup += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    tgroup += head
    tgroup += body

    def row(cells):
        r = nodes.row()
        for c in cells:
            entry = nodes.entry()
            entry += c if isinstance(c, nodes.Node) else nodes.paragraph(text=c)
            r += entry
        return r

    head += row(["Chapter", "Result it reproduces", "Claim held?"])
    for doc in toc_chapters(srcdir):
        if doc not in env.all_docs:
            continue
        # the title's own nodes, so that a formula in it ("the $O(T^{-1/L})$ rate") is typeset, not shown as TeX
        title = [c.deepcopy() for c in env.titles[doc].children] if doc in env.titles else [nodes.Text(doc)]
        link = nodes.paragraph()
        link += nodes.reference("", "", *title, internal=True, refuri=app.builder.get_relative_uri(fromdoc, doc))
        source = (srcdir / f"{doc}.md").read_text()
        results = "; ".join(m.group("title").strip() for m in PRF_TITLE_RE.finditer(source)) or "—"
        held, failed = chapter_verdict(env.get_doctree(doc))
        body += row([link, results, verdict_text(held, failed, bool(ERRATUM_RE.search(source)))])
    return table


def _replace_chapter_tables(app, doctree, docname):
    for node in list(doctree.findall(chapter_table)):
        node.replace_self(_chapter_table(app, docname))


def _always_reread_table_pages(app, env, added, changed, removed):
    # the table depends on every chapter's outputs: re-read the page that holds it on every build
    return sorted(getattr(env, "companion_chapter_table_docs", set()) - set(removed))


def _purge(app, env, docname):
    getattr(env, "companion_chapter_table_docs", set()).discard(docname)


def _merge(app, env, docnames, other):
    env.companion_chapter_table_docs = getattr(env, "companion_chapter_table_docs", set()) | \
        getattr(other, "companion_chapter_table_docs", set())


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
    app.add_directive("companion-chapters", ChapterTableDirective)
    app.connect("doctree-resolved", _replace_chapter_tables)
    app.connect("env-get-outdated", _always_reread_table_pages)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
