"""Keep the chapters in sync with their sources: ``python tools/chapters.py sync [chapter ...]|check``.

The MyST-Markdown ``book/**/*.md`` jupytext files are the source of truth for the notebooks, and the inventory
``book/coverage/{A,B,C}.yml`` for the statements of the papers' results. ``sync``

* fills every statement block of a chapter's theorem boxes from the inventory: the lines between
  ``<!-- statement: A Lemma 4.3 -->`` (one id, or several separated by commas) and ``<!-- end statement -->``
  are the inventory's ``statement`` of each id (several ids: one paragraph each, led by the result's name);
* rewrites the Colab install cell with the repository URL from ``_config.yml`` (the one place it is kept);
* writes each paired ``.ipynb`` (no outputs).

``check`` exits non-zero when a pair has drifted, a statement block differs from the inventory, or a URL
disagrees. ``format`` runs ruff's formatter on every code cell of the chapters (the settings of ``book/ruff.toml``:
lines of at most 100 characters) and writes the cells back into the ``.md``; the test suite runs ruff's checks and
formatter on the paired notebooks, so a chapter's code is linted like the package's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import yaml

ROOT = Path(__file__).resolve().parents[1]
INSTALL_RE = re.compile(r'"companion @ git\+(?P<url>[^"]+)"')
STATEMENT_RE = re.compile(r"(?P<open><!-- statement: (?P<ids>[^>]+?) -->\n)(?P<body>.*?)(?P<close><!-- end statement -->)", re.S)


def inventory() -> dict[str, dict]:
    """Every result of the three papers' inventories, by id; ``"<paper> hypothesis"`` is a paper's common
    hypothesis where its inventory states one."""
    out = {}
    for path in sorted((ROOT / "book" / "coverage").glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        for item in data["results"]:
            out[item["id"]] = item
        if data.get("hypothesis"):
            out[f"{data['paper']} hypothesis"] = {"statement": data["hypothesis"]}
    return out


def statement_block(ids: list[str], results: dict[str, dict]) -> str:
    """The generated text of one statement block: one id's statement, or one paragraph per id led by its name."""
    missing = [i for i in ids if i not in results]
    if missing:
        raise ValueError(f"statement block names results missing from book/coverage: {missing}")
    if len(ids) == 1:
        return results[ids[0]]["statement"] + "\n"
    return "\n".join(
        results[i]["statement"] + "\n" if i.endswith(" hypothesis") else f"**{i.split(' ', 1)[1]}.** {results[i]['statement']}\n"
        for i in ids
    )


def fill_statements(text: str, results: dict[str, dict]) -> str:
    """``text`` with every statement block regenerated from the inventory."""

    def fill(m: re.Match) -> str:
        ids = [i.strip() for i in m.group("ids").split(",")]
        return m.group("open") + statement_block(ids, results) + m.group("close")

    return STATEMENT_RE.sub(fill, text)


def statement_ids(text: str) -> list[str]:
    """The result ids a chapter's statement blocks state, in order."""
    return [i.strip() for m in STATEMENT_RE.finditer(text) for i in m.group("ids").split(",")]


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def chapters() -> list[Path]:
    """Every jupytext chapter under book/ (files whose front matter names jupytext)."""
    return sorted(p for p in (ROOT / "book").rglob("*.md") if p.read_text().startswith("---\njupytext:"))


def notebook_json(md: Path) -> str:
    nb = jupytext.read(md)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"  # deterministic ids, so that a re-sync of an unchanged chapter is a no-op
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("jupytext", None)  # the .ipynb is a plain notebook for Colab; the .md carries the pairing
    return jupytext.writes(nb, fmt="ipynb")


def install_urls(md: Path) -> list[str]:
    return INSTALL_RE.findall(md.read_text())


def sync(only: list[str] | None = None) -> None:
    """Rewrite the paired notebooks (of the chapters named in ``only``, paths or stems; default: every chapter)."""
    url, results = repository_url(), inventory()
    picked = [md for md in chapters() if not only or any(md.stem in o or str(md).endswith(o) for o in only)]
    for md in picked:
        text = md.read_text()
        new = fill_statements(INSTALL_RE.sub(f'"companion @ git+{url}"', text), results)
        if new != text:
            md.write_text(new)
        md.with_suffix(".ipynb").write_text(notebook_json(md))
        print("synced", md.relative_to(ROOT))


def problems() -> list[str]:
    url, out, results = repository_url(), [], inventory()
    for md in chapters():
        rel = md.relative_to(ROOT)
        if fill_statements(md.read_text(), results) != md.read_text():
            out.append(f"{rel}: a theorem box's statement differs from book/coverage (run python tools/chapters.py sync)")
        nb = md.with_suffix(".ipynb")
        if not nb.exists():
            out.append(f"{rel}: paired notebook missing")
        elif json.loads(nb.read_text()) != json.loads(notebook_json(md)):
            out.append(f"{rel}: paired .ipynb out of sync (run python tools/chapters.py sync)")
        urls = install_urls(md)
        if urls != [url]:
            out.append(f"{rel}: Colab install cell must install from {url}, found {urls}")
    return out


def format_cells(only: list[str] | None = None) -> list[Path]:
    """ruff's safe fixes and formatter on the chapters' code (``book/ruff.toml``), written back into the ``.md``.

    ruff works on the paired notebook (it sees the chapter's cells together, so an import used three cells later
    is not "unused"); the fixed cells are then copied into the ``.md`` in order. Returns the files changed.
    """
    changed = []
    for md in chapters():
        if only and not any(md.stem in o or str(md).endswith(o) for o in only):
            continue
        nb_path = md.with_suffix(".ipynb")
        nb_path.write_text(notebook_json(md))
        for args in (["check", "--fix", "--quiet", "--exit-zero"], ["format", "--quiet"]):
            subprocess.run([sys.executable, "-m", "ruff", *args, str(nb_path)], cwd=ROOT, check=True)
        fixed = [c for c in json.loads(nb_path.read_text())["cells"] if c["cell_type"] == "code"]
        nb = jupytext.read(md)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if len(code) != len(fixed):
            raise RuntimeError(f"{md.name}: ruff changed the number of code cells")
        dirty = False
        for cell, new in zip(code, fixed):
            source = "".join(new["source"]).rstrip("\n")
            if source != cell.source:
                cell.source, dirty = source, True
        if dirty:
            md.write_text(jupytext.writes(nb, fmt="md:myst"))
            changed.append(md)
        nb_path.write_text(notebook_json(md))
    return changed


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "check"
    if cmd == "sync":
        sync(sys.argv[2:])
    elif cmd == "format":
        for md in format_cells(sys.argv[2:]):
            print("formatted", md.relative_to(ROOT))
        sync(sys.argv[2:])
    elif cmd == "check":
        found = problems()
        print("\n".join(found) or "all chapters in sync")
        sys.exit(1 if found else 0)
    else:
        sys.exit("usage: python tools/chapters.py sync|format [chapter ...] | check")
