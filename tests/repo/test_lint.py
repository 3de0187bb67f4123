"""ruff (configured in pyproject.toml): the lint rules and the formatter hold on the whole repository; the shell scripts
parse."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_check():
    pytest.importorskip("ruff", reason="ruff comes with requirements.txt (the development set), not with the package")
    proc = subprocess.run([*RUFF, "check", "--output-format", "concise", "."], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    pytest.importorskip("ruff", reason="ruff comes with requirements.txt (the development set), not with the package")
    proc = subprocess.run([*RUFF, "format", "--check", "."], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


SCRIPTS = sorted([*ROOT.glob("benchmarks/**/*.sh"), *ROOT.glob("tools/**/*.sh"), ROOT / ".ci" / "run"])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_script_parses_and_is_executable(script):
    """``bash -n`` (syntax only, nothing runs); the GPU scripts are run as ``bash script`` but kept executable too."""
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert script.stat().st_mode & 0o111, f"{script.relative_to(ROOT)} is not executable"
