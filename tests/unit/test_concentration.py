"""Unit tests of companion.concentration (paper B, Theorem 10 and Lemma 11; ch-uniform-concentration)."""

import math

import numpy as np
import pytest
import torch

from companion import concentration as cc
from companion import population, relunet

DT = torch.float64


def _X(gen, n, d):
    return torch.randn(n, d, generator=gen, dtype=DT)


def test_empirical_moment_matches_definition_and_its_mean(gen):
    X = _X(gen, 50, 4)
    u, w = cc.random_pairs(3, 4, generator=gen, like=X)
    M = cc.empirical_gate_moment(X, u, w)
    for b in range(3):
        ref = sum(float((x @ u[b] >= 0) and (x @ w[b] >= 0)) * torch.outer(x, x) for x in X) / 50
        assert torch.allclose(M[b], ref, atol=1e-14)
    assert torch.allclose(cc._moments(X, u, w, None), M, atol=1e-15)  # the pair-by-pair path for large data
    big = _X(gen, 400_000, 4)
    assert (cc.empirical_gate_moment(big, u, w) - population.gate_second_moment(u, w)).abs().max() < 0.01


def test_deviation_is_the_operator_norm(gen):
    X = _X(gen, 30, 5)
    u, w = cc.random_pairs(4, 5, generator=gen, like=X)
    diff = cc.empirical_gate_moment(X, u, w) - population.gate_second_moment(u, w)
    assert torch.allclose(cc.deviation(X, u, w), torch.linalg.matrix_norm(diff, ord=2), rtol=1e-12)


def test_search_is_a_certified_monotone_lower_bound(gen):
    X = _X(gen, 60, 6)
    res = cc.search_sup(X, initial=32, chains=4, proposals=4, rounds=6, generator=gen)
    tr = res["trace"]
    assert res["evaluations"] == 32 + 4 * 4 * 6 == tr.numel()
    assert torch.all(tr[1:] >= tr[:-1])
    assert math.isclose(res["value"], float(tr[-1]))
    exact = float(cc.deviation(X, res["u"][None], res["w"][None])[0])  # the value is attained at the pair
    assert math.isclose(res["value"], exact, rel_tol=1e-12)
    assert res["value"] >= float(tr[31])  # never below its random start


def test_deviation_shrinks_with_n(gen):
    d = 5
    small = cc.search_sup(_X(gen, 25, d), initial=64, chains=2, proposals=4, rounds=4, generator=gen)["value"]
    large = cc.search_sup(_X(gen, 2500, d), initial=64, chains=2, proposals=4, rounds=4, generator=gen)["value"]
    assert large < small / 3  # ~ sqrt(100) = 10 in theory


def _state(gen, d=6, E=3, scale=0.3):
    a = relunet.unit_target(d, dtype=DT, device="cpu")
    W = torch.stack([a, -a]).expand(E, 2, d) + scale * torch.randn(E, 2, d, generator=gen, dtype=DT)
    v = torch.tensor([1.0, -1.0], dtype=DT).expand(E, 2) * (1 + 0.1 * torch.rand(E, 2, generator=gen, dtype=DT))
    return W.contiguous(), v.contiguous(), a


def test_lemma11_integral_identity_and_ratio_bound(gen):
    """The proof's identity: grad gap = v1 [∫(M̂−M)(a + t h1, w1) dt h1 − ∫(M̂−M)(−a + t h2, w1) dt h2]."""
    W, v, a = _state(gen)
    X = _X(gen, 400, 6)
    out = cc.gradient_gap_ratio(W, v, X, a)
    _, gW_emp, _ = relunet.loss_and_gradient_wv(W, v, X, X @ a)
    gW_pop, _ = population.gradient(W, v, a)
    torch.testing.assert_close(out["difference"], gW_emp - gW_pop, rtol=0, atol=0)
    torch.testing.assert_close(out["difference"].norm(dim=-1), out["gap"], rtol=0, atol=0)
    T = 2001
    t = (torch.arange(T, dtype=DT) + 0.5) / T  # midpoint rule
    for e in range(W.shape[0]):
        h1 = v[e, 0] * W[e, 0] - a
        h2 = v[e, 1].abs() * W[e, 1] + a
        w1 = W[e, 0].expand(T, -1)
        D1 = cc.empirical_gate_moment(X, a + t[:, None] * h1, w1) - population.gate_second_moment(a + t[:, None] * h1, w1)
        D2 = cc.empirical_gate_moment(X, -a + t[:, None] * h2, w1) - population.gate_second_moment(-a + t[:, None] * h2, w1)
        pred = v[e, 0] * (D1.mean(0) @ h1 - D2.mean(0) @ h2)
        assert torch.allclose(gW_emp[e, 0] - gW_pop[e, 0], pred, atol=2e-3 * pred.norm())
    path = cc.path_deviation(W, v, X, a, points=65)
    assert torch.all(out["ratio"] <= 1.05 * path)


@pytest.mark.parametrize("d", [3, 40])
def test_segment_quadrature_in_three_coefficients_is_the_dense_quadrature(gen, d):
    """segment_integrals sums M(p0 + t h, w) in the basis [p0, h, w̄]: the same numbers as summing the dense d × d
    matrices node by node, also where the segment ends parallel to w (θ → 0) and with a zero node (dense fallback)."""
    t, weight = np.polynomial.legendre.leggauss(128)
    t, weight = torch.as_tensor((t + 1) / 2, dtype=DT), torch.as_tensor(weight / 2, dtype=DT)
    p0, w = torch.randn(d, generator=gen, dtype=DT), torch.randn(d, generator=gen, dtype=DT)
    for h in (torch.randn(d, generator=gen, dtype=DT), 2 * w - p0, -p0 / float(t[5])):
        pts = p0 + t[:, None] * h
        dense = (weight[:, None, None] * population.gate_second_moment(pts, w.expand_as(pts))).sum(0)
        torch.testing.assert_close(cc._segment_moment(p0, h, w, t, weight), dense, rtol=0, atol=1e-14)


def test_lemma11_error_is_the_papers_sum_of_norms_and_needs_no_data(gen):
    """e = ||v1 w1 - a|| + ||v2 w2 + a|| (v = [+v1, -v2]): the error gradient_gap_ratio divides by, member by member,
    zero at the global minimum, and the same on any subset of the members (a stop rule sees subsets)."""
    W, v, a = _state(gen, d=5, E=3)
    e = cc.lemma11_error(W, v, a)
    by_hand = torch.stack([(v[m, 0] * W[m, 0] - a).norm() + (v[m, 1].abs() * W[m, 1] + a).norm() for m in range(3)])
    assert torch.allclose(e, by_hand, rtol=1e-15)
    assert torch.equal(e, cc.gradient_gap_ratio(W, v, _X(gen, 30, 5), a)["error"])
    assert torch.equal(cc.lemma11_error(W[1:], v[1:], a), e[1:])
    v_opt = torch.tensor([[2.0, -0.5]], dtype=DT)
    W_opt = torch.stack([a / 2.0, -a / 0.5])[None]
    assert float(cc.lemma11_error(W_opt, v_opt, a)[0]) < 1e-15
    with pytest.raises(ValueError, match="k = 2"):
        cc.lemma11_error(W[:, :1], v[:, :1], a)
    with pytest.raises(ValueError, match="k = 2"):
        cc.lemma11_error(W, v, a[:-1])
    with pytest.raises(ValueError, match="float32"):
        cc.lemma11_error(W, v, a.float())


def test_bad_inputs(gen):
    X = _X(gen, 10, 3)
    u, w = cc.random_pairs(2, 3, generator=gen, like=X)
    with pytest.raises(ValueError, match="same shape"):
        cc.deviation(X, u, w[:1])
    with pytest.raises(ValueError, match="dimension"):
        cc.deviation(_X(gen, 10, 4), u, w)
    with pytest.raises(ValueError, match="chains"):
        cc.search_sup(X, initial=2, chains=4)
    with pytest.raises(ValueError, match="rounds"):
        cc.search_sup(X, rounds=0)
    W, v, a = _state(gen, d=3)
    with pytest.raises(ValueError, match="sign pattern"):
        cc.gradient_gap_ratio(W, v.abs(), X, a)
    with pytest.raises(ValueError, match="k = 2"):
        cc.gradient_gap_ratio(W[:, :1], v[:, :1], X, a)


def test_per_member_data_matches_shared(gen):
    W, v, a = _state(gen, d=5, E=2)
    X = torch.randn(2, 40, 5, generator=gen, dtype=DT)
    both = cc.gradient_gap_ratio(W, v, X, a)["ratio"]
    for e in range(2):
        one = cc.gradient_gap_ratio(W[e : e + 1], v[e : e + 1], X[e], a)["ratio"]
        assert torch.allclose(both[e], one[0], rtol=1e-12)
    pd = cc.path_deviation(W, v, X, a, points=5)
    assert torch.allclose(pd[1], cc.path_deviation(W[1:], v[1:], X[1], a, points=5)[0])


def test_mixed_devices_and_dtypes_are_named(gen):
    """Public functions taking several tensors name both devices/dtypes (meta and float32 stand-ins)."""
    X = _X(gen, 20, 3)
    u, w = cc.random_pairs(2, 3, generator=gen, like=X)
    with pytest.raises(ValueError, match="meta"):
        cc.deviation(X, u.to("meta"), w)
    with pytest.raises(ValueError, match="float32"):
        cc.empirical_gate_moment(X, u.float(), w)
    with pytest.raises(ValueError, match="float32"):
        cc.search_sup(X, initial=4, chains=2, proposals=2, rounds=1, generator=gen, extra_pairs=(u.float(), w.float()))
    W, v, a = _state(gen, d=3)
    with pytest.raises(ValueError, match="meta"):
        cc.gradient_gap_ratio(W, v, X.to("meta"), a)
    with pytest.raises(ValueError, match="float32"):
        cc.path_deviation(W, v, X, a.float(), points=3)


def test_sqrt_law_fit_recovers_coefficients():
    import numpy as np

    rng = np.random.default_rng(0)
    rho = np.array([4.0, 8, 16, 32, 64])
    Y = (2 / np.sqrt(rho) + 1 / rho)[:, None] * (1 + 0.01 * rng.standard_normal((5, 12)))
    c1, c2 = cc.sqrt_law_fit(rho, Y)
    assert c1.contains(2.0) and c2.contains(1.0) and c1.low > 1.9
    c1, c2 = cc.sqrt_law_fit(rho, (1 / rho)[:, None] * (1 + 0.01 * rng.standard_normal((5, 12))))
    assert c1.contains(0.0)  # a pure d/n law
    c1, c2 = cc.sqrt_law_fit(rho, (rho**-0.3)[:, None] * (1 + 0.01 * rng.standard_normal((5, 12))))
    assert c2.high < 0  # slower than sqrt(d/n)
    with pytest.raises(ValueError, match="K = len"):
        cc.sqrt_law_fit(rho[:2], Y[:2])


def test_truncated_means_match_monte_carlo_and_sum_to_one():
    z = torch.randn(2_000_000, generator=torch.Generator().manual_seed(0), dtype=DT)
    for tau in (0.5, 2.0, 4.0):
        low, tail = cc.truncated_square_mean(tau), cc.truncated_tail_mean(tau)
        assert abs(low + tail - 1) < 1e-12
        assert abs(low - float(torch.clamp(z * z, max=tau).mean())) < 3e-3
        assert abs(tail - float(torch.clamp(z * z - tau, min=0).mean())) < 3e-3
    with pytest.raises(ValueError, match="positive"):
        cc.truncated_square_mean(0.0)


def test_single_member_deviation_is_centred_and_falls_like_root_n():
    gen = torch.Generator().manual_seed(1)
    small = cc.single_member_deviation(100, 4.0, 400, generator=gen).mean()
    large = cc.single_member_deviation(10_000, 4.0, 400, generator=gen, chunk=50_000).mean()
    tail = cc.single_member_deviation(10_000, 2.0, 50, part="remainder", generator=gen)
    assert 7 < float(small / large) < 13  # sqrt(100) = 10, not 100
    assert tail.shape == (50,) and bool((tail >= 0).all())
    with pytest.raises(ValueError, match="part"):
        cc.single_member_deviation(10, 1.0, 2, part="other")


def test_net_reduction_holds_and_needs_its_factor():
    net, eps = cc.circle_net(8)
    assert net.shape == (8, 2) and abs(eps - 2 * math.sin(math.pi / 16)) < 1e-15
    A = torch.randn(500, 2, 2, generator=torch.Generator().manual_seed(2), dtype=net.dtype)
    A = (A + A.transpose(1, 2)) / 2
    ratio = torch.linalg.matrix_norm(A, ord=2) * (1 - 2 * eps) / cc.net_quadratic_max(A, net)
    assert float(ratio.max()) <= 1
    v = torch.tensor([math.cos(math.pi / 8), math.sin(math.pi / 8)], dtype=net.dtype)
    worst = torch.outer(v, v)[None]
    assert float(cc.net_quadratic_max(worst, net)) < 1  # between two net points: the factor is needed
    with pytest.raises(ValueError, match="symmetric"):
        cc.net_quadratic_max(torch.tensor([[[0.0, 1.0], [0.0, 0.0]]], dtype=net.dtype), net)
    with pytest.raises(ValueError, match="at least 3"):
        cc.circle_net(2)


def test_bernstein_bounds_the_exact_chi_square_tail():
    import numpy as np

    n, s = np.array([1.0, 10, 100, 1000])[:, None], np.linspace(0, 5, 51)[None]
    exact = cc.chi_square_mean_tail(n, s)
    assert np.all(exact <= cc.bernstein_tail(n, s, 4.0, 4.0))
    assert np.any(exact > cc.bernstein_tail(n, s, 2.0, 4.0))  # sigma^2 = the variance fails
    with pytest.raises(ValueError, match="s >= 0"):
        cc.bernstein_tail(1, -1.0, 1.0, 1.0)


def test_net_reduction_certificate_encloses_the_closed_form_minimum(gen):
    """The minimum of max_U |u^T A u| / ||A|| over symmetric 2 x 2 matrices is cos(2 pi/N), at eigenvalues 1 and -1
    with the eigenvectors halfway between net directions; every random matrix lies above the certified lower end."""
    for points in (5, 8, 12):
        c = cc.net_reduction_certificate(points, tol=1e-6)
        assert c.holds and c.value <= c.attained
        if points % 2 == 0:  # an even net: its directions mod pi are 2 pi/N apart (an odd one: pi/N)
            assert c.value <= math.cos(2 * math.pi / points) <= c.attained
        assert c.margin == pytest.approx(c.value - (1 - 2 * cc.circle_net(points)[1]))
        A = torch.randn(2000, 2, 2, generator=gen, dtype=DT)
        A = (A + A.transpose(1, 2)) / 2
        net = cc.circle_net(points)[0].to(DT)
        ratio = cc.net_quadratic_max(A, net) / torch.linalg.matrix_norm(A, ord=2)
        assert float(ratio.min()) >= c.value
    assert cc.net_reduction_certificate(8).at[1] == pytest.approx(-1.0, abs=1e-3)
    with pytest.raises(ValueError, match="at least 3"):
        cc.net_reduction_certificate(2)
    with pytest.raises(ValueError, match="tol"):
        cc.net_reduction_certificate(8, tol=0.0)


def test_square_tail_certificate_encloses_the_exact_ratio():
    """P(Z^2 > t) / (2 e^(-t/2)) = erfcx(sqrt(t/2)) / 2: largest (1/2) at t = 0; the rate 1 fails at large t."""
    import numpy as np
    from scipy import special

    c = cc.square_tail_ratio_sup(50.0)
    t = np.linspace(0, 50, 501)
    assert c.holds and c.value == pytest.approx(0.5, abs=1e-6) and c.at == (0.0,)
    assert (special.erfcx(np.sqrt(t / 2)) / 2).max() <= c.value
    wrong = cc.square_tail_ratio_sup(50.0, rate=1.0)
    assert wrong.attained > 1 and wrong.at[0] > 40
    with pytest.raises(ValueError, match="t_max"):
        cc.square_tail_ratio_sup(0.0)
    with pytest.raises(ValueError, match="rate"):
        cc.square_tail_ratio_sup(rate=-1.0)


def test_bernstein_certificate_encloses_the_grid_and_finds_the_failure():
    """The certified supremum over s of tail/bound lies above every grid value of the same ratio (scipy) and within
    the enclosure's tolerance of the largest; with sigma^2 = 2 a ratio above 1 is proved where the grid finds one."""
    import numpy as np

    s = np.linspace(0, 6, 601)
    for n in (1, 7, 300):
        grid = np.exp(cc.chi_square_mean_tail(n, s, log=True) - cc.bernstein_tail(n, s, 4.0, 4.0, log=True))
        c = cc.bernstein_ratio_sup(n, 4.0, 4.0, s_max=6.0, tol=1e-6)
        assert c.holds and c.value <= 1
        assert grid.max() <= c.value * (1 + 1e-9) and c.value - grid.max() < 1e-3
    wrong = cc.bernstein_ratio_sup(1000, 2.0, 4.0, s_max=6.0)
    grid = np.exp(cc.chi_square_mean_tail(1000, s, log=True) - cc.bernstein_tail(1000, s, 2.0, 4.0, log=True))
    assert wrong.attained > 1 and grid.max() > 1 and abs(wrong.at[0] - 0.5) < 0.05  # the kink s = sigma^2/b
    assert cc.bernstein_ratio_sup(5, 4.0, 4.0, s_max=0.5).boxes > 0  # the interval ends before the kink: one piece


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 4.0, 4.0), "n must be"),
        ((2.5, 4.0, 4.0), "n must be"),
        ((True, 4.0, 4.0), "n must be"),
        ((3, 0.0, 4.0), "sigma2"),
        ((3, 4.0, -1.0), "b"),
    ],
)
def test_bernstein_certificate_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        cc.bernstein_ratio_sup(*args)
    with pytest.raises(ValueError, match="s_max"):
        cc.bernstein_ratio_sup(3, 4.0, 4.0, s_max=0.0)


def test_line_search_closed_forms_match_the_matrices(gen):
    """M(u, w) z and zᵀM(u, w)z without M, and the Ritz value on a full Krylov space is the operator norm."""
    u, w = cc.random_pairs(5, 6, generator=gen, like=torch.zeros(1, dtype=DT))
    z = torch.randn(5, 6, generator=gen, dtype=DT)
    M = population.gate_second_moment(u, w)
    assert torch.allclose(cc._gate_moment_times(u, w, z), torch.einsum("bij,bj->bi", M, z), atol=1e-14)
    zu = cc._unit(z)
    quad = cc._quadratic_population((zu * u).sum(1), (zu * w).sum(1), (u * w).sum(1))
    assert torch.allclose(quad, torch.einsum("bi,bij,bj->b", zu, M, zu), atol=1e-14)
    X = _X(gen, 90, 6)
    value, znew = cc._top_ritz(X, u, w, zu, krylov=6)
    assert torch.allclose(value.abs(), cc.deviation(X, u, w), rtol=1e-10)
    D = cc.empirical_gate_moment(X, u, w) - M
    assert torch.allclose(torch.einsum("bi,bij,bj->b", znew, D, znew), value, atol=1e-13)


def test_circle_search_finds_the_exact_maximum_of_the_circle(gen):
    """Against a dense grid of the whole great circle: the returned point is at least as good."""
    X = _X(gen, 40, 4)
    u, w = cc.random_pairs(3, 4, generator=gen, like=X)
    z = cc._unit(torch.randn(3, 4, generator=gen, dtype=DT))
    v = torch.randn(3, 4, generator=gen, dtype=DT)
    v = cc._unit(v - (v * u).sum(1, keepdim=True) * u)
    sign = torch.tensor([1.0, -1.0, 1.0], dtype=DT)

    def form(p):  # sign · zᵀ(M̂ − M)(p, w) z, (C, T, d) points
        C, T, d = p.shape
        flat = p.reshape(-1, d)
        ww = w[:, None].expand(C, T, d).reshape(-1, d)
        D = cc.empirical_gate_moment(X, flat, ww) - population.gate_second_moment(flat, ww)
        zz = z[:, None].expand(C, T, d).reshape(-1, d)
        return sign[:, None] * torch.einsum("bi,bij,bj->b", zz, D, zz).view(C, T)

    best = cc._circle_search(X, u, w, z, sign, v)
    theta = torch.linspace(0, 2 * math.pi, 4001, dtype=DT)[None, :, None]
    grid = form(cc._unit(theta.cos() * u[:, None] + theta.sin() * v[:, None]))
    assert torch.all(form(best[:, None])[:, 0] >= grid.max(1).values - 1e-9)


def test_line_search_is_certified_reproducible_and_beats_the_evolution_strategy(gen):
    X = _X(gen, 320, 20)
    res = cc.line_search_sup(X, chains=8, rounds=20, generator=torch.Generator().manual_seed(3))
    assert res["values"].shape == (8,) and res["trace"].shape == (21,)
    exact = float(cc.deviation(X, res["u"][None], res["w"][None])[0])
    assert math.isclose(res["value"], exact, rel_tol=1e-12) and res["value"] == float(res["values"].max())
    tr = res["trace"]
    assert torch.all(tr[1:] >= tr[:-1]) and float(tr[-1]) <= res["value"] + 1e-12  # forms below the norm
    again = cc.line_search_sup(X, chains=8, rounds=20, generator=torch.Generator().manual_seed(3))
    assert again["value"] == res["value"]
    es = cc.search_sup(X, initial=128, chains=4, proposals=8, rounds=12, generator=torch.Generator().manual_seed(3))
    assert res["value"] > es["value"]
    with pytest.raises(ValueError, match="chains"):
        cc.line_search_sup(X, chains=0)
    with pytest.raises(ValueError, match="tau"):
        cc.line_search_sup(X, tau=0.0)
    with pytest.raises(ValueError, match="noise"):
        cc.line_search_sup(X, noise=-1.0)


def _brute_wedge_suprema(X, S, tau):
    """The suprema of concentration.wedge_suprema by enumerating arcs whose ends sit at (or 1e-9 beside) sample
    angles, with P from an independent table (Simpson's rule on 400 001 nodes) and membership from the definition
    f = min(x_1^2, tau) 1{<x, w> >= 0} 1{<x, w*> >= 0} at the arc's two half-planes."""
    from scipy.integrate import cumulative_simpson

    grid = np.linspace(0, 2 * np.pi, 400_001)
    c2 = np.cos(grid) ** 2
    with np.errstate(divide="ignore"):
        g = c2 * -np.expm1(-tau / (2 * c2)) / np.pi
    table = np.concatenate([[0], cumulative_simpson(g, x=grid)])
    gam = lambda phi: np.floor(phi / (2 * np.pi)) * table[-1] + np.interp(np.mod(phi, 2 * np.pi), grid, table)
    out = []
    for x, s in zip(X, S):
        n = len(x)
        phi = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * np.pi)
        ends = np.concatenate([phi, phi + 1e-9, phi - 1e-9])
        start = np.repeat(ends, len(ends))
        stop = start + np.mod(np.tile(ends, len(ends)) - start, 2 * np.pi)
        half = np.concatenate([ends, ends - np.pi])  # half-planes with a boundary at a sample
        start, stop = np.concatenate([start, half]), np.concatenate([stop, half + np.pi])
        keep = stop - start <= np.pi
        start, stop = start[keep], stop[keep]
        # the arc [start, stop] as the intersection of the half-planes of w and w* (their normals)
        w, w_star = stop - np.pi / 2, start + np.pi / 2
        member = (np.cos(phi[None] - w[:, None]) >= -1e-15) & (np.cos(phi[None] - w_star[:, None]) >= -1e-15)
        f = np.minimum(x[:, 0] ** 2, tau) / n
        empirical, weighted = member @ f, member @ (f * s)
        population = gam(stop) - gam(start)
        out.append((np.abs(empirical - population).max(), max(weighted.max(), 0.0), np.abs(weighted).max()))
    return np.array(out)


def test_wedge_suprema_agree_with_an_enumeration_of_arcs_from_the_definition():
    rng = np.random.default_rng(3)
    X, S = rng.standard_normal((4, 6, 2)), rng.choice([-1.0, 1.0], size=(4, 6))
    got = cc.wedge_suprema(torch.tensor(X), torch.tensor(S), 4.0)
    brute = _brute_wedge_suprema(X, S, 4.0)
    for k, key in enumerate(("deviation", "rademacher", "rademacher_abs")):
        np.testing.assert_allclose(got[key].numpy(), brute[:, k], atol=1e-8)


def test_wedge_suprema_population_part_is_the_truncated_square_mean():
    # one point far from the u-axis directions: sup (P - P_n) is the half-plane avoiding it, P = E min(Z^2, tau) / 2
    X = torch.tensor([[[0.0, 1.0]]], dtype=torch.float64)
    out = cc.wedge_suprema(X, torch.ones(1, 1, dtype=torch.float64), 4.0)
    assert abs(out["deviation"].item() - cc.truncated_square_mean(4.0) / 2) < 1e-9
    assert out["rademacher"].item() == 0.0  # the point's weight min(0^2, tau) is 0


def test_wedge_suprema_reject_bad_input():
    X = torch.zeros(2, 5, 2, dtype=torch.float64)
    S = torch.ones(2, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="shape"):
        cc.wedge_suprema(torch.zeros(2, 5, 3, dtype=torch.float64), S, 4.0)
    with pytest.raises(ValueError, match="shape"):
        cc.wedge_suprema(X, S[:, :4], 4.0)
    with pytest.raises(ValueError, match="signs"):
        cc.wedge_suprema(X, 0.5 * S, 4.0)
    with pytest.raises(ValueError, match="tau"):
        cc.wedge_suprema(X, S, 0.0)
    with pytest.raises(ValueError):
        cc.wedge_suprema(X.float(), S, 4.0)
    with pytest.raises(ValueError):
        cc.wedge_suprema(X.clone().fill_(float("nan")), S, 4.0)
