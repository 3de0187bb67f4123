"""Keep the chapters' paired notebooks in sync: ``python tools/chapters.py sync|check``.

The MyST-Markdown ``book/**/*.md`` jupytext files are the source of truth. ``sync`` writes each paired
``.ipynb`` (no outputs) and rewrites the Colab install cell with the repository URL from ``_config.yml``
(the one place it is kept); ``check`` exits non-zero when a pair has drifted or a URL disagrees.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jupytext
import yaml

ROOT = Path(__file__).resolve().parents[1]
INSTALL_RE = re.compile(r'"companion @ git\+(?P<url>[^"]+)"')


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


def sync() -> None:
    url = repository_url()
    for md in chapters():
        text = md.read_text()
        new = INSTALL_RE.sub(f'"companion @ git+{url}"', text)
        if new != text:
            md.write_text(new)
        md.with_suffix(".ipynb").write_text(notebook_json(md))
        print("synced", md.relative_to(ROOT))


def problems() -> list[str]:
    url, out = repository_url(), []
    for md in chapters():
        rel = md.relative_to(ROOT)
        nb = md.with_suffix(".ipynb")
        if not nb.exists():
            out.append(f"{rel}: paired notebook missing")
        elif json.loads(nb.read_text()) != json.loads(notebook_json(md)):
            out.append(f"{rel}: paired .ipynb out of sync (run python tools/chapters.py sync)")
        urls = install_urls(md)
        if urls != [url]:
            out.append(f"{rel}: Colab install cell must install from {url}, found {urls}")
    return out


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "check"
    if cmd == "sync":
        sync()
    elif cmd == "check":
        found = problems()
        print("\n".join(found) or "all chapters in sync")
        sys.exit(1 if found else 0)
    else:
        sys.exit("usage: python tools/chapters.py sync|check")
