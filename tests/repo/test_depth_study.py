"""tools/depth_study.py: the seed study of the depth rows of ``ch-parameter-ball``."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import depth_study as study  # noqa: E402

DEPTHS = np.array([2.0, 4.0, 8.0, 16.0])


def test_the_values_carry_the_depth_factor_and_repeat(monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    entry, first = study.values(1, "quick", depths=(2, 4))
    assert entry.shape == first.shape == (2, 8)
    assert np.all(np.isfinite(entry)) and np.all(entry > 0) and np.all(first > 0)
    again, _ = study.values(1, "quick", depths=(2, 4))
    np.testing.assert_array_equal(again, entry)


def test_summary_of_a_flat_and_of_a_growing_constant():
    rng = np.random.default_rng(0)
    base = rng.uniform(1, 2, (5, 1, 8)) * np.exp(rng.normal(0, 1e-2, (5, 4, 8)))
    flat = study.summary(DEPTHS, base)
    assert abs(flat["mean"]) < 0.05 and flat["fails"] == 0 and flat["accepts_control"] == 0
    grows = study.summary(DEPTHS, base * DEPTHS[None, :, None] ** 2)  # a drift without the 1/H²
    assert grows["fails"] == 1 and grows["accepts_control"] == 1


def test_verdicts_follow_the_chapters_tests():
    rng = np.random.default_rng(1)
    noise = np.exp(rng.normal(0, 1e-2, (4, 8)))
    grows = np.exp(0.1 * DEPTHS)[:, None] * noise  # fully connected: log A = 0.1
    consts = {("fc", slug): grows for slug in study.PANELS}
    consts |= {("res", slug): noise for slug in study.PANELS}
    consts |= {("res", "gram-entry"): noise, ("res", "gram-first-order"): noise}
    out = study.verdicts(DEPTHS, consts)
    assert len(out) == 10 and all(holds and rejected for _, holds, rejected in out.values())
    consts["res", "jacobian"] = grows  # a residual constant that grows like the fully connected one
    f, holds, rejected = study.verdicts(DEPTHS, consts)["depth-res-jacobian"]
    assert not holds and not rejected and abs(f.value - 0.1) < 0.01


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="FIRST < STOP"):
        study.main(["--offsets", "5", "2"])
    with pytest.raises(ValueError, match="two depths"):
        study.main(["--depths", "4"])
