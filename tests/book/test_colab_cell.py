"""The Colab install cell of every chapter, executed as Colab would run it and as a local kernel would.

Each chapter's paired ``.ipynb`` (the file Colab opens) starts with a hidden code cell that, in Colab only,
pip-installs ``companion`` from the repository named in ``_config.yml`` and leaves Colab's own torch alone.
Here the cell's source is executed with a simulated ``google.colab`` module and a recording ``subprocess.run``:
it must make exactly one pip call installing ``companion @ git+<url>`` (no torch, no upgrade or reinstall
flag that would replace Colab's CUDA torch). Outside Colab the same cell must be a no-op. After it, the
chapter's scale must be ``paper`` (Colab sets no COMPANION_SCALE) and the chapter must print the device.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import chapters  # noqa: E402

URL = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
CHAPTERS = chapters.chapters()
IDS = [str(p.relative_to(ROOT / "book")) for p in CHAPTERS]
FORBIDDEN_FLAGS = {"-U", "--upgrade", "--force-reinstall", "--ignore-installed", "-I", "--upgrade-strategy"}


def _code_cells(md: Path) -> list[dict]:
    if not md.with_suffix(".ipynb").exists():
        pytest.fail(f"{md.name}: paired notebook missing (run python tools/chapters.py sync)")
    nb = json.loads(md.with_suffix(".ipynb").read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _run_cell(source: str, monkeypatch, colab: bool) -> list[tuple[tuple, dict]]:
    """Execute ``source`` as a notebook would (fresh globals); returns the recorded subprocess.run calls."""
    calls: list[tuple[tuple, dict]] = []

    def fake_run(*args, **kwargs):
        calls.append((args, kwargs))
        return subprocess.CompletedProcess(args[0] if args else kwargs.get("args"), 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    if colab:
        google = types.ModuleType("google")
        monkeypatch.setitem(sys.modules, "google", sys.modules.get("google", google))
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(source, "<colab install cell>", "exec"), {"__name__": "__main__"})
    return calls


@pytest.fixture(autouse=True)
def _colab_like_env(monkeypatch):
    monkeypatch.delenv("COMPANION_SCALE", raising=False)  # Colab sets none


def test_there_are_chapters():
    assert CHAPTERS, "no jupytext chapters found under book/"


@pytest.mark.parametrize("md", CHAPTERS, ids=IDS)
def test_first_cell_is_the_hidden_install_cell(md):
    first = _code_cells(md)[0]
    assert "google.colab" in _source(first), f"{md.name}: the first code cell must be the Colab install cell"
    assert "remove-cell" in first.get("metadata", {}).get("tags", []), f"{md.name}: the install cell must be hidden on the site"


@pytest.mark.parametrize("md", CHAPTERS, ids=IDS)
def test_in_colab_installs_companion_from_the_repository_and_never_torch(md, monkeypatch):
    calls = _run_cell(_source(_code_cells(md)[0]), monkeypatch, colab=True)
    assert len(calls) == 1, f"{md.name}: expected exactly one pip call in Colab, got {calls}"
    (args, kwargs) = calls[0]
    cmd = list(args[0]) if args else list(kwargs["args"])
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"], cmd
    assert f"companion @ git+{URL}" in cmd, f"{md.name}: must install companion from {URL}: {cmd}"
    assert not any("torch" in str(a).lower() for a in cmd), f"{md.name}: must not (re)install torch: {cmd}"
    assert not FORBIDDEN_FLAGS & set(cmd), f"{md.name}: an upgrade/reinstall flag would replace Colab's torch: {cmd}"
    assert kwargs.get("check") is True, f"{md.name}: a failed install must stop the notebook (check=True)"


@pytest.mark.parametrize("md", CHAPTERS, ids=IDS)
def test_outside_colab_the_cell_is_a_no_op(md, monkeypatch):
    before = set(sys.modules)
    assert _run_cell(_source(_code_cells(md)[0]), monkeypatch, colab=False) == []
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("pip", "companion", "torch")}


@pytest.mark.parametrize("md", CHAPTERS, ids=IDS)
def test_colab_defaults_to_paper_scale_and_prints_the_device(md, monkeypatch):
    from companion import scale

    _run_cell(_source(_code_cells(md)[0]), monkeypatch, colab=True)
    assert scale.current() == "paper"
    code = "\n".join(_source(c) for c in _code_cells(md))
    assert "device.describe()" in code, f"{md.name}: the chapter should print the device it runs on"
    assert "scale.select(" in code, f"{md.name}: the configuration should come from scale.select (paper by default)"


@pytest.mark.slow
def test_install_cell_in_a_fresh_colab_like_environment():
    """tools/colab_sim.py: a fresh venv with Colab's preinstalled stack (torch, numpy, ipykernel, …) and no
    companion; the first chapter's install cell, run in a kernel with google.colab present, pip-installs companion
    from git (this repository's HEAD standing in for GitHub), keeps torch, and the same kernel then imports it.
    About 15-25 s; ``python tools/colab_sim.py`` runs a whole chapter this way."""
    import shutil

    if shutil.which("git") is None or not (ROOT / ".git").exists() or not (ROOT / ".venv").exists():
        pytest.skip("needs git, a git checkout and the project's .venv")
    import colab_sim

    first = ROOT / "book" / "paper_a" / "01_setup.ipynb"  # the model chapter; any chapter's install cell is the same
    res = colab_sim.simulate(first, install_only=True, log=lambda *_: None)
    assert res["error"] is None, res["error"]
    assert res["installed_into_env"], f"companion was not installed into the fresh environment: {res['companion_file']}"
    assert '"vcs": "git"' in res["direct_url"], res["direct_url"]
    assert not res["torch_in_env"] and res["torch_after"] == res["torch_before"], "the install cell touched torch"
    probe = res["cells"][-1]["stream"]
    assert "site-packages/companion/__init__.py" in probe and "device=" in probe, probe
