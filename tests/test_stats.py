"""companion.stats against direct scipy computations and simple references."""

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sst

from companion import stats


def test_wilson_and_loglog_match_scipy():
    lo, hi = stats.wilson_interval(7, 40, 0.99)
    ref = sst.binomtest(7, 40).proportion_ci(0.99, method="wilson")
    assert np.isclose(lo, ref.low) and np.isclose(hi, ref.high)
    x = np.array([1, 2, 4, 8, 16.0])
    y = 3 * x**-0.5 * np.array([1.01, 0.99, 1.02, 0.98, 1.0])
    fit = stats.loglog_slope(x, y, 0.99)
    res = sst.linregress(np.log(x), np.log(y))
    assert np.isclose(fit.slope, res.slope) and np.isclose(fit.high - fit.slope, sst.t.ppf(0.995, 3) * res.stderr)


def test_member_slopes_is_the_t_interval_of_per_member_slopes():
    rng = np.random.default_rng(0)
    x = np.logspace(0, 2, 12)
    Y = np.exp(rng.normal(0, 0.05, (12, 9))) * x[:, None] ** rng.normal(-0.5, 0.02, 9)
    est = stats.member_slopes(x, Y, 0.99, x_min=2.0)
    sel = x >= 2.0
    s = np.array([sst.linregress(np.log(x[sel]), np.log(Y[sel, e])).slope for e in range(9)])
    ci = sst.t.interval(0.99, 8, loc=s.mean(), scale=sst.sem(s))
    assert np.isclose(est.value, s.mean()) and np.allclose([est.low, est.high], ci)
    with pytest.raises(ValueError, match="shape"):
        stats.member_slopes(x, Y[:5])
    with pytest.raises(ValueError, match="positive"):
        stats.member_slopes(x, -Y)


def test_semilog_slope_matches_linregress():
    t = np.arange(20.0)
    y = 5 * 0.9**t * np.exp(np.random.default_rng(1).normal(0, 0.01, 20))
    fit = stats.semilog_slope(t, y, 0.95)
    res = sst.linregress(t, np.log(y))
    assert np.isclose(fit.slope, res.slope) and fit.contains(np.log(0.9))
    with pytest.raises(ValueError):
        stats.semilog_slope(t, -y)


def test_exp_decay_binomial_recovers_the_rate_and_its_mle():
    k = np.arange(2, 9.0)
    N = np.full(7, 20000)
    F = np.random.default_rng(2).binomial(N, 2.0 ** (1 - k))
    est = stats.exp_decay_binomial(k, F, N, 0.99)
    assert est.contains(np.log(2)) and not est.contains(1.0)

    # the MLE solves the score equations sum_k (F_k - N_k p_k) / (1 - p_k) * (1, -k) = 0 (Poisson-binomial form)
    logC = np.log(np.sum(F / (1 - 0)) / np.sum(N * np.exp(-est.value * k)))  # a rough start for C only
    res = optimize.root(
        lambda th: [
            np.sum((F - N * np.exp(th[0] - th[1] * k)) / (1 - np.exp(th[0] - th[1] * k)) * g) for g in (np.ones_like(k), -k)
        ],
        [logC, est.value],
    )
    assert res.success and np.isclose(est.value, res.x[1], atol=1e-5)
    with pytest.raises(ValueError, match="no failures"):
        stats.exp_decay_binomial(k, 0 * F, N)


def _crossing_loop(p, x, level=0.5):
    p = np.maximum.accumulate(p)
    hit = np.flatnonzero(p >= level)
    if hit.size == 0:
        return np.inf
    j = hit[0]
    if j == 0:
        return x[0]
    t = (level - p[j - 1]) / (p[j] - p[j - 1])
    return np.exp(np.log(x[j - 1]) + t * (np.log(x[j]) - np.log(x[j - 1])))


def test_crossing_matches_a_loop_and_bootstrap_is_reproducible():
    rng = np.random.default_rng(3)
    x = np.array([1, 2, 4, 8, 16.0])
    P = rng.uniform(0, 1, (200, 5))
    assert np.allclose(stats.crossing(P, x), [_crossing_loop(p, x) for p in P])
    a = stats.bootstrap_crossing([5, 20, 60, 90, 99], 100, x, rng=np.random.default_rng(0))
    b = stats.bootstrap_crossing([5, 20, 60, 90, 99], 100, x, rng=np.random.default_rng(0))
    assert a == b and a.low <= a.value <= a.high
    with pytest.raises(ValueError, match="rng"):
        stats.bootstrap_crossing([1, 2, 3, 4, 5], 10, x)


def test_bootstrap_crossing_exponent_recovers_a_linear_law():
    rng = np.random.default_rng(0)
    sizes, ratios = np.array([10, 20, 40, 80.0]), np.array([1, 2, 4, 8, 16.0])
    p = 1 / (1 + np.exp(-3 * (np.log(ratios) - np.log(3))))  # crossing at n/d = 3 for every d
    counts = rng.binomial(400, np.broadcast_to(p, (4, 5)))
    est = stats.bootstrap_crossing_exponent(counts, 400, ratios, sizes, rng=np.random.default_rng(1), confidence=0.99)
    point = np.log(stats.crossing(counts / 400, ratios) * sizes)
    assert np.isclose(est.value, np.polyfit(np.log(sizes), point, 1)[0])
    assert est.contains(1.0) and not est.contains(2.0) and not est.contains(0.0)
    with pytest.raises(ValueError, match="shape"):
        stats.bootstrap_crossing_exponent(counts[:, :3], 400, ratios, sizes, rng=rng)
