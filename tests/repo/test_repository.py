"""Repository habits: the product speaks of itself only; the package and the tests name chapters by label; every module
has an API page; one version; a licence."""

import re
import subprocess
import sys
from pathlib import Path

import tomllib

import companion

ROOT = Path(__file__).resolve().parents[2]
PROCESS_WORDS = re.compile(
    r"\bissue #?\d+|\bthe issue asks|\bthe lead\b|\bas agreed\b|\bhelper engineers?\b|"
    r"\bother engineers\b|\bUTC, as agreed\b",
    re.I,
)


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout.split()
    return [ROOT / f for f in out if not f.endswith((".ipynb", ".woff", ".js", ".png", ".bib")) and "_static" not in f]


def test_no_words_about_how_the_work_was_organised():
    hits = []
    for path in _tracked():
        if path.name == "test_repository.py" or not path.is_file():
            continue
        for i, line in enumerate(path.read_text(errors="ignore").splitlines(), 1):
            if PROCESS_WORDS.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert hits == [], "\n".join(hits)


CHAPTER_NUMBER = re.compile(r"\b(chapters?|ch\.?)\s+[0-9]", re.I)


def test_package_and_tests_name_chapters_by_label_not_number():
    """A chapter's number changes when the table of contents does; its label (``ch-rate``) does not."""
    hits = []
    for path in _tracked():
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in ("src", "tests") or path.suffix != ".py" or path.name == "test_repository.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if CHAPTER_NUMBER.search(line):
                hits.append(f"{rel}:{i}: {line.strip()[:100]}")
    assert hits == [], "\n".join(hits)


def test_every_public_module_has_an_api_page_in_the_generated_index():
    sys.path.insert(0, str(ROOT / "tools"))
    import api_index

    assert api_index.problems() == []


def test_one_version_and_a_licence():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in meta and "version" in meta["dynamic"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", companion.__version__)
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
