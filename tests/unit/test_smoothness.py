"""Tests of companion.smoothness (paper A, Lemmas 4.1, 4.3-4.5, eq. (14) and Lemmas A.1-A.6; ch-smoothness) and of
the degree fit along rays (companion.smoothness.ray_degree, Lemma 4.5's degree 2L - 2).

The right-hand sides are compared with a second, independent implementation written here as plain-Python
loops over the indices exactly as the paper prints them (floats, one member at a time, no torch, no logs).
"""

import math

import pytest
import torch
from paper_a_cases import CASES

from companion import activations, assumptions, deepnet, search, smoothness

SMOOTH = activations.SMOOTH


# ------------------------------------------------------------ the independent reference (plain Python)
def ref_43(a, b, r, L, dmax):
    s = 0.0
    for k in range(0, L):  # k = 0 .. L-1
        for j in range(0, L - k):  # j = 0 .. L-k-1
            s += a**j * b**k
    return dmax**0.5 * r * s


def ref_44(a, b, r, L, dmax):
    s = 0.0
    for j in range(0, 2 * L - 1):  # j = 0 .. 2L-2
        inner = 0.0
        for k in range(0, 2 * L - j - 1):  # k = 0 .. 2L-j-2
            inner += b**k
        s += a**j * inner
    return 4 * dmax * L**3 * r * s


def ref_45(a, b, r, loss, L, dmax, cJ=2.0):
    s = 0.0
    for j in range(0, 2 * L - 1):
        for i in range(0, 2 * L - j - 1):
            s += a**j * b**i
    return 8 * cJ * dmax * L**3 * r * (1 + loss**0.5) * s


@pytest.mark.parametrize("L", [2, 3, 4, 5])
@pytest.mark.parametrize("dmax", [1, 6])
def test_rhs_match_independent_implementation(L, dmax):
    a, b, r, loss = (torch.tensor(v, dtype=torch.float64) for v in zip(*CASES))
    got = {
        "4.3": smoothness.lemma_4_3_rhs(a, b, r, L, dmax),
        "4.4": smoothness.lemma_4_4_rhs(a, b, r, L, dmax),
        "4.5": smoothness.lemma_4_5_rhs(a, b, r, loss, L, dmax),
    }
    for e, (ae, be, re, le) in enumerate(CASES):
        want = {
            "4.3": ref_43(ae, be, re, L, dmax),
            "4.4": ref_44(ae, be, re, L, dmax),
            "4.5": ref_45(ae, be, re, le, L, dmax),
        }
        for k in want:
            assert got[k][e].item() == pytest.approx(want[k], rel=1e-12), (k, CASES[e])


def test_double_sums_are_symmetric():
    """Both orders of summation printed in the paper give the same polynomial (the index set is symmetric)."""
    for L in (2, 3, 4):
        for a, b in ((0.3, 7.0), (2.0, 0.1), (20.0, 1.5)):
            assert ref_44(a, b, 1.0, L, 1) == pytest.approx(ref_44(b, a, 1.0, L, 1), rel=1e-13)
            assert ref_43(a, b, 1.0, L, 1) == pytest.approx(ref_43(b, a, 1.0, L, 1), rel=1e-13)


def test_log_space_does_not_overflow_where_powers_would():
    big = torch.tensor([1e80], dtype=torch.float64)
    log_rhs = smoothness.log_lemma_4_4_rhs(big, big, torch.tensor([1.0], dtype=torch.float64), 4, 6)
    assert torch.isfinite(log_rhs).all()
    assert log_rhs.item() == pytest.approx(math.log(4 * 6 * 64) + 6 * math.log(1e80) + math.log(7), rel=1e-10)
    assert not torch.isfinite(big**6).all()  # the naive power overflows


def test_rhs_vectorised_over_ensemble():
    E = 7
    a, b, r, loss = (torch.rand(E, dtype=torch.float64) * 5 for _ in range(4))
    full = smoothness.lemma_4_5_rhs(a, b, r, loss, 3, 4)
    assert full.shape == (E,)
    for e in range(E):
        assert full[e].item() == pytest.approx(
            smoothness.lemma_4_5_rhs(a[e : e + 1], b[e : e + 1], r[e : e + 1], loss[e : e + 1], 3, 4).item(), rel=1e-14
        )


# --------------------------------------------------------------------------------- lemmas on networks
@pytest.mark.parametrize("act", SMOOTH)
@pytest.mark.parametrize("L", [2, 3, 4])
def test_lemmas_hold_on_random_pairs(gen, act, L):
    widths = [3] + [4] * (L - 1) + [1]
    p1, p2 = search.random_pairs(widths, 64, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = torch.randn(6, generator=gen, dtype=torch.float64)
    for c in (
        smoothness.lemma_4_3(p1, p2, X, act),
        smoothness.lemma_4_4(p1, p2, X, act),
        smoothness.lemma_4_5(p1, p2, X, y, act),
    ):
        assert torch.isfinite(c.lhs).all() and torch.isfinite(c.rhs).all()
        assert (c.ratio <= 1).all()


def test_lemma_lhs_against_autograd(gen):
    """The LHS of Lemma 4.5 uses Lemma 4.2's gradient; compare with autograd."""
    p1, p2 = search.random_pairs([3, 4, 1], 5, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = torch.randn(6, generator=gen, dtype=torch.float64)
    c = smoothness.lemma_4_5(p1, p2, X, y, "tanh")
    _, g1 = deepnet.loss_and_gradient_autograd(p1, X, y, "tanh")
    _, g2 = deepnet.loss_and_gradient_autograd(p2, X, y, "tanh")
    ref = torch.sqrt(sum(((u - v) ** 2).flatten(1).sum(1) for u, v in zip(g1, g2)))
    torch.testing.assert_close(c.lhs, ref, rtol=1e-12, atol=1e-14)


def test_lemma_4_3_attains_half_for_two_layer_scalar_linear_net():
    """F = a b x with x = 1, W1 = 0, W2 = (t, t): |F| = t^2, RHS = sqrt2 t (1 + sqrt2 t) -> ratio -> 1/2."""
    t = torch.tensor(1e4, dtype=torch.float64)
    p1 = [torch.zeros(1, 1, 1, dtype=torch.float64), torch.zeros(1, 1, 1, dtype=torch.float64)]
    p2 = [t.view(1, 1, 1), t.view(1, 1, 1)]
    X = torch.ones(1, 1, dtype=torch.float64)
    ratio = smoothness.lemma_4_3(p1, p2, X, "linear").ratio.item()
    assert ratio == pytest.approx(0.5, rel=1e-3) and ratio <= 1


@pytest.mark.parametrize("act", SMOOTH)
def test_gradient_norm_bound_eq14(gen, act):
    """Eq. (14) of Appendix A, used in Lemmas 4.5 and 4.7: ||grad_W F(x; W)|| <= d_max^(1/2) L sum_(k<L) ||W||^k."""
    for L in (2, 3, 4):
        params = deepnet.init_params([3] + [4] * (L - 1) + [1], 32, 2.0, generator=gen)
        X = deepnet.ball_data(5, 3, generator=gen)
        g = deepnet.output_gradient(params, X, act)
        lhs = torch.sqrt(sum((u**2).flatten(2).sum(-1) for u in g))  # (E, n)
        rhs = smoothness.gradient_norm_bound(deepnet.norm(params), L, deepnet.d_max(params))
        assert (lhs <= rhs[:, None]).all()
        want = [math.sqrt(4) * L * sum(a**k for k in range(L)) for a in deepnet.norm(params).tolist()]
        torch.testing.assert_close(rhs, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------------- ValueErrors
def test_relu_is_refused(gen):
    p1, p2 = search.random_pairs([3, 4, 1], 2, generator=gen)
    X = deepnet.ball_data(4, 3, generator=gen)
    y = torch.zeros(4, dtype=torch.float64)
    for call in (
        lambda: smoothness.lemma_4_3(p1, p2, X, "relu"),
        lambda: smoothness.lemma_4_4(p1, p2, X, "relu"),
        lambda: smoothness.lemma_4_5(p1, p2, X, y, "relu"),
        lambda: assumptions.check_assumptions("relu"),
    ):
        with pytest.raises(ValueError, match="not smooth"):
            call()


def test_data_outside_ball_is_refused(gen):
    p1, p2 = search.random_pairs([3, 4, 1], 2, generator=gen)
    X = deepnet.ball_data(4, 3, generator=gen)
    X[0] = X[0] / X[0].norm() * math.sqrt(3) * 1.01
    y = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="Assumption 3.2"):
        smoothness.lemma_4_3(p1, p2, X, "tanh")
    with pytest.raises(ValueError, match="Assumption 3.2"):
        smoothness.lemma_4_5(p1, p2, X, y, "sigmoid")


def test_bad_arguments():
    one = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="L >= 2"):
        smoothness.lemma_4_4_rhs(one, one, one, 1, 3)
    with pytest.raises(ValueError, match="d_max"):
        smoothness.lemma_4_3_rhs(one, one, one, 2, 0)
    with pytest.raises(ValueError, match="norm"):
        smoothness.lemma_4_3_rhs(-one, one, one, 2, 1)
    with pytest.raises(ValueError, match="non-finite"):
        smoothness.lemma_4_5_rhs(one, one, one, torch.tensor([1.0, float("nan")], dtype=torch.float64), 2, 1)
    with pytest.raises(ValueError, match="same layer shapes"):
        smoothness.lemma_4_3(
            [torch.ones(1, 2, 3, dtype=torch.float64), torch.ones(1, 1, 2, dtype=torch.float64)],
            [torch.ones(1, 3, 3, dtype=torch.float64), torch.ones(1, 1, 3, dtype=torch.float64)],
            torch.zeros(1, 3, dtype=torch.float64),
            "tanh",
        )


# ------------------------------------------------ Lemma 4.1, eq. (14) and Appendix A (plain-Python references)
def ref_a1(a, ell, dmax):
    return dmax**0.5 * sum(a**i for i in range(1, ell + 1))  # i = 1 .. ell


def ref_a2(a, b, r, ell, dmax):
    s = 0.0
    for k in range(0, ell):  # k = 0 .. ell-1
        for j in range(0, ell - k):  # j = 0 .. ell-k-1
            s += a**j * b**k
    return dmax**0.5 * r * s


def ref_a3(a, ell, dmax):
    return dmax**0.5 * sum(a**k for k in range(0, ell + 1))  # k = 0 .. ell


def ref_a5(a, ell, L):
    return a ** (L - ell)


def ref_a6(a, b, r, ell, L, dmax):
    """Lemma A.6 as printed: the case ell = L, and for ell < L the bracket with its two sums."""
    if ell == L:
        return ref_a2(a, b, r, L, dmax)
    first = 0.0
    for k in range(ell, L + 1):  # k = ell .. L
        for i in range(k - ell, 2 * k - 1 - ell + 1):  # i = k-ell .. 2k-1-ell
            for j in range(L - k, L - i + k - ell - 1 + 1):  # j = L-k .. L-i+k-ell-1
                first += b**i * a**j
    second = sum(b**k * a ** (L - k - ell - 1) for k in range(0, L - ell))  # k = 0 .. L-ell-1
    return dmax**0.5 * r * (first + second)


def ref_a6_unrolled(a, b, r, ell, L, dmax):
    """The proof's recursion before reindexing: sum_k b^(k-ell) D_k a^(L-k) + sum_k b^(k-ell) a^(L-k-1) r, with
    D_k = Lemma A.2's bound (and the second sum multiplied by dmax^(1/2) >= 1, as the statement does)."""
    s = sum(b ** (k - ell) * ref_a2(a, b, r, k, dmax) * a ** (L - k) for k in range(ell, L + 1))
    return s + dmax**0.5 * r * sum(b ** (k - ell) * a ** (L - k - 1) for k in range(ell, L))


def ref_eq14(a, L, dmax):
    return dmax**0.5 * L * sum(a**k for k in range(0, L))


A_CASES = [(a, b, r) for a in (0.0, 0.1, 1.0, 3.7, 20.0) for b in (0.0, 0.5, 1.0, 20.0) for r in (1e-3, 1.0, 10.0)]


@pytest.mark.parametrize("L", [2, 3, 4, 5])
@pytest.mark.parametrize("dmax", [1, 6])
def test_appendix_a_rhs_match_independent_implementation(L, dmax):
    a, b, r = (torch.tensor(v, dtype=torch.float64) for v in zip(*A_CASES))
    for e, (ae, _, _) in enumerate(A_CASES):
        assert smoothness.gradient_norm_bound(a, L, dmax)[e].item() == pytest.approx(ref_eq14(ae, L, dmax), rel=1e-12)
    for ell in range(0, L + 1):
        a3 = smoothness.lemma_a3_rhs(a, ell, dmax)
        a4 = smoothness.lemma_a4_rhs(a, b, r, ell, dmax)
        for e, (ae, be, re) in enumerate(A_CASES):
            assert a3[e].item() == pytest.approx(ref_a3(ae, ell, dmax), rel=1e-12)
            assert a4[e].item() == (0.0 if ell == 0 else pytest.approx(ref_a2(ae, be, re, ell, dmax), rel=1e-12))
        if ell == 0:
            continue
        got = {
            "A.1": smoothness.lemma_a1_rhs(a, ell, dmax),
            "A.2": smoothness.lemma_a2_rhs(a, b, r, ell, dmax),
            "A.5": smoothness.lemma_a5_rhs(a, ell, L),
            "A.6": smoothness.lemma_a6_rhs(a, b, r, ell, L, dmax),
        }
        for e, (ae, be, re) in enumerate(A_CASES):
            want = {
                "A.1": ref_a1(ae, ell, dmax),
                "A.2": ref_a2(ae, be, re, ell, dmax),
                "A.5": ref_a5(ae, ell, L),
                "A.6": ref_a6(ae, be, re, ell, L, dmax),
            }
            for k in want:
                assert got[k][e].item() == pytest.approx(want[k], rel=1e-12), (k, ell, A_CASES[e])


@pytest.mark.parametrize("L", [2, 3, 4, 5])
def test_lemma_a6_reindexing_equals_the_unrolled_recursion(L):
    """The printed triple sum of Lemma A.6 is the proof's unrolled recursion with Lemma A.2 inserted."""
    for ell in range(1, L + 1):
        for a, b in ((0.3, 7.0), (2.0, 0.1), (1.0, 1.0)):
            assert ref_a6(a, b, 0.7, ell, L, 4) == pytest.approx(ref_a6_unrolled(a, b, 0.7, ell, L, 4), rel=1e-12)
    assert sorted(smoothness.lemma_a6_exponents(L, L)) == sorted((j, k) for k in range(L) for j in range(L - k))


def test_lemma_4_1_rhs_matches_independent_implementation(gen):
    E, n = 3, 5
    q = [torch.rand(E, n, generator=gen, dtype=torch.float64) * 3 for _ in range(4)]
    got = smoothness.lemma_4_1_rhs(*q)
    for e in range(E):
        want = sum(
            2 / n * q[0][e, i].item() * q[1][e, i].item() + 2 / n * q[2][e, i].item() * q[3][e, i].item() for i in range(n)
        )
        assert got[e].item() == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("act", SMOOTH)
@pytest.mark.parametrize("L", [2, 3, 4])
def test_proof_steps_hold_on_random_pairs(gen, act, L):
    widths = [3] + [4] * (L - 1) + [1]
    p1, p2 = search.random_pairs(widths, 64, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = 2 * torch.rand(6, generator=gen, dtype=torch.float64).to(X) - 1
    comps = smoothness.appendix_a(p1, p2, X, act)
    assert comps["A.1"].lhs.shape == (128, 6, L) and comps["A.3"].lhs.shape == (128, 6, L + 1)
    assert comps["A.2"].lhs.shape == (64, 6, L) and comps["A.6"].rhs.shape == (64, 1, L)
    for c in (*comps.values(), smoothness.lemma_4_1(p1, p2, X, y, act), smoothness.equation_14(p1, X, act)):
        assert torch.isfinite(c.lhs).all() and torch.isfinite(c.rhs).all()
        assert (c.ratio <= 1 + 1e-12).all()


def test_appendix_a_lhs_are_the_network_quantities(gen):
    """Spot check: A.1's left side is ||w_1 x|| at layer 1; A.5's at layer L is |sigma'(z_L)|; A.4 = |tanh change|."""
    p1, p2 = search.random_pairs([2, 3, 1], 4, generator=gen)
    X = deepnet.ball_data(3, 2, generator=gen)
    comps = smoothness.appendix_a(p1, p2, X, "tanh")
    z1 = torch.einsum("eij,nj->eni", p1[0], X)
    assert torch.allclose(comps["A.1"].lhs[:4, :, 0], z1.norm(dim=-1))
    zL = deepnet.forward_all(p1, X, "tanh")[0][-1][..., 0]
    assert torch.allclose(comps["A.5"].lhs[:4, :, -1], (1 - torch.tanh(zL) ** 2).abs())
    out1, out2 = deepnet.forward(p1, X, "tanh"), deepnet.forward(p2, X, "tanh")
    assert torch.allclose(comps["A.4"].lhs[..., -1], (out2 - out1).abs())


def test_lemma_4_1_is_tight_when_the_residual_vanishes(gen):
    """With y = F(x; W1) the second term vanishes and the triangle inequality is an equality for n = 1."""
    p1, p2 = search.random_pairs([2, 3, 1], 4, generator=gen)
    X = deepnet.ball_data(1, 2, generator=gen)
    y = deepnet.forward(p1, X, "softplus")
    c = smoothness.lemma_4_1(p1, p2, X, y, "softplus")
    assert torch.allclose(c.ratio, torch.ones_like(c.ratio), rtol=1e-12)


def test_zero_over_zero_counts_as_holding():
    c = smoothness.Comparison(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64))
    assert c.ratio.tolist() == [0.0, 0.5]


# -------------------------------------------------------------------------------- device and dtype checks
def test_mixed_devices_and_dtypes_raise_clear_errors(gen):
    p1, p2 = search.random_pairs([3, 4, 1], 2, generator=gen, device="cpu")
    X = deepnet.ball_data(5, 3, generator=gen, device="cpu")
    y = torch.zeros(5, dtype=torch.float64)
    X_meta = torch.empty(5, 3, dtype=torch.float64, device="meta")
    p_meta = [torch.empty(w.shape, dtype=w.dtype, device="meta") for w in p2]
    for call in (
        lambda: smoothness.lemma_4_3(p1, p2, X_meta, "tanh"),
        lambda: smoothness.lemma_4_5(p1, p_meta, X, y, "tanh"),
        lambda: smoothness.lemma_4_1(p1, p2, X, y.to("meta"), "tanh"),
        lambda: smoothness.appendix_a(p1, p2, X_meta, "tanh"),
        lambda: smoothness.equation_14(p1, X_meta, "tanh"),
    ):
        with pytest.raises(ValueError, match="is on meta but .* is on cpu|is on cpu but .* is on meta"):
            call()
    with pytest.raises(ValueError, match="dtype torch.float32"):
        smoothness.lemma_4_4(p1, p2, X.float(), "tanh")
    one = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="is on meta"):
        smoothness.lemma_4_3_rhs(one, one, one.to("meta"), 2, 3)
    with pytest.raises(ValueError, match="is on meta"):
        smoothness.lemma_a6_rhs(one, one.to("meta"), one, 1, 2, 3)
    assert smoothness.lemma_4_3_rhs(one, 1.0, 0.5, 2, 1).dtype == torch.float64  # numbers follow the tensors


def test_appendix_a_bad_arguments():
    one = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="layer index"):
        smoothness.lemma_a1_rhs(one, 0, 3)
    with pytest.raises(ValueError, match="layer index"):
        smoothness.lemma_a5_rhs(one, 4, 3)
    with pytest.raises(ValueError, match="one shape"):
        smoothness.lemma_4_1_rhs(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 4))


# ------------------------------------------------------------------------- Lemma 4.5's degree along rays
def test_ray_degree_removes_the_known_correction():
    s = torch.logspace(2, 4, 5, dtype=torch.float64)
    gamma = torch.tensor([0.7, -2.0, 5.0], dtype=torch.float64)
    lam = s.view(-1, 1) ** 6 * 3.0 * torch.exp(gamma * s.view(-1, 1) ** -4)
    assert torch.allclose(smoothness.ray_degree(s, lam, 4), torch.full((3,), 6.0, dtype=torch.float64), atol=1e-12)
    plain = (lam[-1].log() - lam[0].log()) / (s[-1].log() - s[0].log())
    assert (plain - 6).abs().max() > 1e-9  # without the correction the slope is off
    with pytest.raises(ValueError, match="positive"):
        smoothness.ray_degree(s, -lam, 4)
    with pytest.raises(ValueError, match="R = len"):
        smoothness.ray_degree(s[:3], lam[:3], 4)


def test_linear_net_hessian_degree_along_rays(gen):
    """For a linear network the Hessian norm along s W0 has degree 2L - 2 (float64 agreement after the correction)."""
    from companion import curvature

    for L in (2, 3):
        W0 = deepnet.init_params([3] + [4] * (L - 1) + [1], 3, generator=gen)
        W0 = [w / deepnet.norm(W0).view(-1, 1, 1) for w in W0]
        X = deepnet.ball_data(6, 3, generator=gen)
        y = torch.full((6,), 0.5, dtype=torch.float64)
        s = torch.logspace(8 / L, 8 / L + 2, 5, dtype=torch.float64)
        P = [(s.view(1, -1, 1, 1) * w.unsqueeze(1)).reshape(-1, *w.shape[1:]) for w in W0]
        H = curvature.hessian(curvature.deepnet_loss_fn(P, X, y, "linear"), curvature.flatten(P))
        lam = torch.linalg.eigvalsh(H).abs().amax(-1).view(3, -1).T
        assert (smoothness.ray_degree(s, lam, L) - (2 * L - 2)).abs().max() < 1e-10


def test_balanced_family_keeps_a_linear_network_and_grows_the_norm():
    gen = torch.Generator().manual_seed(5)
    W = deepnet.init_params([3, 4, 4, 1], 2, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(6, 3, generator=gen, device="cpu", dtype=torch.float64)
    s = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64)
    P = smoothness.balanced_family(W, s)
    F = deepnet.forward(P, X, "linear").view(2, 3, -1)
    assert torch.allclose(F, F[:, :1].expand_as(F), rtol=1e-12, atol=1e-14)
    norms = deepnet.norm(P).view(2, 3)
    assert bool((norms[:, 2] > 50 * norms[:, 0]).all())
    with pytest.raises(ValueError, match="positive"):
        smoothness.balanced_family(W, torch.tensor([0.0]))
