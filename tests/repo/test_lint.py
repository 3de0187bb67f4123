"""ruff (configured in pyproject.toml): the lint rules and the formatter hold on the whole repository."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_check():
    proc = subprocess.run([*RUFF, "check", "--output-format", "concise", "."], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = subprocess.run([*RUFF, "format", "--check", "."], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
