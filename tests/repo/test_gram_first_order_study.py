"""tools/gram_first_order_study.py: the seed study quoted by the retirement of the largest-entry Gram row of
``ch-parameter-ball``."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gram_first_order_study as study  # noqa: E402


def test_the_values_are_the_chapters_and_the_rms_lies_below_the_largest(monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    top, rms = study.values(1, "quick")
    assert top.shape == rms.shape == (4, 8)
    assert np.all(rms <= top) and np.all(rms * np.sqrt(36) >= top)
    assert "COMPANION_SEED" not in os.environ  # the offset does not leak into the process
    again, _ = study.values(1, "quick")
    np.testing.assert_array_equal(again, top)


def test_summary_of_an_exact_power_law():
    widths = np.array([64.0, 128.0, 256.0, 512.0])
    rng = np.random.default_rng(0)
    runs = rng.uniform(1, 2, (3, 1, 8)) * widths[None, :, None] ** -0.5 * np.exp(rng.normal(0, 1e-3, (3, 4, 8)))
    s = study.summary(widths, runs)
    assert abs(s["mean"] + 0.5) < 1e-2 and s["misses"] == 0 and s["accepts_control"] == 0
    assert np.allclose(s["local"], -0.5, atol=1e-2)


def test_bad_offsets_are_refused():
    with pytest.raises(ValueError, match="FIRST < STOP"):
        study.main(["--offsets", "3", "3"])
