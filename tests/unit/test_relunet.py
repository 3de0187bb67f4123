"""Tests of paper B's empirical network (companion.relunet; ch-three-phases to ch-beyond-two)."""

import math

import pytest
import torch

from companion import device, gd
from companion import relunet as rn


def _gen(seed=0):
    return device.generator(seed)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("r", [None, 3])
@pytest.mark.parametrize("scale", [1e-3, 1.0])
def test_explicit_gradient_matches_autograd(shared, r, scale):
    g = _gen(1)
    E, k, d, n = 5, 4, 7, 40
    A = rn.unit_target(d, device="cpu") if r is None else rn.orthonormal_rows(r, d, generator=g, device="cpu")
    X, Y = rn.gaussian_data(n, d, A, ensemble=None if shared else E, generator=g, device="cpu")
    W, V = rn.xavier_init(k, d, E, scale, r=r, generator=g, device="cpu")
    l1, gW1, gV1 = rn.loss_and_gradient_wv(W, V, X, Y)
    l2, gW2, gV2 = rn.loss_and_grad_autograd(W, V, X, Y)
    for x, y in ((l1, l2), (gW1, gW2), (gV1, gV2)):
        assert x.shape == y.shape
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-14 * max(1.0, y.abs().max().item()))


def test_feature_major_inputs_take_their_own_gemms_and_agree_to_rounding():
    """Per-member inputs stored feature-major (``X = Xt.mT``, as make_loss_and_grad keeps them) give the same loss
    and gradients as the sample-major layout to rounding, against autograd too; the closure holds that layout and
    its restriction keeps it."""
    g = _gen(4)
    E, k, d, n = 6, 2, 9, 50
    a = rn.unit_target(d, device="cpu")
    X, Y = rn.gaussian_data(n, d, a, ensemble=E, generator=g, device="cpu")
    W, V = rn.xavier_init(k, d, E, 1.0, generator=g, device="cpu")
    Xf = X.mT.contiguous().mT
    assert torch.equal(Xf, X) and not Xf.is_contiguous()
    ref = rn.loss_and_grad_autograd(W, V, X, Y)
    for got in (rn.loss_and_gradient_wv(W, V, X, Y), rn.loss_and_gradient_wv(W, V, Xf, Y)):
        for x, y in zip(got, ref):
            assert x.shape == y.shape and torch.allclose(x, y, rtol=1e-12, atol=1e-15)
    f = rn.make_loss_and_grad(X, Y)
    loss, (gW, gV) = f([W, V])
    want = rn.loss_and_gradient_wv(W, V, Xf, Y)
    assert torch.equal(loss, want[0]) and torch.equal(gW, want[1]) and torch.equal(gV, want[2])
    keep = torch.tensor([0, 3, 5])
    loss_r, (gW_r, _) = f.restrict(keep)([W[keep], V[keep]])
    assert torch.equal(loss_r, loss[keep]) and torch.allclose(gW_r, gW[keep], rtol=1e-13, atol=1e-16)


def test_closure_fixed_v_and_engine_agree_with_reference():
    g = _gen(2)
    E, d, n = 3, 5, 30
    a = rn.unit_target(d, device="cpu")
    X, Y = rn.gaussian_data(n, d, a, generator=g, device="cpu")
    W, v = rn.theorem2_init(d, E, 0.5, generator=g, device="cpu")
    f = rn.make_loss_and_grad(X, Y, fixed_v=v)
    value, (gW,) = f([W])
    _, gW_ref, _ = rn.loss_and_grad_autograd(W, v, X, Y)
    assert torch.allclose(gW, gW_ref, atol=1e-14)
    # one engine step equals one hand step
    res = gd.run(rn.make_loss_and_grad(X, Y), [W, v], 1, 0.1, progress=False)
    _, gW2, gv2 = rn.loss_and_grad_autograd(W, v, X, Y)
    assert torch.allclose(res.params[0], W - 0.1 * gW2, atol=1e-14)
    assert torch.allclose(res.params[1], v - 0.1 * gv2, atol=1e-14)


def test_inputs_are_not_modified():
    g = _gen(3)
    d = 4
    a = rn.unit_target(d, device="cpu")
    X, Y = rn.gaussian_data(20, d, a, generator=g, device="cpu")
    W, v = rn.xavier_init(3, d, 2, 1.0, generator=g, device="cpu")
    X0, Y0, W0, v0 = X.clone(), Y.clone(), W.clone(), v.clone()
    rn.loss_and_gradient_wv(W, v, X, Y)
    assert torch.equal(X, X0) and torch.equal(Y, Y0) and torch.equal(W, W0) and torch.equal(v, v0)


def test_theorem2_init_signs_scale_and_chi2():
    g = _gen(4)
    d, E, sigma = 50, 4000, 1e-3
    W, v = rn.theorem2_init(d, E, sigma, generator=g, device="cpu")
    assert W.shape == (E, 2, d) and v.shape == (E, 2)
    assert bool((v[:, 0] > 0).all()) and bool((v[:, 1] < 0).all())
    xi2 = (v / (sigma / math.sqrt(d))) ** 2  # should be chi^2_d: mean d, var 2d
    assert abs(xi2.mean().item() - d) < 4 * math.sqrt(2 * d / xi2.numel())
    assert abs(xi2.var().item() / (2 * d) - 1) < 0.1
    assert abs((W**2).sum(-1).mean().item() / sigma**2 - 1) < 0.02


def test_xavier_init_variances():
    g = _gen(5)
    k, d, E, s = 4, 100, 3000, 2.0
    W, V = rn.xavier_init(k, d, E, s, r=3, generator=g, device="cpu")
    assert V.shape == (E, k, 3)
    assert abs(W.var().item() / (s**2 * 2 / (k + d)) - 1) < 0.02
    assert abs(V.var().item() / (s**2 * 2 / (3 + k)) - 1) < 0.05


def test_orthonormal_rows():
    A = rn.orthonormal_rows(5, 20, generator=_gen(7), device="cpu")
    assert torch.allclose(A @ A.T, torch.eye(5, dtype=A.dtype), atol=1e-13)


def test_observers_at_planted_solution():
    d = 5
    a = rn.unit_target(d, device="cpu")
    c = torch.tensor([[2.0, 0.5]], dtype=torch.float64)
    v = torch.tensor([[2.0, -0.5]], dtype=torch.float64)
    W = torch.stack([a / 2.0, -a / 0.5]).unsqueeze(0)  # |v_i| w_i = ±a
    assert rn.planted_error(W, v, a).item() < 1e-15
    assert rn.angles_to_target(W, v, a).abs().max().item() < 1e-7
    assert torch.allclose(rn.imbalance(W, v), (W**2).sum(-1) - c**2)
    pos, neg = rn.grouped_sums(W, v)
    assert torch.allclose(pos, a.unsqueeze(0)) and torch.allclose(neg, -a.unsqueeze(0))
    X, Y = rn.gaussian_data(50, d, a, generator=_gen(8), device="cpu")
    assert rn.loss(W, v, X, Y).item() < 1e-28


def test_pairing_error():
    g = _gen(9)
    W0 = torch.randn(1, 3, 8, generator=g, dtype=torch.float64)
    V0 = torch.randn(1, 3, 3, generator=g, dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    W = torch.cat([W0, -W0], 1)[:, perm]
    V = torch.cat([V0, -V0], 1)[:, perm]
    err, pairs = rn.pairing_error(W, V)
    assert err.item() < 1e-15
    # position p holds original neuron perm[p]; original j pairs with original j + 3
    assert {(int(perm[i]) % 3, int(perm[j]) % 3) for i, j in pairs[0].tolist()} == {(0, 0), (1, 1), (2, 2)}
    err_rand, _ = rn.pairing_error(
        torch.randn(1, 6, 8, generator=g, dtype=torch.float64), torch.randn(1, 6, 3, generator=g, dtype=torch.float64)
    )
    assert err_rand.item() > 0.3


def test_gd_converges_small_problem():
    """Theorem 2 in miniature: Theorem 2's init, n = 10 d, GD reaches the planted solution."""
    g = _gen(10)
    d, n = 10, 100
    a = rn.unit_target(d, device="cpu")
    X, Y = rn.gaussian_data(n, d, a, generator=g, device="cpu")
    W, v = rn.theorem2_init(d, 4, 1e-3, generator=g, device="cpu")
    res = gd.run(rn.make_loss_and_grad(X, Y), [W, v], 1500, 0.1, progress=False)
    assert rn.planted_error(res.params[0], res.params[1], a).max().item() < 1e-6


def test_value_errors():
    g = _gen(11)
    d = 4
    a = rn.unit_target(d, device="cpu")
    X, Y = rn.gaussian_data(10, d, a, generator=g, device="cpu")
    W, v = rn.xavier_init(2, d, 3, 1.0, generator=g, device="cpu")
    with pytest.raises(ValueError, match="features"):
        rn.loss(W, v, X[:, :3], Y)
    with pytest.raises(ValueError, match="output weights"):
        rn.loss(W, v[:, :1], X, Y)
    with pytest.raises(ValueError, match="Y has shape"):
        rn.loss(W, v, X, Y[:5])
    with pytest.raises(ValueError, match="Y has shape"):
        rn.loss(W, v, X.expand(3, 10, d), Y)  # per-member X needs per-member Y
    with pytest.raises(ValueError, match="ensemble size"):
        rn.loss(W, v, X.expand(2, 10, d), Y.expand(2, 10))
    with pytest.raises(ValueError, match="signs"):
        rn.theorem2_init(d, 2, 1.0, signs=(1.0, 0.0))
    with pytest.raises(ValueError, match="r <= d"):
        rn.orthonormal_rows(5, 4)
    with pytest.raises(ValueError, match="params must be"):
        rn.make_loss_and_grad(X, Y)([W])
    with pytest.raises(ValueError, match="non-finite"):
        rn.gaussian_data(3, d, a * float("nan"))


def test_growth_sign():
    g = _gen(12)
    d = 6
    a = rn.unit_target(d, device="cpu")
    W, v = rn.xavier_init(3, d, 50, 1.0, generator=g, device="cpu")
    s = rn.growth_sign(W, v, a)
    assert torch.equal(s, torch.sign(v + W @ a))  # population: c = a/2, ĉ = a
    X, _ = rn.gaussian_data(200000, d, a, generator=g, device="cpu")
    s_emp = rn.growth_sign(W, v, a, X)  # data: c_i -> a/2 as n grows
    assert (s_emp == s).float().mean().item() > 0.97
    with pytest.raises(ValueError):
        rn.growth_sign(W, v[:, :, None], a)


@pytest.mark.parametrize("stand_in", ["meta", "float32"])
def test_mixed_devices_and_dtypes_raise_clear_errors(stand_in):
    """Every public function taking several tensors names the two that disagree (a meta tensor stands in for a
    second device, float32 for a second dtype)."""
    d, E, k = 4, 2, 2
    a = rn.unit_target(d, device="cpu", dtype=torch.float64)
    W, v = rn.theorem2_init(d, E, 0.1, generator=device.generator(0), device="cpu", dtype=torch.float64)
    X, Y = rn.gaussian_data(8, d, a, generator=device.generator(1), device="cpu", dtype=torch.float64)

    def other(t):
        return t.to("meta") if stand_in == "meta" else t.float()

    match = "is on meta" if stand_in == "meta" else "has dtype torch.float32"
    calls = [
        lambda: rn.loss(W, v, other(X), Y),
        lambda: rn.loss_and_gradient_wv(W, other(v), X, Y),
        lambda: rn.predict(W, v, other(X)),
        lambda: rn.loss_and_grad_autograd(W, v, X, other(Y)),
        lambda: rn.make_loss_and_grad(X, other(Y)),
        lambda: rn.make_loss_and_grad(X, Y, fixed_v=other(v)),
        lambda: rn.angles(W, other(a)),
        lambda: rn.angles_to_target(W, v, other(a)),
        lambda: rn.imbalance(W, other(v)),
        lambda: rn.planted_error(other(W), v, a),
        lambda: rn.grouped_sums(W, other(v)),
        lambda: rn.make_observers(a, fixed_v=other(v[0])),
        lambda: rn.growth_sign(W, v, a, other(X)),
        lambda: rn.pairing_error(W, other(v)),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=match):
            call()
    assert k == W.shape[1]
