"""Open the built website in headless Chromium and check what a reader sees: ``python tools/browser_check.py [HTML_DIR]``.

For the landing page and every chapter in ``_toc.yml`` it serves ``HTML_DIR`` (default ``_build/html``) on
127.0.0.1, loads the page in Debian's ``chromium`` (driven by Playwright for Python through
``executable_path``: no browser download) and checks

* maths typeset by the site's own MathJax: ``mjx-container`` elements present where the page has maths, no math
  element left untypeset, no raw ``\\(``, ``\\[`` or ``$$`` in the text, no MathJax error (``mjx-merror``);
* every image loaded (``naturalWidth > 0``), no failed request, no request leaving 127.0.0.1, no JS exception;
* every figure in a cell output opaque (a transparent PNG puts black axis labels on the dark theme's background);
* no cell output showing an error traceback, no dead widget placeholder, no stray matplotlib return value
  (``Text(0.5, 0.98, ...)``, ``<matplotlib.legend.Legend at 0x...>``) printed under a figure cell;
* theorem boxes: as many sphinx-proof boxes of each kind as the chapter's source has ``prf:`` directives;
* the claim check: every row has its id and kind, and its verdict is inside the 1280-px window; no raw TeX in the
  navigation (a chapter title with maths) or in the browser tab's title;
* the Colab and Binder launch links and the ``.ipynb``/``.md`` download links present; the ``.ipynb`` targets end
  in ``.ipynb``, the download serves the chapter's paired notebook and the ``.md`` its source;

and saves a full-page JPEG screenshot per page in light and in dark theme to ``--out`` (default
``artifacts/screenshots``). Exit status 1 when any page has a problem. ``tests/book/test_browser.py`` runs the same
checks on the site the test suite builds.

Set-up: ``pip install playwright`` (in ``requirements.txt``) and ``apt-get install chromium``; ``$CHROMIUM``
names another binary. ``playwright install`` is not needed: the tool never uses Playwright's own browser builds.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
]
WIDTH, HEIGHT, MAX_SHOT_HEIGHT = 1280, 900, 16000
PRF_RE = re.compile(r"^\s*(?:```+|:::+)\{prf:(\w+)\}", re.M)


def find_chromium() -> str | None:
    """Path of a Chromium binary: ``$CHROMIUM`` if set, else Debian's ``/usr/bin/chromium``, else one on ``PATH``."""
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def have_playwright() -> bool:
    """Whether Playwright for Python is installed (``pip install playwright``)."""
    try:
        return importlib.util.find_spec("playwright") is not None
    except (ImportError, ValueError):
        return False


def missing() -> str | None:
    """Why the check cannot run here (no Chromium, no Playwright), or None when it can."""
    if find_chromium() is None:
        return "no Chromium found (apt-get install chromium)"
    if not have_playwright():
        return "Playwright is not installed (pip install playwright)"
    return None


# -------------------------------------------------------------------------------------------- the server
class Server:
    """The built site on ``http://127.0.0.1:<free port>/`` in a background thread."""

    def __init__(self, html_dir: Path):
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        handler = functools.partial(Quiet, directory=str(html_dir))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------------------------------ in the page
PAGE_REPORT_JS = r"""
(async () => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  await Promise.all([...document.images].map(i => i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; })));
  if (document.fonts) { await document.fonts.ready; }
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .cell_input';
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const raw = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && n.parentElement.closest(skip)) continue;
    const t = n.textContent;
    for (const tok of ['\\(', '\\[', '$$']) {
      const i = t.indexOf(tok);
      if (i >= 0) raw.push(t.slice(Math.max(0, i - 30), i + 40));
    }
  }
  const mathEls = [...article.querySelectorAll('span.math, div.math')];
  const q = (sel) => [...article.querySelectorAll(sel)];
  // the tables the book generates (landing, coverage and status pages): they must fit the content column
  const GENERATED = 'div.exec-table table, table.generated-table';  // the class companion._book gives its tables
  const outputs = q('.cell_output');
  const tracebacks = q('.cell_output .traceback, .cell_output .output.error')
      .concat(outputs.filter(o => /Traceback \(most recent call last\)/.test(o.textContent)))
      .map(e => e.textContent.slice(0, 300));
  const widgetText = outputs.filter(o => /\b(VBox|HBox|interactive|Output|FloatSlider|IntSlider)\(/.test(o.textContent))
      .map(o => o.textContent.slice(0, 120));
  const hrefs = (sel) => [...document.querySelectorAll(sel)].map(a => a.href);
  return {
    title: document.title,
    theme: document.documentElement.dataset.theme || '',
    mathjax: !!(window.MathJax && window.MathJax.version), mathjaxVersion: window.MathJax && window.MathJax.version,
    mathElements: mathEls.length,
    untypeset: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
    mjx: article.querySelectorAll('mjx-container').length,
    merrors: q('mjx-merror').map(e => e.getAttribute('data-mjx-error') || e.textContent.slice(0, 80)),
    raw: raw,
    images: [...article.querySelectorAll('img')].map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,
                                                         w: i.naturalWidth, h: i.naturalHeight})),
    outputImages: q('.cell_output img').length,
    transparent: q('.cell_output img').filter(i => i.naturalWidth > 0).map(i => {
      const c = document.createElement('canvas'); c.width = 48; c.height = 48;
      const g = c.getContext('2d'); g.drawImage(i, 0, 0, 48, 48);
      const d = g.getImageData(0, 0, 48, 48).data; let minA = 255;
      for (let k = 3; k < d.length; k += 4) minA = Math.min(minA, d[k]);
      return minA < 250 ? i.getAttribute('src') : null;
    }).filter(Boolean),
    outputs: outputs.length,
    tracebacks: tracebacks,
    strayReprs: q('.cell_output .output.text_plain').map(e => e.textContent.trim())
      .filter(t => new RegExp('^(<matplotlib\\.[\\w.]+ (object )?at 0x[0-9a-f]+>|\\[<matplotlib\\.'
                              + '|Text\\(-?[\\d.e+-]+, -?[\\d.e+-]+, |<Figure size )').test(t))
      .map(t => t.slice(0, 80)),
    widgetScripts: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length,
    widgetText: widgetText,
    proofs: q('div.proof').map(d => [...d.classList].filter(c => c !== 'proof' && c !== 'admonition')[0] || '?'),
    colab: hrefs('a[href*="colab.research.google.com"]'),
    binder: hrefs('a[href*="mybinder.org"]'),
    downloads: hrefs('a[href*="_sources/"]'),
    chapterTable: [...article.querySelectorAll('table.chapter-table tbody tr')].map(tr =>
      [tr.querySelector('a') ? tr.querySelector('a').href : '', tr.lastElementChild.textContent.trim()]),
    height: Math.ceil(Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)),
    navRaw: [...document.querySelectorAll('.bd-sidebar-primary, .bd-header')].map(e => {
      const w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT); const hits = [];
      for (let n = w.nextNode(); n; n = w.nextNode()) {
        if (n.parentElement && n.parentElement.closest('mjx-container, script, style')) continue;
        if (/\\\(|\$[^$]+\$/.test(n.textContent)) hits.push(n.textContent.trim().slice(0, 60));
      }
      return hits; }).flat(),
    claimRows: q('div.claim-check details.claim-row').map(d => {
      const v = d.querySelector('.claim-verdict'); const r = v ? v.getBoundingClientRect() : null;
      return {id: d.id, kind: !!d.querySelector('.claim-kind'), verdictRight: r ? r.right : null,
              verdictVisible: !!r && r.width > 0};
    }),
    viewportWidth: document.documentElement.clientWidth,
    generatedTables: q(GENERATED).filter(t => t.scrollWidth > t.parentElement.clientWidth + 1)
      .map(t => [...t.classList].find(c => c.endsWith('-table') && c !== 'generated-table') || 'table'),
    overflowingHeads: q(GENERATED.split(', ').map(s => s + ' th').join(', '))
      .filter(th => th.scrollWidth > th.clientWidth + 1).map(th => th.textContent.trim()),
  };
})()
"""


@dataclass
class PageResult:
    name: str  # toc file, e.g. "book/paper_a/01_setup"
    url: str
    report: dict = field(default_factory=dict)
    requests_failed: list = field(default_factory=list)
    requests_external: list = field(default_factory=list)
    exceptions: list = field(default_factory=list)
    screenshots: list = field(default_factory=list)
    problems: list = field(default_factory=list)


class LoadedPage:
    """One page open in its own browser context (a fresh tab), with what the browser reported while loading it."""

    def __init__(self, browser, url: str, origin: str, timeout: float = 60.0):
        self.failed: list[str] = []
        self.external: list[str] = []
        self.exceptions: list[str] = []
        self.context = browser.new_context(
            viewport={"width": WIDTH, "height": HEIGHT}, device_scale_factor=1, color_scheme="light"
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(timeout * 1000)
        self.page.on(
            "request", lambda r: None if r.url.startswith((origin, "data:", "blob:", "about:")) else self.external.append(r.url)
        )
        self.page.on("requestfailed", self._request_failed)
        self.page.on("response", self._response)
        self.page.on("pageerror", lambda e: self.exceptions.append((e.stack or str(e))[:300]))
        self.page.goto(url, wait_until="load", timeout=timeout * 1000)
        self.set_theme("light")
        mj_error = self.evaluate(
            "(async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise) "
            "{ try { await MathJax.startup.promise; } catch (e) { return String(e); } } "
            "return ''; })()"
        )
        self.page.wait_for_timeout(300)  # late image/font requests
        if mj_error:
            self.exceptions.append(f"MathJax failed: {mj_error[:300]}")

    def _request_failed(self, request):
        error = request.failure or "?"
        if "ERR_ABORTED" not in error:  # a request the page itself cancelled is not a failure
            self.failed.append(f"{request.url}: {error}")

    def _response(self, response):
        # the favicon is asked for by the browser, not the page
        if response.status >= 400 and not response.url.endswith("/favicon.ico"):
            self.failed.append(f"{response.url}: HTTP {response.status}")

    def evaluate(self, expr: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        return self.page.evaluate(expr)

    def set_theme(self, mode: str):
        """pydata-sphinx-theme: an explicit choice wins over the OS preference, which is emulated as well."""
        self.page.emulate_media(color_scheme=mode)
        self.evaluate(
            f"document.documentElement.dataset.theme = '{mode}'; "
            f"document.documentElement.dataset.mode = '{mode}'; "
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
        )

    def screenshot(self, path: Path, height: int):
        """A JPEG of the top ``height`` pixels (at most ``MAX_SHOT_HEIGHT``): the viewport is made that tall.
        JPEG: a tall page encodes about three times faster than as PNG."""
        self.page.set_viewport_size({"width": WIDTH, "height": max(HEIGHT, min(height, MAX_SHOT_HEIGHT))})
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), type="jpeg", quality=85, timeout=120_000)

    def close(self):
        self.context.close()


# ------------------------------------------------------------------------------------------- the checks
def toc_pages(root: Path = ROOT) -> list[str]:
    """The landing page and every chapter/page listed in ``_toc.yml`` (docnames without suffix)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part.get("chapters", [])]
    return pages


def is_chapter(name: str, root: Path = ROOT) -> bool:
    src = root / f"{name}.md"
    return src.exists() and src.read_text().startswith("---\njupytext:")


def expected_proofs(name: str, root: Path = ROOT) -> dict[str, int]:
    """``{kind: count}`` of the ``prf:`` directives in the page's source (proofs are not boxes of a kind)."""
    src = root / f"{name}.md"
    kinds = PRF_RE.findall(src.read_text()) if src.exists() else []
    out: dict[str, int] = {}
    for k in kinds:
        if k != "proof":
            out[k] = out.get(k, 0) + 1
    return out


def page_problems(name: str, res: PageResult, html_dir: Path, executed: bool, root: Path = ROOT) -> list[str]:
    """Everything wrong with one loaded page, as readable sentences (empty list: the page is fine)."""
    r, out = res.report, []
    if r["mathElements"] or r["mjx"]:
        if not r["mathjax"]:
            out.append("MathJax did not load")
        if r["mjx"] == 0:
            out.append("no mjx-container: the maths was not typeset")
    if r["untypeset"]:
        out.append(f"{len(r['untypeset'])} math elements not typeset, e.g. {r['untypeset'][:2]}")
    if r["raw"]:
        out.append(f"raw TeX delimiters in the text: {r['raw'][:3]}")
    if r["merrors"]:
        out.append(f"MathJax errors: {r['merrors'][:3]}")
    broken = [i["src"] for i in r["images"] if not i["ok"]]
    if broken:
        out.append(f"images that did not load: {broken[:5]}")
    if r.get("transparent"):
        out.append(f"figures with a transparent background (unreadable in the dark theme): {r['transparent'][:3]}")
    if res.requests_failed:
        out.append(f"failed requests: {res.requests_failed[:5]}")
    if res.requests_external:
        out.append(f"requests leaving the site (would fail offline): {res.requests_external[:5]}")
    if res.exceptions:
        out.append(f"JavaScript exceptions: {res.exceptions[:3]}")
    if r["tracebacks"]:
        out.append(f"cell outputs with an error traceback: {[t[:120] for t in r['tracebacks'][:2]]}")
    if r.get("strayReprs"):
        out.append(f"stray matplotlib return values shown as output (end the cell with ';' or plt.show()): {r['strayReprs'][:3]}")
    if r["widgetScripts"] or r["widgetText"]:
        out.append(f"dead widget placeholder(s): {r['widgetScripts']} widget-view scripts, text {r['widgetText'][:2]}")
    if r.get("navRaw"):
        out.append(f"raw TeX in the navigation (a title's maths not typeset): {r['navRaw'][:3]}")
    if "\\(" in r.get("title", "") or "$" in r.get("title", ""):
        out.append(f"raw TeX in the browser tab's title: {r['title']!r}")
    rows = r.get("claimRows", [])
    if is_chapter(name, root) and executed and not rows:
        out.append("no claim-check rows on an executed chapter page")
    cut = [c["id"] for c in rows if not c["verdictVisible"] or c["verdictRight"] > r["viewportWidth"]]
    if cut:
        out.append(f"claim rows whose verdict is cut off at {WIDTH} px: {cut[:3]}")
    if r.get("generatedTables"):
        out.append(f"generated tables wider than the content column at {WIDTH} px: {r['generatedTables'][:3]}")
    if r.get("overflowingHeads"):
        out.append(f"table headers whose text runs out of its column at {WIDTH} px: {r['overflowingHeads'][:3]}")
    unnamed = [c for c in rows if not c["id"].startswith("claim-") or not c["kind"]]
    if unnamed:
        out.append(f"{len(unnamed)} claim rows without an id or a kind")
    want = expected_proofs(name, root)
    got: dict[str, int] = {}
    for k in r["proofs"]:
        got[k] = got.get(k, 0) + 1
    for kind, n in want.items():
        if got.get(kind, 0) < n:
            out.append(f"theorem boxes: the source has {n} prf:{kind}, the page shows {got.get(kind, 0)}")
    toc = yaml.safe_load((root / "_toc.yml").read_text()) if (root / "_toc.yml").exists() else {}
    if name == toc.get("root"):  # the landing page's chapter table lists every chapter, with a verdict
        chapters = [p for p in toc_pages(root) if is_chapter(p, root)]
        listed = [h for h, _ in r["chapterTable"]]
        missing = [c for c in chapters if not any(h.endswith(f"{c}.html") for h in listed)]
        if missing:
            out.append(f"the landing page's chapter table misses {missing}")
        if executed and any(v == "not executed in this build" for _, v in r["chapterTable"]):
            out.append("the landing page's chapter table has chapters without a verdict in an executed build")
    if is_chapter(name, root):
        if not r["colab"] or not all(h.endswith(f"{name}.ipynb") for h in r["colab"]):
            out.append(f"Colab button missing or not pointing at {name}.ipynb: {r['colab']}")
        if not r["binder"] or not all(h.endswith(f"{name}.ipynb") for h in r["binder"]):
            out.append(f"Binder button missing or not pointing at {name}.ipynb: {r['binder']}")
        ipynb = [h for h in r["downloads"] if h.endswith(f"{name}.ipynb")]
        md = [h for h in r["downloads"] if h.endswith(f"{name}.md")]
        if not ipynb:
            out.append(f"no .ipynb download button: {r['downloads']}")
        # compared with what the build itself served (not the working tree, which may have moved on since):
        # the .md is the jupytext source, the .ipynb is exactly its paired notebook (tools/chapters.py), no outputs
        served_md, served_nb = html_dir / "_sources" / f"{name}.md", html_dir / "_sources" / f"{name}.ipynb"
        if not md:
            out.append(f"no .md download button: {r['downloads']}")
        elif not served_md.exists() or not served_md.read_text().startswith("---\njupytext:"):
            out.append("the .md download is not the chapter's jupytext source")
        if not ipynb:
            pass
        elif not served_nb.exists() or not served_md.exists():
            out.append("the .ipynb download is missing")
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            import chapters

            if json.loads(served_nb.read_text()) != json.loads(chapters.notebook_json(served_md)):
                out.append("the .ipynb download is not the chapter's paired notebook")
        if executed and r["outputs"] == 0:
            out.append("no cell outputs: the chapter was not executed")
        if executed and r["outputImages"] == 0:
            out.append("no figure in the cell outputs")
    return out


def _load_pages(binary: str, srv: Server, html_dir: Path, out_dir: Path | None, names: list[str], dark: bool):
    """Load ``names`` one after the other in one headless Chromium of this thread's own Playwright (Playwright's sync
    API wants one instance per thread); one :class:`PageResult` per name, before the checks."""
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, headless=True, args=CHROMIUM_ARGS)
        try:
            for name in names:
                res = PageResult(name, srv.url + f"{name}.html")
                if not (html_dir / f"{name}.html").exists():
                    res.problems.append(f"{name}.html was not built")
                    results.append(res)
                    continue
                page = LoadedPage(browser, res.url, srv.url)
                try:
                    res.report = page.evaluate(PAGE_REPORT_JS)
                    if out_dir is not None:
                        shot = Path(out_dir) / f"{name.replace('/', '__')}.jpg"
                        page.screenshot(shot, res.report["height"])
                        res.screenshots.append(shot)
                    if dark and out_dir is not None:  # the same page switched to the dark theme (no second load)
                        page.set_theme("dark")
                        shot = Path(out_dir) / f"{name.replace('/', '__')}.dark.jpg"
                        page.screenshot(shot, page.evaluate("document.documentElement.scrollHeight"))
                        res.screenshots.append(shot)
                        res.report["dark_theme"] = page.evaluate("document.documentElement.dataset.theme")
                    res.requests_failed, res.requests_external = list(page.failed), list(page.external)
                    res.exceptions = list(page.exceptions)
                finally:
                    page.close()
                results.append(res)
        finally:
            browser.close()
    return results


def check_site(
    html_dir: Path,
    out_dir: Path | None,
    pages: list[str] | None = None,
    executed: bool | None = None,
    binary: str | None = None,
    dark: bool = True,
    root: Path = ROOT,
    log=print,
    workers: int = 2,
) -> list[PageResult]:
    """Load every page in headless Chromium; returns one :class:`PageResult` per page (``.problems`` empty: fine).

    ``executed``: whether the chapters were executed by the build (then each chapter must show outputs and a
    figure); default: guessed from whether any chapter page has a cell output. ``workers`` browsers load the pages
    side by side (each its own share, in turn), one server serving them all; the results come in page order.
    """
    from concurrent.futures import ThreadPoolExecutor

    html_dir = Path(html_dir)
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary found (apt-get install chromium)")
    if not have_playwright():
        raise ImportError("Playwright for Python is not installed (pip install playwright)")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")

    pages = pages or toc_pages(root)
    shares = [pages[i::workers] for i in range(min(workers, len(pages)))]
    with Server(html_dir) as srv, ThreadPoolExecutor(len(shares)) as pool:
        loaded = pool.map(lambda names: _load_pages(binary, srv, html_dir, out_dir, names, dark), shares)
        by_name = {res.name: res for share in loaded for res in share}
    results = [by_name[name] for name in pages]
    if executed is None:
        executed = any(r.report.get("outputs", 0) for r in results if is_chapter(r.name, root))
    for res in results:
        if res.report:
            res.problems += page_problems(res.name, res, html_dir, executed, root)
        r = res.report
        log(
            f"{'ok  ' if not res.problems else 'FAIL'} {res.name}: "
            + (
                f"{r.get('mjx', 0)} formulas, {len(r.get('images', []))} images, {r.get('outputs', 0)} outputs, "
                f"{len(r.get('proofs', []))} theorem boxes"
                if r
                else ""
            )
            + "".join(f"\n       - {p}" for p in res.problems)
        )
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("html_dir", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "screenshots"), help="screenshot folder")
    ap.add_argument("--pages", nargs="*", help="docnames (default: every page in _toc.yml)")
    ap.add_argument("--workers", type=int, default=2, help="browsers loading pages side by side (default: 2)")
    ap.add_argument(
        "--executed",
        choices=["yes", "no", "auto"],
        default="auto",
        help="require cell outputs and a figure on every chapter (default: auto-detect)",
    )
    args = ap.parse_args(argv)
    executed = {"yes": True, "no": False, "auto": None}[args.executed]
    results = check_site(Path(args.html_dir), Path(args.out), args.pages, executed, workers=args.workers)
    bad = [r for r in results if r.problems]
    print(f"{len(results) - len(bad)}/{len(results)} pages fine; screenshots in {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
