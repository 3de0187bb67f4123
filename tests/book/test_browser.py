"""The website in a real browser: every page of _toc.yml loaded in headless Chromium by Playwright (tools/browser_check.py).

Which site (see the ``site`` fixture), first that applies:

1. ``COMPANION_BROWSER_SITE=_build/html`` — an existing executed site, e.g. the main job's after ``make book``;
2. when nbval has already executed every chapter earlier in the same pytest run (the browser tests sorted
   after the notebooks), a ``-W`` build whose chapters take nbval's outputs through a jupyter-cache: the
   figures, tracebacks and explorers are checked as rendered, and nothing is executed a second time
   (the fixture asserts that). This costs one build without execution (~15-30 s here), not a second run of
   every chapter, which would double the suite's ~10 minutes;
3. otherwise (e.g. ``pytest tests/book/test_browser.py`` alone) the suite's own ``-W`` build with execution off
   (``built_site``): everything but the cell outputs is checked.

Checked on every page: maths typeset by the site's own MathJax (offline), images load, figures opaque, no
failed or external request, no JS error, no traceback, no dead widget, theorem boxes, Colab/Binder and
.ipynb/.md download buttons. Screenshots (light and dark theme, full page) go to ``artifacts/screenshots/``
(gitignored; the CI artifact). Skipped, with the reason, when no Chromium binary or no Playwright is installed.
The checks run through the tool's own ``check_site`` (shared with its command line), two browsers loading the pages
side by side, so pytest-playwright's per-test ``page`` fixture is not used.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import browser_check as bc  # noqa: E402

SHOTS = ROOT / "artifacts" / "screenshots"
PAGES = bc.toc_pages(ROOT)

pytestmark = pytest.mark.skipif(bc.missing() is not None, reason=f"{bc.missing()}: browser check skipped")


@pytest.fixture(scope="module")
def site(request):
    """(html dir, executed?), the first that applies:

    1. ``COMPANION_BROWSER_SITE`` (e.g. ``_build/html`` after ``make book``): an executed site;
    2. every chapter already executed by nbval in this pytest run (when the browser tests run after the notebooks):
       a site built from those outputs, so figures and tracebacks are checked for real at no extra execution;
    3. the suite's own -W build with execution off (``built_site``): outputs are not checked.
    """
    env = os.environ.get("COMPANION_BROWSER_SITE")
    if env:
        html = Path(env) if Path(env).is_absolute() else ROOT / env
        assert (html / "index.html").exists() or (html / "book" / "index.html").exists(), f"no site at {html}"
        return html, True
    code, log, html, executed = request.getfixturevalue("built_site")
    assert code == 0, "the site did not build (see test_book_builds_with_warnings_as_errors):\n" + log[-2000:]
    if executed:
        print(f"browser check on the site built from nbval's outputs of {len(PAGES)} pages")
    return html, executed


@pytest.fixture(scope="module")
def results(site):
    html, executed = site
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SHOTS.glob("*.png"), *SHOTS.glob("*.jpg")]:
        old.unlink()
    lines = []
    res = bc.check_site(html, SHOTS, PAGES, executed=executed, log=lines.append)
    print("\n".join(lines))
    return {r.name: r for r in res}


@pytest.mark.parametrize("page", PAGES)
def test_page_reads_well_in_the_browser(results, page):
    res = results[page]
    assert not res.problems, f"{page}:\n  - " + "\n  - ".join(res.problems)


@pytest.mark.parametrize("page", [p for p in PAGES if bc.is_chapter(p, ROOT)])
def test_chapter_page_has_maths_boxes_buttons_and_screenshots(results, page):
    """Guards against a vacuous pass: the things the checks look at are really there."""
    from PIL import Image

    r = results[page].report
    source = (ROOT / f"{page}.md").read_text()
    if "$" in source:
        assert r["mjx"] > 0, "the chapter has maths but the page has no typeset formula"
    assert len(r["proofs"]) >= sum(bc.expected_proofs(page, ROOT).values()) >= 1
    assert r["colab"] and r["downloads"]
    light, dark = results[page].screenshots
    assert r["dark_theme"] == "dark"
    for shot in (light, dark):
        im = Image.open(shot).convert("L")
        lo, hi = im.getextrema()
        assert im.size[0] == bc.WIDTH and hi - lo > 100, f"{shot.name} looks blank"


# ----------------------------------------------------------------------- the checker itself can fail
BAD_PAGE = """<!doctype html><html><head><title>bad</title></head><body><main>
<p>Raw maths left: $$x^2$$ and <span class="math">\\(y\\)</span></p>
<img src="missing.png">
<div class="cell_output"><div class="output traceback">Traceback (most recent call last): ValueError</div></div>
<div class="cell_output"><pre>VBox(children=(FloatSlider(value=0.1),))</pre></div>
<script type="application/vnd.jupyter.widget-view+json">{"model_id": "abc"}</script>
<div class="cell_output"><img src="transparent.png"></div>
<div class="cell_output"><div class="output text_plain"><pre>&lt;matplotlib.legend.Legend at 0x7f335f322a10&gt;</pre></div></div>
<script>undefinedFunction();</script>
</main></body></html>"""


def test_checker_flags_a_broken_page(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1])
    fig.savefig(tmp_path / "transparent.png", transparent=True)
    plt.close(fig)
    (tmp_path / "bad.html").write_text(BAD_PAGE)
    (res,) = bc.check_site(tmp_path, tmp_path / "shots", ["bad"], executed=False, dark=False, root=tmp_path, log=lambda *_: None)
    text = "\n".join(res.problems)
    for expected in (
        "not typeset",
        "raw TeX",
        "images that did not load",
        "failed requests",
        "JavaScript exceptions",
        "traceback",
        "dead widget",
        "transparent background",
        "stray matplotlib",
    ):
        assert expected in text, f"{expected!r} not flagged; problems were:\n{text}"
