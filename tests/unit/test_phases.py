"""companion.phases (paper B, Theorem 2 and Lemmas 4-7; ch-three-phases): phase boundaries and invariance, the
imbalance drift, the chi-square flip probability, the growth rate, the Gauss-Newton spectrum, the initial event,
the burn-in and refinement rates, the failure table with McNemar's test, the linearised rate from the engine's
snapshots, paired slopes and planted modes, each against a hand computation, Monte Carlo or gd.run."""

import numpy as np
import pytest
import torch
from scipy import stats

from companion import device, gd, phases, relunet


def test_first_hit_and_invariance():
    it = np.arange(5)
    y = np.array([[3.0, 3.0], [2.0, 3.0], [0.5, 3.0], [0.4, 0.9], [0.6, 0.8]])
    assert phases.first_hit(y <= 1, it).tolist() == [2, 3]
    assert phases.first_hit(y <= 0.1, it).tolist() == [-1, -1]
    inv = phases.invariance(y, 1.0, it)
    assert inv.holds and inv.entered == 2 and inv.worst_after == pytest.approx(0.9)
    inv = phases.invariance(y, 0.55, it)  # member 0 enters at 2 and leaves at 4
    assert not inv.holds and inv.worst_after == pytest.approx(0.6)
    assert phases.invariance(y, 0.55, it, until=np.array([3, 3])).worst_after == pytest.approx(0.5)
    with pytest.raises(ValueError):
        phases.first_hit(y[:3] <= 1, it)


def test_imbalance_drift_matches_hand_computation():
    it = np.array([0, 1, 5])
    h = {
        "imbalance": np.array([[[0.0, 0.0]], [[0.01, -0.02]], [[0.0, 0.0]]]),
        "v": np.ones((3, 1, 2)),
        "w_norm": np.ones((3, 1, 2)),
        "error": np.ones((3, 1)),
    }
    out = phases.imbalance_drift(h, it, 0.1)
    assert out["pairs"] == 1
    assert out["paper"] == pytest.approx(0.02 / (0.01 * 2))
    assert out["lemma12"] == pytest.approx(0.02 / 0.01)


def test_chi2_flip_probability_matches_monte_carlo_and_small_d():
    # d = 2: chi_2 is Rayleigh, P(Z > R) = 1/2 - 1/(2 sqrt 2) ... check against direct quadrature and MC
    q = phases.chi2_flip_probability([1, 2, 6])
    rng = device.numpy_rng(3)
    for dd, qq in zip([1, 2, 6], q):
        z = rng.standard_normal(400_000)
        r = np.sqrt(rng.chisquare(dd, 400_000))
        assert abs((z > r).mean() - qq) < 5e-3
    assert q[0] == pytest.approx(0.25, abs=1e-9)  # P(Z1 > |Z2|) = 1/4
    p = phases.chi2_failure_probability([2, 4])
    assert np.all(p == 2 * phases.chi2_flip_probability([2, 4]) * (1 - phases.chi2_flip_probability([2, 4])))


def test_growth_rate_population_limit_and_device_check():
    d = 5
    a = relunet.unit_target(d, dtype=torch.float64, device="cpu")
    X, _ = relunet.gaussian_data(200_000, d, a, generator=device.generator(0))
    X = X.cpu()
    g = phases.growth_rate(X, a)
    assert torch.allclose(g, torch.full((2,), 0.5, dtype=g.dtype), atol=0.01)
    with pytest.raises(ValueError, match="dtype"):
        phases.growth_rate(X.float(), a)
    with pytest.raises(ValueError, match="meta"):
        phases.growth_rate(X, a.to("meta"))


def test_gauss_newton_spectrum_zero_modes_and_population_value():
    d = 3
    a = relunet.unit_target(d, dtype=torch.float64, device="cpu")
    W = torch.stack([a, -a]).unsqueeze(0)
    v = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    X, _ = relunet.gaussian_data(100_000, d, a, generator=device.generator(2))
    ev = phases.gauss_newton_spectrum(W, v, X.cpu())[0]
    assert ev.shape == (2 * (d + 1),)
    assert ev[:2].abs().max() < 1e-10  # the two rescaling directions
    assert ev[2] > 0.3
    with pytest.raises(ValueError):
        phases.gauss_newton_spectrum(W, v.float(), X.cpu())


def test_initial_event_and_phase1_invariants():
    it = np.arange(4)
    v = np.array([1.0, 1.05, 1.1, 1.2])[:, None, None] * np.ones((1, 1, 2))
    h = {"v": v, "w_norm": v.copy()}
    out = phases.phase1_invariants(h, it, 0.1, np.array([3]))
    assert out["lower"] == pytest.approx(1.0)
    assert out["upper"] == pytest.approx(max(v[t, 0, 0] / (2 * 1.1**t) for t in range(4)))
    W0 = np.ones((2, 2, 4)) / 2  # norms 1
    assert phases.initial_event(W0, np.array([[1.0, -1.0], [0.1, 1.0]]), 1.0).tolist() == [True, False]
    assert phases.initial_event(W0, np.array([[1.0, -1.0], [1.0, 1.0]]), np.array([1.0, 0.4])).tolist() == [True, False]


def test_burn_in_slope_ratio_and_prediction():
    sigma = np.repeat([1e-2, 1e-4, 1e-6], 4)
    T = 7 + 20 * np.log(1 / sigma) + np.tile([-1.0, 1.0, 0.5, -0.5], 3)
    f = phases.burn_in_slope(sigma, T, confidence=0.99)
    ref = stats.linregress(np.log(1 / sigma), T)
    assert f.value == pytest.approx(ref.slope) and f.intercept == pytest.approx(ref.intercept)
    half = stats.t.ppf(0.995, T.size - 2) * ref.stderr
    assert (f.low, f.high) == pytest.approx((ref.slope - half, ref.slope + half))
    g = phases.burn_in_slope(sigma, 2 * T, confidence=0.99)
    r = phases.slope_ratio(g, f, confidence=0.99)
    assert r.value == pytest.approx(2.0) and r.low < 2 < r.high and r.stderr > 0
    lo, hi = phases.predicted_burn_in_slope([0.5, 0.6], 0.1)
    assert lo == pytest.approx(1 / np.log1p(0.06)) and hi == pytest.approx(1 / np.log1p(0.05))
    with pytest.raises(ValueError):
        phases.burn_in_slope(np.ones(5), np.arange(5.0))


def test_refinement_rates_recover_a_geometric_rate():
    it = np.arange(0, 400, 5)
    err = np.stack([0.9**it, 0.95**it + 0 * it], 1)
    q, lo, hi, npts = phases.refinement_rates(it, err, low=1e-12, high=1e-2, confidence=0.99)
    assert q == pytest.approx([0.9, 0.95]) and np.all(npts >= 3)
    q, *_ = phases.refinement_rates(it, np.ones((it.size, 1)))
    assert np.isnan(q[0])  # no point in the window


def test_failure_table_and_mcnemar():
    agree = np.array([1, 1, 0, 0, 1], bool)
    fail = np.array([1, 0, 0, 1, 1], bool)
    assert phases.failure_table(agree, fail).tolist() == [[2, 1], [1, 1]]
    right_a = np.array([1, 0, 0, 0, 1, 1], bool)  # discordant: a only once, b only three times
    right_b = np.array([1, 1, 1, 1, 0, 1], bool)
    assert phases.mcnemar_exact(right_a, right_b) == pytest.approx(stats.binom.sf(2, 4, 0.5))
    assert phases.mcnemar_exact(right_a, right_a) == 1.0


def test_linearised_rate_from_the_engine_s_snapshots_matches_gd():
    from companion import gd

    d, n = 5, 200
    a = relunet.unit_target(d, dtype=torch.float64, device="cpu")
    X, Y = relunet.gaussian_data(n, d, a, generator=device.generator(3), device="cpu", dtype=torch.float64)
    W, v = relunet.theorem2_init(d, 3, 1e-2, generator=device.generator(6), device="cpu", dtype=torch.float64)
    f = relunet.make_loss_and_grad(X, Y)
    obs = {"error": lambda p, l, g: relunet.planted_error(p[0], p[1], a)}
    rec = np.arange(0, 1501, 5)
    ref = gd.run(f, [W, v], 1500, 0.1, record_at=rec, observers=obs)
    res = gd.run(f, [W, v], 1500, 0.1, record_at=rec, observers=obs, snapshot_at=range(0, 1500, 50))
    assert np.array_equal(res.iterations.numpy(), ref.iterations.numpy())
    assert torch.equal(res.history["error"], ref.history["error"])
    assert sorted(res.snapshots)[1] == 50 and res.snapshots[50][0].shape == (3, 2, d)
    lin = phases.linearised_rates(res.iterations, res.history["error"], res.snapshots, *res.params, X, a, 0.1,
                                  low=1e-10, high=1e-5)  # fmt: skip
    assert np.all(lin["points"] >= 3) and np.all(lin["h0"] > 0)
    assert np.all(np.abs(lin["q"] - lin["q_lin"]) < 1e-5)  # the linear map predicts GD's rate
    assert np.all(lin["q"] < 1)


def test_paired_slopes_cancel_the_offset_and_reject_bad_input():
    sig = np.array([1e-4, 1e-6, 1e-8])
    x = np.log(1 / sig)
    T = 20.0 * x[:, None] + np.array([[3.0, -7.0]])  # per-member offsets
    assert phases.paired_slopes(sig, T) == pytest.approx([20.0, 20.0])
    with pytest.raises(ValueError):
        phases.paired_slopes(sig, T[:2])
    with pytest.raises(ValueError):
        phases.paired_slopes(sig, -T)


def test_planted_modes_null_space_and_mode_rate_of_linear_decay():
    gen = device.generator(2)
    a = relunet.unit_target(4)
    X, Y = relunet.gaussian_data(400, 4, a, generator=gen)
    lam, U = phases.planted_modes(X, a)
    assert abs(lam[:2]).max() < 1e-10 and lam[2] > 0.05
    # a deviation along u_3 alone decays by 1 - mu lambda_3 per step under GD near the planted point
    W_star = torch.stack([a, -a]).unsqueeze(0)
    v_star = torch.tensor([[1.0, -1.0]], dtype=a.dtype)
    u3 = torch.as_tensor(U[:, 2], dtype=a.dtype)
    W0 = W_star + 1e-4 * u3[:8].view(1, 2, 4)
    v0 = v_star + 1e-4 * u3[8:].view(1, 2)
    res = gd.run(relunet.make_loss_and_grad(X, Y), [W0, v0], 400, 0.1, snapshot_at=range(0, 400, 20), progress=False)
    out = phases.mode_rates(res.snapshots, U[:, 2], a, W_star, v_star, low=1e-9, high=1e-3)
    assert out["q"][0] == pytest.approx(1 - 0.1 * lam[2], abs=1e-5)
    with pytest.raises(ValueError):
        phases.mode_rates(res.snapshots, U[:, 2], a, W_star, v_star, low=1e-3, high=1e-9)
