"""Run a chapter's notebook the way Colab would, in a clean environment: ``python tools/colab_sim.py [CHAPTER.ipynb]``.

What Colab has and this reproduces:

* a Python with torch, numpy, scipy, matplotlib, tqdm, ipykernel and ipywidgets preinstalled but **not**
  ``companion``: a fresh virtual environment under a temporary folder that sees the project's ``.venv``
  site-packages through a ``.pth`` file. ``.pth`` lines are not site directories, so the ``.venv``'s editable
  ``companion`` (itself a ``.pth`` hook) stays invisible; the script checks that ``import companion`` fails first;
* none of the book's build (MyST-NB, MyST-Parser, Jupyter Book, jupyter-cache, the book theme): the project's
  ``.venv`` has them, so the fresh environment hides them with an import hook (a chapter that imports one fails
  here as it would in Colab);
* ``google.colab`` in ``sys.modules``, so the chapter's hidden first cell runs its ``pip install``;
* the notebook as Colab opens it: the committed paired ``.ipynb``, no outputs, run top to bottom in a fresh kernel.

What differs: the install URL (github, not reachable here) is swapped for ``git+file://`` of this repository's
committed HEAD (uncommitted changes are not installed, as on GitHub), pip builds without isolation (offline), and
the scale is ``quick`` unless ``--scale paper``. The script then checks that pip installed ``companion`` from git
into the fresh environment, did not install or upgrade torch, and that every cell ran without error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL_RE = re.compile(r'"companion @ git\+(?P<url>[^"]+)"')
NOT_IN_COLAB = ("myst_nb", "myst_parser", "jupyter_book", "jupyter_cache", "sphinx_book_theme")
HIDE = f"""import importlib.abc


class _NotInColab(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {NOT_IN_COLAB!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in Colab)", name=name)
        return None


import sys  # noqa: E402

sys.meta_path.insert(0, _NotInColab())
"""

RUNNER = r"""
import json, sys, time
import nbformat, nbclient
nb = nbformat.read(sys.argv[1], as_version=4)
colab = nbformat.v4.new_code_cell("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')")
nb.cells.insert(0, colab)
for i, c in enumerate(nb.cells):
    if c.cell_type == "code" and "google.colab" in c.source and "pip" in c.source:
        c.source = c.source.replace(sys.argv[2], sys.argv[3])
        if sys.argv[4] == "install-only":  # the install cell, then a probe in the same kernel
            nb.cells = nb.cells[:i + 1] + [nbformat.v4.new_code_cell(
                "import companion, torch\nfrom companion import device, explore\n"
                "print(companion.__file__, torch.__version__, device.describe(), explore.mode())")]
        break
t0 = time.time()
client = nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=False)
err = None
try:
    client.execute()
except Exception as e:
    err = f"{type(e).__name__}: {str(e)[-1500:]}"
out = {"seconds": time.time() - t0, "error": err, "cells": []}
for c in nb.cells:
    if c.cell_type == "code":
        text = "".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
        out["cells"].append({"source": c.source[:80], "stream": text[-400:],
                             "mimes": [m for o in c.outputs for m in o.get("data", {})]})
print("@@RESULT@@" + json.dumps(out))
"""


def site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def simulate(notebook: Path, scale: str = "quick", keep: bool = False, install_only: bool = False, log=print) -> dict:
    """Run ``notebook`` like Colab in a fresh environment (``install_only``: just its install cell and an import probe)."""
    notebook = notebook.resolve()
    nb = json.loads(notebook.read_text())
    url = INSTALL_RE.search("".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")).group("url")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    local_url = f"file://localhost{ROOT}@{head}"  # pip 23 rejects "name @ git+file:///path" (no host)
    tmp = Path(tempfile.mkdtemp(prefix="colab-sim-"))
    env_dir = tmp / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    py = env_dir / "bin" / "python"
    project_site = site_packages(ROOT / ".venv")
    sp = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    (sp / "colab_preinstalled.pth").write_text(str(project_site) + "\n")
    (sp / "colab_absent.py").write_text(HIDE)
    (sp / "colab_absent.pth").write_text("import colab_absent\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COMPANION_WIDGETS")}
    env.update(
        COMPANION_SCALE=scale,
        COMPANION_PROGRESS="0",
        PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PATH=f"{env_dir / 'bin'}:{env.get('PATH', '')}",
    )
    probe = subprocess.run(
        [
            str(py),
            "-c",
            "import torch, numpy, scipy, matplotlib, ipykernel, ipywidgets, pip\n"
            "try:\n    import myst_nb\nexcept ImportError:\n    pass\nelse:\n    raise SystemExit('myst_nb visible')\n"
            "try:\n    import companion\nexcept ImportError:\n    print('clean')\nelse:\n"
            "    print('companion visible:', companion.__file__)\nprint(torch.__version__)",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    log(f"fresh env {env_dir}: {probe.stdout.strip()} {probe.stderr.strip()[-300:]}")
    if not probe.stdout.startswith("clean"):
        raise RuntimeError(f"the simulated Colab environment is not clean: {probe.stdout} {probe.stderr}")
    torch_before = probe.stdout.split()[-1]
    t0 = time.time()
    proc = subprocess.run(
        [str(py), "-c", RUNNER, str(notebook), f"git+{url}", f"git+{local_url}", "install-only" if install_only else "all"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
    )
    res = (
        json.loads(proc.stdout.split("@@RESULT@@", 1)[1])
        if "@@RESULT@@" in proc.stdout
        else {"error": f"runner failed: {proc.stderr[-2000:]}", "cells": [], "seconds": time.time() - t0}
    )
    check = subprocess.run(
        [
            str(py),
            "-c",
            "import companion, torch, importlib.metadata as m\n"
            "d = m.distribution('companion')\n"
            "print(companion.__file__); print(torch.__version__); print(d.read_text('direct_url.json'))",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = check.stdout.strip().splitlines()
    res.update(
        notebook=str(notebook.relative_to(ROOT)),
        env=str(env_dir),
        torch_before=torch_before,
        companion_file=lines[0] if lines else "",
        torch_after=lines[1] if len(lines) > 1 else "",
        direct_url=lines[2] if len(lines) > 2 else "",
        installed_into_env=bool(lines) and lines[0].startswith(str(env_dir)),
    )
    res["torch_in_env"] = any(p.name.startswith("torch") for p in sp.iterdir())
    if not keep:
        subprocess.run(["rm", "-rf", str(tmp)])
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebook", nargs="?", default=str(ROOT / "book" / "paper_a" / "01_setup.ipynb"))
    ap.add_argument("--scale", default="quick", choices=["quick", "paper"])
    ap.add_argument("--keep", action="store_true", help="keep the temporary environment")
    ap.add_argument("--install-only", action="store_true", help="run only the install cell and an import probe")
    args = ap.parse_args(argv)
    res = simulate(Path(args.notebook), args.scale, args.keep, args.install_only)
    for c in res["cells"][:4]:
        print("cell:", c["source"].splitlines()[0] if c["source"] else "", "|", c["stream"].strip()[-200:])
    print(json.dumps({k: v for k, v in res.items() if k != "cells"}, indent=1))
    ok = not res["error"] and res["installed_into_env"] and not res["torch_in_env"] and res["torch_before"] == res["torch_after"]
    print("OK: ran like Colab" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
