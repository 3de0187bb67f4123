"""tools/depth_gram_study.py: the seed study of the residual depth Gram rows of ``ch-parameter-ball``."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import depth_gram_study as study  # noqa: E402


def test_the_values_carry_the_depth_factor_and_repeat(monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    entry, first = study.values(1, "quick")
    assert entry.shape == first.shape == (3, 8)
    assert np.all(np.isfinite(entry)) and np.all(entry > 0) and np.all(first > 0)
    again, _ = study.values(1, "quick")
    np.testing.assert_array_equal(again, entry)


def test_summary_of_a_flat_and_of_a_growing_constant():
    depths = np.array([2.0, 4.0, 8.0, 16.0])
    rng = np.random.default_rng(0)
    base = rng.uniform(1, 2, (5, 1, 8)) * np.exp(rng.normal(0, 1e-2, (5, 4, 8)))
    flat = study.summary(depths, base)
    assert abs(flat["mean"]) < 0.05 and flat["fails"] == 0 and flat["accepts_control"] == 0
    grows = study.summary(depths, base * depths[None, :, None] ** 2)  # a drift without the 1/H²
    assert grows["fails"] == 1 and grows["accepts_control"] == 1


def test_bad_offsets_are_refused():
    with pytest.raises(ValueError, match="FIRST < STOP"):
        study.main(["--offsets", "5", "2"])
