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
    np.testing.assert_array_equal(got["res", "deriv_x_layers"][0], full["deriv_x_layers"])
    assert got["res", "deriv_x_layers"].shape == (1, c.members, c.H_width)
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


def test_the_values_at_init_are_the_packages_at_theta0(monkeypatch):
    """At θ0 the per-layer values are feature_derivative_norms on the sweep's own draws (no step into the ball),
    and they differ from those at the ball's point."""
    import torch
    from chapter_config import parameter_ball_draws

    from companion import widenet as wn

    monkeypatch.delenv("COMPANION_SEED", raising=False)
    c = study.CFG["quick"]
    init = study.values_at_init(2, "quick", c.lanczos_iters, widths=(64,))
    params, X, _ = parameter_ball_draws(c, 64, c.H_width, offset=2, init_seed=c.seed + 1 + 64)
    want = wn.feature_derivative_norms(
        params, X, wn.Net("fc", c.act, c.c_res), iters=c.lanczos_iters, generator=torch.Generator().manual_seed(2)
    )
    np.testing.assert_array_equal(init["fc", "deriv_x_layers"][0], want["x"].numpy())
    ball, _ = study.values(2, "quick", c.lanczos_iters, widths=(64,))
    assert not np.allclose(init["fc", "deriv_x_layers"], ball["fc", "deriv_x_layers"], rtol=1e-6, atol=0)
    np.testing.assert_allclose(init["fc", "deriv_x_layers"], ball["fc", "deriv_x_layers"], rtol=0.2)


def test_layer_summary_of_two_power_laws():
    """A first layer like m^-1/2 and a second three times larger like m^-0.6: their exponents, the second is the
    largest everywhere, and the ratio falls like m^-0.1."""
    widths = np.array([64.0, 128.0, 256.0, 512.0])
    rng = np.random.default_rng(1)
    noise = np.exp(rng.normal(0, 1e-3, (5, 4, 8, 2)))
    law = np.stack([widths**-0.5, 3 * 64**0.1 * widths**-0.6], -1)  # (W, H), layer 2 / layer 1 = 3 at m = 64
    s = study.layer_summary(widths, law[None, :, None, :] * noise)
    assert np.allclose(s["mean"], [-0.5, -0.6], atol=2e-3) and s["largest"] == [0.0, 1.0]
    assert np.allclose(s["local"], [[-0.5] * 3, [-0.6] * 3], atol=5e-3)
    assert np.allclose(s["ratio"], 3 * (widths / 64) ** -0.1, rtol=5e-3)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--offsets", "3", "3"], "FIRST < STOP"),
        (["--iters", "0"], "positive"),
        (["--widths", "64", "128"], "three increasing"),
        (["--widths", "128", "64"], "three increasing"),
    ],
)
def test_bad_arguments_are_refused(argv, match):
    with pytest.raises(ValueError, match=match):
        study.main(argv)
