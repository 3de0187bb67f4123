"""Unit tests of companion.population (paper B's closed forms, ch-closed-forms)."""

import math

import pytest
import torch

from companion import population as P

DT = torch.float64


def _rand(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=DT)


def _loss_flat(a, k, d):
    def f(theta):
        W, v = P.unflatten_params(theta, k, d)
        return P.loss(W[None], v[None], a)[0]

    return f


def test_gradient_matches_autograd(gen):
    E, k, d = 5, 3, 6
    v, W, a = _rand(gen, E, k), _rand(gen, E, k, d), _rand(gen, d)
    vv, WW = v.clone().requires_grad_(), W.clone().requires_grad_()
    gW, gv = torch.autograd.grad(P.loss(WW, vv, a).sum(), [WW, vv])
    cW, cv = P.gradient(W, v, a)
    assert torch.allclose(gv, cv, atol=1e-13, rtol=0)
    assert torch.allclose(gW, cW, atol=1e-13, rtol=0)


def test_hessian_matches_autograd_including_near_alignment(gen):
    k, d = 3, 5
    a = _rand(gen, d)
    w = _rand(gen, d)
    cases = [(_rand(gen, k), _rand(gen, k, d))]
    for eps in (1e-3, 1e-5):  # near-aligned and near-anti-aligned pairs
        W = torch.stack([w, w + eps * _rand(gen, d), -w + eps * _rand(gen, d)])
        cases.append((_rand(gen, k), W))
    for v, W in cases:
        H = P.hessian(W[None], v[None], a)[0]
        Ha = torch.func.hessian(_loss_flat(a, k, d))(P.flatten_params(W, v))
        assert torch.allclose(H, Ha, atol=1e-9 * (1 + Ha.abs().max()), rtol=0), (H - Ha).abs().max()
        assert torch.allclose(H, H.T, atol=1e-14)


def test_hessian_at_exact_alignment_is_continuous(gen):
    """At θ = 0 and θ = π autograd cannot help; the closed form must be the limit of nearby values."""
    k, d = 3, 4
    a, w, v = _rand(gen, d), _rand(gen, d), _rand(gen, k)
    W0 = torch.stack([w, 2 * w, -w])
    H0 = P.hessian(W0[None], v[None], a)[0]
    assert torch.isfinite(H0).all()
    for eps in (1e-4, 1e-6, 1e-8):
        We = W0 + eps * _rand(gen, k, d)
        He = P.hessian(We[None], v[None], a)[0]
        assert (He - H0).abs().max() < 50 * eps


def test_kernel_limits_and_autograd_at_alignment(gen):
    d = 7
    u = _rand(gen, d)
    assert torch.allclose(P.relu_kernel(u, 3 * u), 1.5 * u.norm() ** 2, rtol=1e-15)
    assert P.relu_kernel(u, -2 * u).abs() < 1e-15
    assert torch.allclose(P.relu_kernel_grad(u, 3 * u), 1.5 * u, atol=1e-14)
    assert P.relu_kernel_grad(u, -u).abs().max() < 1e-15
    # autograd through the loss with two identical neurons: finite and equal to the closed form
    v = torch.tensor([[0.5, -1.5]], dtype=DT)
    W = torch.stack([u, u])[None].requires_grad_()
    g = torch.autograd.grad(P.loss(W, v, _rand(gen, d)).sum(), W)[0]
    assert torch.isfinite(g).all()
    # the angle is accurate at tiny θ (arccos would return 0 or lose half the digits)
    e = torch.zeros(d, dtype=DT)
    e[0], u2 = 1.0, torch.zeros(d, dtype=DT)
    u2[0], u2[1] = 1.0, 1e-9
    assert math.isclose(P.angle(e, u2).item(), 1e-9, rel_tol=1e-12)


def test_zero_neuron_conventions(gen):
    d = 4
    w, a = _rand(gen, d), _rand(gen, d)
    z = torch.zeros(d, dtype=DT)
    assert P.relu_kernel(z, w) == 0 and P.relu_kernel_grad(z, w).abs().max() == 0
    assert torch.allclose(P.gate_second_moment(z, w), torch.eye(d, dtype=DT) / 2)
    assert torch.allclose(P.gate_second_moment(z, z), torch.eye(d, dtype=DT))
    v = torch.tensor([[1.0, -1.0]], dtype=DT)
    W = torch.stack([w, z])[None]
    gW, gv = P.gradient(W, v, a)
    assert gW[0, 1].abs().max() == 0 and torch.isfinite(P.hessian(W, v, a)).all()


@pytest.mark.parametrize("rel", ["random", "aligned", "anti"])
def test_closed_forms_against_monte_carlo(gen, rel):
    d, n = 4, 400_000
    u = _rand(gen, d)
    w = {"random": _rand(gen, d), "aligned": 2 * u + 1e-3 * _rand(gen, d), "anti": -u + 1e-3 * _rand(gen, d)}[rel]
    g = torch.Generator().manual_seed(7)

    def sample(x):
        ru, rw = torch.relu(x @ u), torch.relu(x @ w)
        gu, gw = (x @ u >= 0).to(DT), (x @ w >= 0).to(DT)
        xx = (x[:, :, None] * x[:, None, :]).flatten(1)
        return torch.cat([(ru * rw)[:, None], gu[:, None] * rw[:, None] * x, (gu * gw)[:, None] * xx], dim=1)

    m, se = P.mc_mean(sample, d, n, generator=g, batch=100_000)
    exact = torch.cat([P.relu_kernel(u, w)[None], P.relu_kernel_grad(u, w), P.gate_second_moment(u, w).flatten()])
    z = ((m - exact) / torch.clamp(se, min=1e-300)).abs()
    assert (z[se > 0] < 5).all(), z.max()  # 4 s.e. per entry; 5 leaves room for 21 entries at once
    assert ((m - exact).abs()[se == 0] < 1e-12).all()


def test_loss_against_monte_carlo(gen):
    E, k, d = 3, 3, 5
    v, W, a = _rand(gen, E, k), _rand(gen, E, k, d), _rand(gen, d)
    m, se = P.mc_mean(lambda x: 0.5 * P.network_mc(W, v, a, x)[1].T ** 2, d, 400_000, generator=torch.Generator().manual_seed(3))
    assert (((m - P.loss(W, v, a)) / se).abs() < 4).all()


@pytest.mark.parametrize("c", [None, 0.3, 2.0, -1.2, -4.0])
def test_theorem1_families_are_stationary(c):
    a = torch.zeros(6, dtype=DT)
    a[0] = 1.3
    W, v = P.paper_point(c, torch.tensor([0.5, 2.0], dtype=DT), torch.tensor([1.5, 0.4], dtype=DT), a)
    gW, gv = P.gradient(W, v, a)
    assert gv.abs().max() < 1e-13 and gW.abs().max() < 1e-13
    L = P.loss(W, v, a)
    ev = torch.linalg.eigvalsh(P.hessian(W, v, a))
    assert (ev.min(-1).values > -1e-12).all()
    if c is None:
        assert (L.abs() < 1e-14).all()
    else:
        assert torch.allclose(L, torch.full_like(L, 0.25 * 1.3**2))  # ½ E[ReLU(∓aᵀx)²] = ‖a‖²/4
        assert ((ev.abs() < 1e-10).sum(-1) > 0).all()


def test_gd_closures_run():
    from companion import gd

    a = torch.zeros(3, dtype=DT)
    a[0] = 1
    W0 = 1e-3 * torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    for form in ("kahan", "gram"):
        f = P.make_loss_and_grad(a, fixed_v=torch.tensor([1.0, -1.0], dtype=DT), form=form)
        res = gd.run(f, [W0], 3000, 0.5)
        assert (res.history["loss"][-1] < 1e-8).all()
        res = gd.run(P.make_loss_and_grad(a, form=form), [W0[:1], torch.tensor([[0.1, -0.1]], dtype=DT)], 10, 0.1)
        assert torch.isfinite(res.history["loss"]).all()


def test_bad_input_raises():
    v, W, a = torch.zeros(2, 3, dtype=DT), torch.zeros(2, 3, 4, dtype=DT), torch.zeros(4, dtype=DT)
    with pytest.raises(ValueError):
        P.loss(W, v, torch.zeros(5, dtype=DT))  # wrong d
    with pytest.raises(ValueError):
        P.gradient(torch.zeros(2, 2, 4, dtype=DT), v, a)  # k mismatch
    with pytest.raises(ValueError):
        P.loss(v, W, a)  # the old (v, W) order is refused
    with pytest.raises(ValueError):
        P.relu_kernel(torch.zeros(3, dtype=DT), torch.zeros(4, dtype=DT))
    with pytest.raises(ValueError):
        P.hessian(W.clone().fill_(float("nan")), v, a)
    with pytest.raises(ValueError):
        P.paper_point(1.0, -1.0, 1.0, a)  # paper's v1, v2 are positive
    with pytest.raises(ValueError):
        P.loss(W.to(torch.long), v, a)
    with pytest.raises(ValueError):
        P.make_loss_and_grad(a, form="arccos")
    with pytest.raises(ValueError):
        P.make_loss_and_grad(torch.zeros(2, 4, dtype=DT), form="kahan")  # Kahan form: one output only
    with pytest.raises(ValueError):
        P.make_loss_and_grad(a)([torch.zeros(2, 3, 5, dtype=DT), v])  # d mismatch at the first call


def test_classify_stationary_labels_constructed_points():
    a = torch.zeros(3, dtype=DT)
    a[0] = 1.0
    pts = [P.paper_point(None, 1.0, 2.0, a), P.paper_point(0.5, 1.0, 1.0, a), P.paper_point(-2.0, 0.5, 3.0, a)]
    same = (torch.tensor([1.0, 2.0], dtype=DT), torch.stack([0.4 * a, 0.3 * a]))  # v1 w1 + v2 w2 = a, v > 0
    dead = (torch.tensor([1.0, 0.0], dtype=DT), torch.stack([a, a]))  # second neuron contributes 0
    off = (torch.tensor([1.0, -1.0], dtype=DT), torch.stack([a + torch.tensor([0, 0.3, 0], dtype=DT), -a]))
    W = torch.stack([p[0] for p in pts] + [same[1], dead[1], off[1]])
    v = torch.stack([p[1] for p in pts] + [same[0], dead[0], off[0]])
    gW, gv = P.gradient(W, v, a)
    labels, c = P.classify_stationary(W, v, a, P.flatten_params(gW, gv).norm(dim=-1))
    assert labels == [P.CLASSES[0], P.CLASSES[1], P.CLASSES[2], P.CLASSES[3], P.CLASSES[4], P.CLASSES[5]]
    assert math.isclose(c[1].item(), 0.5) and math.isclose(c[2].item(), -2.0)


def test_kahan_closure_k2_matches_the_general_closed_forms(gen):
    """The k = 2 pair-by-pair path of make_loss_and_grad(form="kahan") agrees with loss_and_gradient, including
    exactly aligned, anti-aligned and zero neurons."""
    d = 5
    a = _rand(gen, d)
    w = _rand(gen, d)
    W = torch.cat([_rand(gen, 6, 2, d), torch.stack([torch.stack([w, 2 * w]), torch.stack([w, -w]), torch.stack([w, 0 * w])])])
    v = _rand(gen, len(W), 2)
    value, (gW, gv) = P.make_loss_and_grad(a, form="kahan")([W, v])
    L, rW, rv = P.loss_and_gradient_wv(W, v, a)
    assert torch.allclose(value, L, atol=1e-13) and torch.allclose(gW, rW, atol=1e-13) and torch.allclose(gv, rv, atol=1e-13)
    assert (gW[-1, 1] == 0).all()  # the zero neuron's gate is 0


def test_stationarity_ratio_is_rounding_at_exact_points_and_large_elsewhere(gen):
    a = torch.zeros(6, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([0.5, 3.0, -2.0, -11.0], dtype=DT), 0.7, 2.5, a)
    assert P.stationarity_ratio(W, v, a).max() < 4
    W2 = W + 1e-6 * _rand(gen, *W.shape)
    assert P.stationarity_ratio(W2, v, a).min() > 1e4
    S = P.stationarity_scale(W, v, a)
    assert torch.allclose(S, P.flatten_params(W, v).norm(dim=-1) * ((v.abs() * W.norm(dim=-1)).sum(-1) + 1))


def test_hessian_order_is_W_then_v(gen):
    k, d = 3, 4
    W, v, a = _rand(gen, k, d), _rand(gen, k), _rand(gen, d)
    H = P.hessian(W, v, a)
    th = P.flatten_params(W, v)
    assert torch.equal(th[: k * d], W.flatten()) and torch.equal(th[k * d :], v)
    Wb, vb = P.unflatten_params(th, k, d)
    assert torch.equal(Wb, W) and torch.equal(vb, v)
    K = torch.stack([torch.stack([P.relu_kernel(W[i], W[j]) for j in range(k)]) for i in range(k)])
    assert torch.allclose(H[k * d :, k * d :], K, atol=1e-15)  # ∂²L/∂v∂v = K, the last block


def test_loss_and_gradient_is_loss_and_gradient(gen):
    W, v, a = _rand(gen, 4, 3, 5), _rand(gen, 4, 3), _rand(gen, 5)
    L, gW, gv = P.loss_and_gradient_wv(W, v, a)
    rW, rv = P.gradient(W, v, a)
    assert torch.equal(L, P.loss(W, v, a)) and torch.equal(gW, rW) and torch.equal(gv, rv)


def test_gram_form_matches_kahan_form_one_and_r_outputs(gen):
    """The E·k²·d Gram form agrees with the reference closed forms; for r outputs the loss is the sum of the
    single-output losses of the output coordinates."""
    E, k, d, r = 4, 5, 6, 3
    W, v, a = _rand(gen, E, k, d), _rand(gen, E, k), _rand(gen, d)
    value, gW, gv = P.gram_loss_and_gradient(W, v, a)
    L, rW, rv = P.loss_and_gradient_wv(W, v, a)
    assert torch.allclose(value, L, atol=1e-13) and torch.allclose(gW, rW, atol=1e-13) and torch.allclose(gv, rv, atol=1e-13)
    A = torch.linalg.qr(_rand(gen, d, r))[0].T  # (r, d), orthonormal rows
    V = _rand(gen, E, k, r)
    value, gW, gV = P.gram_loss_and_gradient(W, V, A)
    parts = [P.loss_and_gradient_wv(W, V[..., j], A[j]) for j in range(r)]
    assert torch.allclose(value, sum(p[0] for p in parts), atol=1e-12)
    assert torch.allclose(gW, sum(p[1] for p in parts), atol=1e-12)
    assert torch.allclose(gV, torch.stack([p[2] for p in parts], -1), atol=1e-12)
    f = P.make_loss_and_grad(A)
    value2, (gW2, gV2) = f([W, V])
    assert torch.equal(value2, value) and torch.equal(gW2, gW) and torch.equal(gV2, gV)
    f = P.make_loss_and_grad(A, fixed_v=V[0])  # (k, r) broadcast to every member
    value3, (gW3,) = f([W])
    assert torch.allclose(value3, P.gram_loss_and_gradient(W, V[0].expand(E, k, r), A)[0], atol=1e-15)


def test_kahan_closure_is_exact_at_aligned_neurons():
    """At a Theorem 1 saddle the two neurons are parallel: the Kahan closure's gradient is zero to rounding,
    the Gram form's is only zero to about the square root of the resolution."""
    a = torch.zeros(3, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(1.0, 1.0, 1.0, a)
    f = P.make_loss_and_grad(a, fixed_v=v, form="kahan")
    _, (gW,) = f([W[None]])
    assert gW.abs().max() < 1e-14


def test_several_tensors_must_share_device_and_dtype(gen):
    W, v, a = _rand(gen, 2, 3, 4), _rand(gen, 2, 3), _rand(gen, 4)
    meta = torch.empty(4, dtype=DT, device="meta")
    for fn in (
        P.loss,
        P.gradient,
        P.loss_and_gradient_wv,
        P.hessian,
        P.effective_error,
        P.stationarity_scale,
        P.stationarity_ratio,
    ):
        with pytest.raises(ValueError, match="meta"):
            fn(W, v, meta)
        with pytest.raises(ValueError):
            fn(W, v.float(), a)
    with pytest.raises(ValueError, match="meta"):
        P.gram_loss_and_gradient(W, v, meta)
    with pytest.raises(ValueError):
        P.make_loss_and_grad(a)([W, v.float()])
    with pytest.raises(ValueError):
        P.network_mc(W, v, a, torch.zeros(5, 4, dtype=torch.float32))
    Q = torch.eye(3, dtype=DT)
    for fn in (lambda A, B: P.min_over_target(A, B, 0.05), P.extreme_ratio_over_target):
        with pytest.raises(ValueError, match="meta"):
            fn(Q, torch.eye(3, dtype=DT, device="meta"))
        with pytest.raises(ValueError):
            fn(Q, Q.float())
    with pytest.raises(ValueError, match="meta"):
        P.lemma_terms(W[:, :2], torch.zeros(4, dtype=DT, device="meta"))


def test_target_forms_reproduce_the_terms_for_any_target(gen):
    """Each side of Lemmas 8, 12, 13 is an exact quadratic form in (a, 1) for targets in the plane."""
    Wt = P.effective_pair(
        torch.tensor([0.3, 1.0, 4.0], dtype=DT), torch.tensor([0.2, 1.7, 3.0], dtype=DT), device="cpu", dtype=DT
    )
    F = P.target_forms(Wt)
    a = _rand(gen, 3, 2)
    x = torch.cat([a, torch.ones(3, 1, dtype=DT)], -1)
    T = P.lemma_terms(Wt, a)
    for key in ("L", "grad2", "err"):
        assert torch.allclose(torch.einsum("bi,bij,bj->b", x, F[key], x), T[key], rtol=1e-12, atol=1e-13), key


def test_lemma_terms_match_the_network_functions(gen):
    W, a = _rand(gen, 4, 2, 5), _rand(gen, 5)
    T = P.lemma_terms(W, a)
    v = torch.tensor([1.0, -1.0], dtype=DT).expand(4, 2)
    L, gW, _ = P.loss_and_gradient_wv(W, v, a)
    assert torch.allclose(T["L"], L) and torch.allclose(T["grad2"], (gW**2).sum((-1, -2)))
    assert torch.allclose(T["err"], P.effective_error(W, v, a))


def test_min_and_extreme_ratio_over_target(gen):
    """Against brute force over a grid of targets."""
    F = P.target_forms(P.effective_pair(2.0, 2.0, device="cpu", dtype=DT))
    g = torch.linspace(-6, 6, 401, dtype=DT)
    A1, A2 = torch.meshgrid(g, g, indexing="ij")
    x = torch.stack([A1.flatten(), A2.flatten(), torch.ones(A1.numel(), dtype=DT)], -1)
    q = lambda M: torch.einsum("bi,ij,bj->b", x, M, x)
    brute_min = (q(F["L"]) - 0.05 * q(F["err"])).min()
    exact_min = P.min_over_target(F["L"], F["err"], 0.05)
    assert exact_min <= brute_min + 1e-12 and brute_min - exact_min < 1e-3
    ratio = q(F["L"]) / q(F["err"])
    assert P.extreme_ratio_over_target(F["L"], F["err"]) <= ratio.min() + 1e-12
    assert P.extreme_ratio_over_target(F["grad2"], F["err"], largest=True) >= (q(F["grad2"]) / q(F["err"])).max() - 1e-12
    singular = torch.zeros(3, 3, dtype=DT)
    assert torch.isnan(P.extreme_ratio_over_target(F["L"], singular))


def test_lemma9_constant():
    assert math.isclose(P.lemma9_constant(0.5, 2.0), 2 + (12 + 10 / math.pi + 16 / math.pi) * 4)
    with pytest.raises(ValueError):
        P.lemma9_constant(0.0, 2.0)
