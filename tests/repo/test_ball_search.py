"""tools/ball_search.py: the fixed-point search against the converged supremum, quoted by the retirement of the
whole-ball Gram rows of ``ch-parameter-ball``."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import ball_search  # noqa: E402

from companion import widenet as wn  # noqa: E402


@pytest.fixture
def float64():
    """float64 as the default dtype for one test, the previous default restored after it."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_one_point_compares_the_search_with_a_stationary_supremum(float64):
    sweep, sup, stat, steps, _ = ball_search.point(16, 1.0, 0, 1, 400, wn.Net("fc", "tanh", 1.0))
    assert sweep.shape == sup.shape == (8,)
    assert stat <= 1e-4 and 0 < steps <= 400
    assert np.all(sweep <= sup * (1 + 1e-9))  # the supremum is at least what the first-order search finds here


def test_the_report_prints_both_exponents(capsys):
    ball_search.main(["--m-radius", "64", "--points", "3", "--widths", "8", "16", "32", "--steps", "40"])
    out = capsys.readouterr().out
    assert "exponent in D of the supremum" in out and "exponent in m of the sweep" in out
