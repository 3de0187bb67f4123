"""Open the built website in headless Chromium and check what a reader sees: ``python tools/browser_check.py [HTML_DIR]``.

For the landing page and every chapter in ``_toc.yml`` it serves ``HTML_DIR`` (default ``_build/html``) on
127.0.0.1, loads the page in Debian's ``chromium`` (driven over the DevTools protocol on a pipe,
``--remote-debugging-pipe``: standard library only, no websocket package, no browser download) and checks

* maths typeset by the site's own MathJax: ``mjx-container`` elements present where the page has maths, no math
  element left untypeset, no raw ``\\(``, ``\\[`` or ``$$`` in the text, no MathJax error (``mjx-merror``);
* every image loaded (``naturalWidth > 0``), no failed request, no request leaving 127.0.0.1, no JS exception;
* every figure in a cell output opaque (a transparent PNG puts black axis labels on the dark theme's background);
* no cell output showing an error traceback, no dead widget placeholder, no stray matplotlib return value
  (``Text(0.5, 0.98, ...)``, ``<matplotlib.legend.Legend at 0x...>``) printed under a figure cell;
* theorem boxes: as many sphinx-proof boxes of each kind as the chapter's source has ``prf:`` directives;
* the Colab and Binder launch links and the ``.ipynb``/``.md`` download links present; the ``.ipynb`` targets end
  in ``.ipynb``, the download serves the chapter's paired notebook and the ``.md`` its source;

and saves a full-page JPEG screenshot per page in light and in dark theme to ``--out`` (default
``artifacts/screenshots``). Exit status 1 when any page has a problem. ``tests/test_browser.py`` runs the same
checks on the site the test suite builds.
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import functools
import http.server
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
    "--remote-debugging-pipe",
]
WIDTH, HEIGHT, MAX_SHOT_HEIGHT = 1280, 900, 16000
PRF_RE = re.compile(r"^\s*(?:```+|:::+)\{prf:(\w+)\}", re.M)


def find_chromium() -> str | None:
    """Path of a Chromium binary (``$CHROMIUM`` first), or None."""
    if os.environ.get("CHROMIUM"):
        return shutil.which(os.environ["CHROMIUM"])
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


# ------------------------------------------------------------------------------------ DevTools over a pipe
class DevTools:
    """A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-framed)."""

    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.user_data_dir = tempfile.mkdtemp(prefix="companion-chromium-")
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # move the child's ends above fd 10, so that dup2 onto 3 and 4 cannot clobber one of them
        hi_to_r, hi_from_w = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
        os.close(to_r), os.close(from_w)

        def child_fds():
            os.dup2(hi_to_r, 3)
            os.dup2(hi_from_w, 4)

        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.user_data_dir}", f"--window-size={WIDTH},{HEIGHT}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=child_fds, pass_fds=(3, 4, hi_to_r, hi_from_w))
        os.close(hi_to_r), os.close(hi_from_w)
        self._w, self._r = os.fdopen(to_w, "wb", buffering=0), os.fdopen(from_r, "rb", buffering=0)
        self._next_id, self._lock = 0, threading.Lock()
        self._replies: dict[int, queue.Queue] = {}
        self.events: "queue.Queue[dict]" = queue.Queue()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.call("Target.setDiscoverTargets", discover=False)  # a first round trip: the browser is up

    def _read_loop(self):
        buf = b""
        while True:
            chunk = self._r.read(1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg and msg["id"] in self._replies:
                    self._replies[msg["id"]].put(msg)
                else:
                    self.events.put(msg)

    def call(self, method: str, session: str | None = None, timeout: float | None = None, **params):
        with self._lock:
            self._next_id += 1
            mid = self._next_id
            self._replies[mid] = queue.Queue()
            msg = {"id": mid, "method": method, "params": params}
            if session:
                msg["sessionId"] = session
            self._w.write(json.dumps(msg).encode() + b"\0")
        try:
            reply = self._replies[mid].get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise TimeoutError(f"Chromium did not answer {method} within {timeout or self.timeout} s") from None
        finally:
            self._replies.pop(mid, None)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self._w, self._r):
            try:
                f.close()
            except OSError:
                pass
        shutil.rmtree(self.user_data_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
      .filter(t => /^(<matplotlib\.[\w.]+ (object )?at 0x[0-9a-f]+>|\[<matplotlib\.|Text\(-?[\d.e+-]+, -?[\d.e+-]+, |<Figure size )/.test(t))
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
  };
})()
"""


@dataclass
class PageResult:
    name: str                      # toc file, e.g. "book/paper_a/01_setup"
    url: str
    report: dict = field(default_factory=dict)
    requests_failed: list = field(default_factory=list)
    requests_external: list = field(default_factory=list)
    exceptions: list = field(default_factory=list)
    screenshots: list = field(default_factory=list)
    problems: list = field(default_factory=list)


def _wait_event(dt: DevTools, method: str, session: str, timeout: float, sink: list) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            ev = dt.events.get(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            break
        sink.append(ev)
        if ev.get("method") == method and ev.get("sessionId") == session:
            return ev
    raise TimeoutError(f"no {method} within {timeout} s")


def _drain(dt: DevTools, sink: list):
    while True:
        try:
            sink.append(dt.events.get_nowait())
        except queue.Empty:
            return


def _evaluate(dt: DevTools, session: str, expr: str, timeout: float = 60.0):
    res = dt.call("Runtime.evaluate", session, timeout=timeout, expression=expr, awaitPromise=True,
                  returnByValue=True)
    if "exceptionDetails" in res:
        raise RuntimeError(f"page script failed: {res['exceptionDetails'].get('text')} "
                           f"{res['exceptionDetails'].get('exception', {}).get('description', '')}")
    return res["result"].get("value")


def load_page(dt: DevTools, url: str, dark: bool, timeout: float = 60.0) -> tuple[str, str, list]:
    """Open ``url`` in a fresh tab (light or dark colour scheme), wait for load and MathJax.

    Returns (target id, session id, the DevTools events seen so far)."""
    target = dt.call("Target.createTarget", url="about:blank")["targetId"]
    session = dt.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Page", "Runtime", "Network"):
        dt.call(f"{domain}.enable", session)
    dt.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)
    dt.call("Emulation.setEmulatedMedia", session,
            features=[{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}])
    events: list = []
    _drain(dt, [])
    dt.call("Page.navigate", session, url=url)
    _wait_event(dt, "Page.loadEventFired", session, timeout, events)
    mode = "dark" if dark else "light"  # pydata-sphinx-theme: an explicit choice wins over the OS preference
    _evaluate(dt, session, f"document.documentElement.dataset.theme = '{mode}'; "
                           f"document.documentElement.dataset.mode = '{mode}'; true")
    mj_error = _evaluate(dt, session, "(async () => { if (window.MathJax && MathJax.startup && MathJax.startup.promise) "
                                      "{ try { await MathJax.startup.promise; } catch (e) { return String(e); } } "
                                      "return ''; })()", timeout)
    time.sleep(0.3)  # late image/font requests
    _drain(dt, events)
    if mj_error:
        events.append({"method": "companion.mathjaxError", "sessionId": session, "params": {"error": mj_error}})
    return target, session, events


def screenshot(dt: DevTools, session: str, path: Path, height: int):
    h = max(HEIGHT, min(height, MAX_SHOT_HEIGHT))
    dt.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=h, deviceScaleFactor=1, mobile=False)
    # JPEG: a tall page encodes about three times faster than as PNG (seconds per page on a loaded 2-core machine)
    data = dt.call("Page.captureScreenshot", session, timeout=120, format="jpeg", quality=85,
                   captureBeyondViewport=False)["data"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(data))


def _network_problems(events: list, session: str, origin: str):
    failed, external, exceptions, urls = [], [], [], {}
    for ev in events:
        if ev.get("sessionId") != session:
            continue
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Network.requestWillBeSent":
            u = p["request"]["url"]
            urls[p["requestId"]] = u
            if not u.startswith((origin, "data:", "blob:", "about:")):
                external.append(u)
        elif m == "Network.loadingFailed" and not p.get("canceled"):
            failed.append(f"{urls.get(p['requestId'], '?')}: {p.get('errorText')}")
        elif m == "Network.responseReceived" and p["response"]["status"] >= 400 \
                and not p["response"]["url"].endswith("/favicon.ico"):  # asked for by the browser, not the page
            failed.append(f"{p['response']['url']}: HTTP {p['response']['status']}")
        elif m == "companion.mathjaxError":
            exceptions.append(f"MathJax failed: {p['error'][:300]}")
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            exceptions.append(d.get("exception", {}).get("description", d.get("text", "?"))[:300])
    return failed, external, exceptions


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
        out.append(f"stray matplotlib return values shown as output (end the cell with ';' or plt.show()): "
                   f"{r['strayReprs'][:3]}")
    if r["widgetScripts"] or r["widgetText"]:
        out.append(f"dead widget placeholder(s): {r['widgetScripts']} widget-view scripts, text {r['widgetText'][:2]}")
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


def check_site(html_dir: Path, out_dir: Path | None, pages: list[str] | None = None, executed: bool | None = None,
               binary: str | None = None, dark: bool = True, root: Path = ROOT, log=print) -> list[PageResult]:
    """Load every page in headless Chromium; returns one :class:`PageResult` per page (``.problems`` empty: fine).

    ``executed``: whether the chapters were executed by the build (then each chapter must show outputs and a
    figure); default: guessed from whether any chapter page has a cell output.
    """
    html_dir = Path(html_dir)
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary found (apt-get install chromium)")
    pages = pages or toc_pages(root)
    results = []
    with Server(html_dir) as srv, DevTools(binary) as dt:
        for name in pages:
            res = PageResult(name, srv.url + f"{name}.html")
            if not (html_dir / f"{name}.html").exists():
                res.problems.append(f"{name}.html was not built")
                results.append(res)
                continue
            target, session, events = load_page(dt, res.url, dark=False)
            res.report = _evaluate(dt, session, PAGE_REPORT_JS)
            _drain(dt, events)
            res.requests_failed, res.requests_external, res.exceptions = _network_problems(events, session, srv.url)
            if out_dir is not None:
                shot = Path(out_dir) / f"{name.replace('/', '__')}.jpg"
                screenshot(dt, session, shot, res.report["height"])
                res.screenshots.append(shot)
            if dark and out_dir is not None:  # the same page switched to the dark theme (no second load)
                dt.call("Emulation.setEmulatedMedia", session, features=[{"name": "prefers-color-scheme", "value": "dark"}])
                _evaluate(dt, session, "document.documentElement.dataset.theme = 'dark'; "
                                       "document.documentElement.dataset.mode = 'dark'; "
                                       "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                h = _evaluate(dt, session, "document.documentElement.scrollHeight")
                shot = Path(out_dir) / f"{name.replace('/', '__')}.dark.jpg"
                screenshot(dt, session, shot, h)
                res.screenshots.append(shot)
                res.report["dark_theme"] = _evaluate(dt, session, "document.documentElement.dataset.theme")
            dt.call("Target.closeTarget", targetId=target)
            results.append(res)
        if executed is None:
            executed = any(r.report.get("outputs", 0) for r in results if is_chapter(r.name, root))
        for res in results:
            if res.report:
                res.problems += page_problems(res.name, res, html_dir, executed, root)
            r = res.report
            log(f"{'ok  ' if not res.problems else 'FAIL'} {res.name}: "
                + (f"{r.get('mjx', 0)} formulas, {len(r.get('images', []))} images, {r.get('outputs', 0)} outputs, "
                   f"{len(r.get('proofs', []))} theorem boxes" if r else "")
                + "".join(f"\n       - {p}" for p in res.problems))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("html_dir", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "screenshots"), help="screenshot folder")
    ap.add_argument("--pages", nargs="*", help="docnames (default: every page in _toc.yml)")
    ap.add_argument("--executed", choices=["yes", "no", "auto"], default="auto",
                    help="require cell outputs and a figure on every chapter (default: auto-detect)")
    args = ap.parse_args(argv)
    executed = {"yes": True, "no": False, "auto": None}[args.executed]
    results = check_site(Path(args.html_dir), Path(args.out), args.pages, executed)
    bad = [r for r in results if r.problems]
    print(f"{len(results) - len(bad)}/{len(results)} pages fine; screenshots in {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
