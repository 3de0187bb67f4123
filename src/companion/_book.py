"""Sphinx glue for the book's pages: ``sphinx.extra_extensions: [companion._book]`` in _config.yml.

It lives in the package rather than in book/ so that a build with a copied ``--config`` (tests/conftest.py)
still finds it; it imports nothing from Sphinx at module level and nothing in the package imports it.

* The ``.ipynb`` download button of each chapter serves the chapter's **paired notebook** (``book/<part>/<NN>_x.ipynb``,
  the file the Colab button opens, no outputs) instead of sphinx-book-theme's copy of myst-nb's executed
  notebook. The ``.md`` button serves the jupytext source (the theme's ``_sources`` copy, unchanged).
* Drops duplicate ``<script>`` entries: sphinx-thebe adds its inline ``const THEBE_JS_URL = …`` once per
  ``env-before-read-docs``, which fires twice in a jupyter-book build, and the second copy throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page (seen by tools/browser_check.py).
* Adds ``_static/companion.css`` (figures as white cards in the dark theme, the explorer note, the claim tables).
"""
from __future__ import annotations

import shutil
from pathlib import Path


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
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.1"}
