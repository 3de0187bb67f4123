"""tools/derivative_study.py: the seed study of the feature-derivative rows of ``ch-parameter-ball``."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import derivative_study as study  # noqa: E402


def test_the_values_are_those_of_the_chapters_sweep_point(monkeypatch):
    """Switching off the measurements the rows do not use moves no draw: the values equal those of the chapter's
    full ``sweep_point`` call at the same seeds."""
    from companion import widenet as wn

    monkeypatch.delenv("COMPANION_SEED", raising=False)
    c = study.CFG["quick"]
    got, conv = study.values(1, "quick", c.lanczos_iters, widths=(64,))
    full = wn.sweep_point(
        64, c.H_width, c.D, n=c.n, d=c.d, members=c.members, net=wn.Net("res", c.act, c.c_res),
        data_seed=1, init_seed=1 + 1 + 64, iters=c.lanczos_iters, derivatives=True,
    )  # fmt: skip
    np.testing.assert_array_equal(got["res", "deriv_x"][0], full["deriv_x"])
    np.testing.assert_array_equal(got["res", "deriv_z"][0], full["deriv_z"])
    assert got["fc", "deriv_x"].shape == (1, c.members) and conv["fc"].shape == (1, c.members)
    assert np.all(got["fc", "deriv_x"] < got["fc", "deriv_z"])
    assert "COMPANION_SEED" not in os.environ


def test_summary_of_an_exact_power_law():
    widths = np.array([64.0, 128.0, 256.0, 512.0])
    rng = np.random.default_rng(0)
    runs = rng.uniform(1, 2, (3, 1, 8)) * widths[None, :, None] ** -0.5 * np.exp(rng.normal(0, 1e-3, (3, 4, 8)))
    s = study.summary(widths, runs, -0.5, 0.0)
    assert abs(s["mean"] + 0.5) < 1e-2 and s["misses"] == 0 and s["accepts_control"] == 0
    assert 0 < s["margin"] < 1e-2 and np.allclose(s["local"], -0.5, atol=1e-2)


@pytest.mark.parametrize("argv, match", [(["--offsets", "3", "3"], "FIRST < STOP"), (["--iters", "0"], "positive")])
def test_bad_arguments_are_refused(argv, match):
    with pytest.raises(ValueError, match=match):
        study.main(argv)
