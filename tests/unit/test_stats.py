"""companion.stats against direct scipy computations and simple references."""

import dataclasses
import doctest

import numpy as np
import pytest
import torch
from scipy import optimize
from scipy import stats as sst

from companion import stats


def test_docstring_examples():
    result = doctest.testmod(stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0


def test_every_public_name_is_exported_and_documented():
    public = {n for n, v in vars(stats).items() if callable(v) and not n.startswith("_") and v.__module__ == stats.__name__}
    assert public == set(stats.__all__)
    for name in stats.__all__:
        doc = getattr(stats, name).__doc__
        assert "Parameters" in doc and (name in ("Estimate", "LawFit") or "Returns" in doc), name  # records
        assert ":ref:`ch-" in doc and "Chapter " not in doc, name


def test_wilson_matches_scipy_for_one_count():
    rate = stats.wilson(7, 40, confidence=0.99)
    ref = sst.binomtest(7, 40).proportion_ci(0.99, method="wilson")
    assert isinstance(rate, stats.Estimate) and isinstance(rate.low, float)
    assert np.isclose(rate.low, ref.low) and np.isclose(rate.high, ref.high) and rate.value == 7 / 40
    assert (rate.successes, rate.trials, rate.confidence, rate.method) == (7, 40, 0.99, "Wilson")
    assert rate.contains(0.2) is True and rate.contains(0.5) is False and rate.contains(float("nan")) is False
    assert str(rate) == f"7/40 = 0.175 [{ref.low:.3f}, {ref.high:.3f}] (99% Wilson)"


def test_wilson_is_vectorised_and_elementwise():
    k, n = np.array([0, 3, 40]), np.array([40, 40, 40])
    rates = stats.wilson(torch.tensor(k), 40, confidence=0.95)
    assert rates.value.shape == rates.low.shape == rates.high.shape == rates.successes.shape == rates.trials.shape == (3,)
    for i in range(3):
        one = stats.wilson(int(k[i]), int(n[i]), confidence=0.95)
        assert (rates.value[i], rates.low[i], rates.high[i]) == (one.value, one.low, one.high)
    assert rates.contains(0.15).tolist() == [False, True, False]
    assert rates.contains(np.array([0.0, 0.5, 1.0])).tolist() == [True, False, True]
    assert str(rates).count("(95% Wilson)") == 1 and str(rates).startswith("0/40 = 0.000 [0.000, ")
    with pytest.raises(ValueError):  # frozen, and its arrays are its own and read-only
        rates.low[0] = 0.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        rates.low = 0.0
    with pytest.raises(ValueError, match="successes"):
        stats.wilson(5, 3)
    with pytest.raises(ValueError, match="confidence"):
        stats.wilson(1, 3, confidence=1.0)


def test_estimate_text_and_checks():
    est = stats.Estimate(-0.5, -0.55, -0.45, 0.999, "t-interval")
    assert str(est) == "-0.500 [-0.550, -0.450] (99.9% t-interval)" and f"{est:.1f}" == "-0.5 [-0.6, -0.5] (99.9% t-interval)"
    assert str(stats.Estimate(1.0, 0.99999, 1.00002, 0.99)) == "1.000000 [0.999990, 1.000020] (99%)"  # narrow: more digits
    assert str(stats.Estimate(0.0, 0.0, 0.0, 0.9, "exact")) == "0.000 [0.000, 0.000] (90% exact)"
    with pytest.raises(ValueError, match="confidence"):
        stats.Estimate(0.0, -1.0, 1.0, 95)
    with pytest.raises(ValueError, match="shape"):
        stats.Estimate(np.zeros(2), np.zeros(3), np.zeros(2), 0.95)
    with pytest.raises(ValueError, match="low end exceeds"):
        stats.Estimate(-2.0, -1.6, -2.5, 0.99)  # the ends of 1/x taken in the wrong order
    assert stats.Estimate(np.nan, np.nan, np.nan, 0.9).contains(0.0) is False


def test_reciprocal_swaps_the_ends_and_keeps_the_coverage():
    """1/x is decreasing on each sign: x in [lo, hi] iff 1/x in [1/hi, 1/lo], so the reciprocal keeps the level."""
    inv = stats.Estimate(-0.5, -0.6, -0.4, 0.99, "t-interval").reciprocal()
    assert (inv.value, inv.low, inv.high) == pytest.approx((-2.0, -2.5, 1 / -0.6)) and inv.confidence == 0.99
    assert inv.method == "reciprocal of t-interval" and inv.contains(-2.2) and not inv.contains(-1.6)
    vec = stats.Estimate(np.array([2.0, -4.0]), np.array([1.0, -5.0]), np.array([4.0, -2.0]), 0.9).reciprocal("inv")
    assert np.allclose(vec.low, [0.25, -0.5]) and np.allclose(vec.high, [1.0, -0.2]) and vec.method == "inv"
    with pytest.raises(ValueError, match="contains 0"):
        stats.Estimate(0.1, -0.1, 0.3, 0.9).reciprocal()


def test_mean_is_the_t_interval():
    x = np.random.default_rng(4).normal(1.0, 2.0, (50, 3))
    est = stats.mean(x, confidence=0.99)
    lo, hi = sst.t.interval(0.99, 49, loc=x.mean(0), scale=sst.sem(x, axis=0))
    assert np.allclose(est.value, x.mean(0)) and np.allclose(est.low, lo) and np.allclose(est.high, hi)
    assert np.allclose(est.stderr, sst.sem(x, axis=0)) and est.method == "t-interval"
    one = stats.mean(x[:, 0])
    assert isinstance(one.value, float) and one.contains(x[:, 0].mean())
    with pytest.raises(ValueError, match="two samples"):
        stats.mean(x[:1])


def test_slope_fits_match_linregress():
    x = np.array([1, 2, 4, 8, 16.0])
    y = 3 * x**-0.5 * np.array([1.01, 0.99, 1.02, 0.98, 1.0])
    fit = stats.loglog_slope(x, y, 0.99)
    res = sst.linregress(np.log(x), np.log(y))
    assert np.isclose(fit.value, res.slope) and np.isclose(fit.high - fit.value, sst.t.ppf(0.995, 3) * res.stderr)
    assert (fit.intercept, fit.stderr) == pytest.approx((res.intercept, res.stderr)) and fit.method == "t-interval"
    line = stats.linear_slope(np.log(x), np.log(y), 0.99)
    assert (line.value, line.low, line.high, line.intercept) == (fit.value, fit.low, fit.high, fit.intercept)
    t = torch.logspace(0, 3, 20, dtype=torch.float64)
    assert stats.loglog_slope(t, 3 * t**-0.5).value == pytest.approx(-0.5, abs=1e-12)
    with pytest.raises(ValueError, match="positive"):
        stats.loglog_slope([1, 2, 3], [1, -1, 2])
    with pytest.raises(ValueError, match="three"):
        stats.linear_slope([1, 2], [1, 2])


def test_member_slopes_semilog_is_the_t_interval_of_per_member_semilog_slopes():
    """The depth rates of ch-parameter-ball: one geometric rate per member, a t-interval over members."""
    rng = np.random.default_rng(1)
    H = np.array([2.0, 4.0, 8.0, 16.0])
    Y = np.exp(rng.normal(0.2, 0.05, 8) * H[:, None] + rng.normal(0, 0.1, (4, 8)))
    est = stats.member_slopes(H, Y, 0.999, semilog=True)
    s = np.array([sst.linregress(H, np.log(Y[:, e])).slope for e in range(8)])
    ci = sst.t.interval(0.999, 7, loc=s.mean(), scale=sst.sem(s))
    assert np.isclose(est.value, s.mean()) and np.allclose([est.low, est.high], ci)
    pooled = stats.semilog_slope(np.repeat(H, 8), Y.ravel(), 0.999)
    assert np.isclose(pooled.value, est.value)  # the same mean slope (same abscissae for every member) ...
    assert est.high - est.low > pooled.high - pooled.low  # ... with the spread across members, not across points
    assert np.isclose(stats.member_slopes(-H, Y, semilog=True).value, -est.value)  # any finite abscissae
    with pytest.raises(ValueError, match="semilog"):
        stats.member_slopes(H, -Y, semilog=True)


def test_member_slopes_is_the_t_interval_of_per_member_slopes():
    rng = np.random.default_rng(0)
    x = np.logspace(0, 2, 12)
    Y = np.exp(rng.normal(0, 0.05, (12, 9))) * x[:, None] ** rng.normal(-0.5, 0.02, 9)
    est = stats.member_slopes(x, Y, 0.99, x_min=2.0)
    sel = x >= 2.0
    s = np.array([sst.linregress(np.log(x[sel]), np.log(Y[sel, e])).slope for e in range(9)])
    ci = sst.t.interval(0.99, 8, loc=s.mean(), scale=sst.sem(s))
    assert np.isclose(est.value, s.mean()) and np.allclose([est.low, est.high], ci)
    assert np.isclose(est.stderr, sst.sem(s)) and est.method == "t-interval over members"
    with pytest.raises(ValueError, match="shape"):
        stats.member_slopes(x, Y[:5])
    with pytest.raises(ValueError, match="positive"):
        stats.member_slopes(x, -Y)
    with pytest.raises(ValueError, match="all be equal"):
        stats.member_slopes(np.ones(12), Y)


def test_semilog_slope_matches_linregress():
    t = np.arange(20.0)
    y = 5 * 0.9**t * np.exp(np.random.default_rng(1).normal(0, 0.01, 20))
    fit = stats.semilog_slope(t, y, 0.95)
    res = sst.linregress(t, np.log(y))
    assert np.isclose(fit.value, res.slope) and np.isclose(fit.intercept, res.intercept) and fit.contains(np.log(0.9))
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
    assert res.success and np.isclose(est.value, res.x[1], atol=1e-5) and np.isclose(est.intercept, res.x[0], atol=1e-4)
    assert est.high - est.value == pytest.approx(sst.norm.ppf(0.995) * est.stderr) and est.method == "Wald interval"
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


def test_wilson_known_value():
    rate = stats.wilson(50, 100)
    assert rate.low == pytest.approx(0.4038, abs=1e-4) and rate.high == pytest.approx(0.5962, abs=1e-4)


def test_loglog_slope_recovers_power():
    x = torch.logspace(0, 3, 20, dtype=torch.float64)
    fit = stats.loglog_slope(x, 3 * x**-0.5)
    assert fit.value == pytest.approx(-0.5, abs=1e-12) and fit.contains(-0.5)


def test_crossing_law_fit_accepts_the_true_law_and_rejects_the_other():
    rng = np.random.default_rng(0)
    sizes, ratios = np.array([8, 16, 32, 64, 128.0]), np.array([0.5, 1, 2, 2.5, 3, 3.5, 4, 6.0])
    centre = 2.7 + 8 / sizes  # n_50 = 2.7 d + 8: affine
    p = 1 / (1 + np.exp(-12 * (np.log(ratios) - np.log(centre[:, None]))))
    counts = rng.binomial(2000, p)
    linear = stats.crossing_law_fit(counts, 2000, ratios, sizes, rng=np.random.default_rng(1))
    dlogd = stats.crossing_law_fit(counts, 2000, ratios, sizes, "dlogd", rng=np.random.default_rng(1))
    assert linear.p_value > 0.01 and dlogd.p_value < 0.01 and linear.dof == 3
    assert linear.slope.low > 0 and linear.slope.contains(linear.slope.value)
    weights = 1 / linear.scale**2
    fit = np.polynomial.polynomial.polyfit(sizes, linear.points, 1, w=np.sqrt(weights))
    assert np.allclose([linear.slope.intercept, linear.slope.value], fit)
    with pytest.raises(ValueError, match="law"):
        stats.crossing_law_fit(counts, 2000, ratios, sizes, "quadratic", rng=rng)
    with pytest.raises(ValueError, match="rng"):
        stats.crossing_law_fit(counts, 2000, ratios, sizes)
    with pytest.raises(ValueError, match="never reach"):
        stats.crossing_law_fit(0 * counts, 2000, ratios, sizes, rng=rng)


def test_clopper_pearson_covers_at_least_its_level_where_wilson_does_not():
    """Exact coverage by enumeration over k ~ Binomial(n, p): Clopper-Pearson never below the level; Wilson below it
    at n p of order one (the regime of the rare failures of ch-failures)."""
    n, level = 700, 1 - 0.01 / 7
    k = np.arange(n + 1)
    cp, wi = stats.clopper_pearson(k, n, level), stats.wilson(k, n, level)
    for p in (1e-4, 1.03e-3, 5e-3, 0.05, 0.25):
        pmf = sst.binom.pmf(k, n, p)
        assert pmf[(cp.low <= p) & (p <= cp.high)].sum() >= level - 1e-12
    pmf = sst.binom.pmf(k, n, 1.03e-3)
    assert pmf[(wi.low <= 1.03e-3) & (1.03e-3 <= wi.high)].sum() < level
    assert stats.clopper_pearson(0, 10).low == 0.0 and stats.clopper_pearson(10, 10).high == 1.0
    with pytest.raises(ValueError):
        stats.clopper_pearson(3, 2)
    with pytest.raises(ValueError):
        stats.clopper_pearson(1, 2, confidence=1.0)
