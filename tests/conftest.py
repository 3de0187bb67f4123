import os

import pytest
import torch

os.environ.setdefault("COMPANION_PROGRESS", "0")


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


def _runs_after_the_chapters(item) -> int:
    """0 for most tests; 1 for the coverage computed from the records; 2 for the browser check (nbval's outputs)."""
    if item.nodeid.startswith("tests/book/test_browser.py"):
        return 2
    return int("test_every_result_is_checked_by_a_row_that_ran" in item.nodeid)


def pytest_collection_modifyitems(config, items):
    """Run the record-based coverage test and the browser check after the chapters; skip GPU-marked tests without
    CUDA (CI has none)."""
    items.sort(key=_runs_after_the_chapters)  # stable sort: order otherwise kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def build_site(out_dir, execute: str = "off"):
    """Build the book with ``jupyter-book build -W`` into ``out_dir``; returns (returncode, log, html dir).

    ``execute='off'`` renders the chapters without running them (nbval executes them elsewhere in the
    suite); ``'cache'`` executes them at the scale COMPANION_SCALE names.
    """
    import subprocess
    import sys

    import yaml

    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["execute"]["execute_notebooks"] = execute
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


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The website built once per test session with -W (execution off): (returncode, log, html dir)."""
    return build_site(tmp_path_factory.mktemp("site"))
