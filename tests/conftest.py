"""Shared pytest set-up: a seeded generator fixture, one folder of claim records per session (read by the coverage
test), the order in which the record-reading and site tests run after the chapters, the skip of GPU-marked tests
without CUDA, and the pytest-xdist scheduler that keeps the chapters and the tests that read them on one worker."""

import os

import pytest
import torch

os.environ.setdefault("COMPANION_PROGRESS", "0")


@pytest.fixture(autouse=True)
def _default_dtype_unchanged():
    """Every test leaves torch's default dtype as it found it: a leaked ``set_default_dtype`` changes how later
    doctests print tensors, so the leak is restored and reported at the test that made it."""
    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    torch.set_default_dtype(before)
    assert after == before, f"the test changed torch's default dtype from {before} to {after}; restore it"


@pytest.fixture
def gen():
    """A fresh CPU generator with a fixed seed: every test is reproducible."""
    return torch.Generator().manual_seed(1234)


def pytest_configure(config):
    """The chapters nbval executes write their claim records to one folder per session (the kernels inherit this
    environment), so that the coverage test can read what ran."""
    if not os.environ.get("COMPANION_CLAIMS_DIR"):
        import tempfile

        os.environ["COMPANION_CLAIMS_DIR"] = tempfile.mkdtemp(prefix="companion-claims-")


def _runs_after_the_chapters(nodeid: str) -> int:
    """0 for most tests; 1 for the coverage computed from the records; 2 for the tests of the built site (the -W
    build and the browser check), which take nbval's outputs when every chapter ran before them."""
    if nodeid.startswith("tests/book/test_browser.py") or "test_book_builds_with_warnings_as_errors" in nodeid:
        return 2
    return int("test_every_result_is_checked_by_a_row_that_ran" in nodeid)


def pytest_collection_modifyitems(config, items):
    """Run the record-based coverage test and the browser check after the chapters; skip GPU-marked tests without
    CUDA (CI has none)."""
    items.sort(key=lambda item: _runs_after_the_chapters(item.nodeid))  # stable sort: order otherwise kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


CHAPTERS_GROUP = "chapters-then-site"


def xdist_scope(nodeid: str) -> str:
    """The unit of work a test belongs to under pytest-xdist: :data:`CHAPTERS_GROUP` for a chapter's cell and for
    every test that reads what the chapters left, else the test itself."""
    return CHAPTERS_GROUP if ".ipynb::" in nodeid or _runs_after_the_chapters(nodeid) else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test`` runs ``-n 2``): the chapters' cells and every test that reads what they left
    (the claim records, nbval's outputs) are one unit of work, run by one worker in the order sorted above, while the
    other workers take the remaining tests one by one (the largest unit is handed out first)."""
    if config.getvalue("dist") not in ("load", "loadscope", "loadgroup"):
        return None  # e.g. --dist each: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ChaptersTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ChaptersTogether(config, log)


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def build_site(out_dir, execute: str = "off", cache_dir=None):
    """Build the book with ``jupyter-book build -W`` into ``out_dir``; returns (returncode, log, html dir).

    ``execute='off'`` renders the chapters without running them (nbval executes them elsewhere in the
    suite); ``'cache'`` executes them at the scale COMPANION_SCALE names, or takes their outputs from the
    jupyter-cache at ``cache_dir`` where it holds them (:func:`build_with_outputs`).
    """
    import subprocess
    import sys

    import yaml

    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["execute"]["execute_notebooks"] = execute
    if cache_dir is not None:
        cfg["execute"]["cache"] = str(cache_dir)
    if execute == "off":  # no cell runs, so no value is glued: the chapters' {glue} references cannot resolve here
        cfg["sphinx"]["config"].setdefault("suppress_warnings", []).append("mystnb.glue")
    config = out_dir / "_config.yml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    jb = str(__import__("pathlib").Path(sys.executable).with_name("jupyter-book"))
    proc = subprocess.run(
        [jb, "build", str(ROOT), "--config", str(config), "--path-output", str(out_dir), "-W", "--keep-going", "--all"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return proc.returncode, proc.stdout + proc.stderr, out_dir / "_build" / "html"


def _chapter_docnames() -> list[str]:
    """Every chapter's docname (``tools/chapters.py``'s list; the book test keeps it equal to the table of contents')."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    import chapters

    return [str(md.relative_to(ROOT).with_suffix("")) for md in chapters.chapters()]


def nbval_executed_notebooks(session) -> dict[str, object]:
    """The chapter notebooks nbval has executed earlier in this pytest run, with its outputs: {docname: notebook}.

    nbval keeps each cell's outputs in ``item.test_outputs``; a notebook counts only when every code cell ran.
    """
    import copy
    from pathlib import Path

    by_file: dict[Path, dict] = {}
    for item in session.items:
        if type(item).__name__ != "IPyNbCell":
            continue
        f = by_file.setdefault(
            Path(str(item.parent.fspath)).resolve(), {"nb": copy.deepcopy(item.parent.nb), "outs": {}, "complete": True}
        )
        outs = getattr(item, "test_outputs", None)
        if outs is None:
            f["complete"] = False
        else:
            f["outs"][item.cell_num] = outs
    done = {}
    for path, f in by_file.items():
        if not f["complete"]:
            continue
        code = [c for c in f["nb"].cells if c.cell_type == "code"]
        for i, cell in enumerate(code):
            cell.outputs = list(f["outs"].get(i, []))
        try:
            done[str(path.relative_to(ROOT).with_suffix(""))] = f["nb"]
        except ValueError:
            pass
    return done


def build_with_outputs(out_dir, notebooks: dict):
    """``jupyter-book build -W`` whose chapters take their outputs from ``notebooks`` through a jupyter-cache
    (myst-nb's ``cache`` mode matches a chapter by its code cells), so nothing is executed twice; returns
    (returncode, log, html dir)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache_dir = out_dir / "jupyter_cache"
    cache = get_cache(str(cache_dir))
    for name, nb in notebooks.items():
        cache.cache_notebook_bundle(CacheBundleIn(nb, str(ROOT / f"{name}.md")), check_validity=False, overwrite=True)
    return build_site(out_dir, "cache", cache_dir)


@pytest.fixture(scope="session")
def built_site(request, tmp_path_factory):
    """The website built once per test session with -W: (returncode, log, html dir, executed?).

    When nbval has executed every chapter earlier in the run (the tests using this fixture are sorted after the
    notebooks), the chapters take nbval's outputs through a jupyter-cache: the site is the executed one, glue
    references resolve, and nothing runs twice. Otherwise (a partial run) the chapters render with execution off.
    """
    chapters = _chapter_docnames()
    executed = nbval_executed_notebooks(request.session)
    if chapters and all(c in executed for c in chapters):
        code, log, html = build_with_outputs(tmp_path_factory.mktemp("site_executed"), executed)
        return code, log, html, True
    return (*build_site(tmp_path_factory.mktemp("site")), False)
