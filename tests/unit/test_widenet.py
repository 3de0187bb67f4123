"""Unit tests of companion.widenet (paper C's width-m networks, ch-parameter-ball)."""

import math

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.func import hessian, jacrev, jvp

from companion import curvature, device, paramlist
from companion import widenet as wn

DT = torch.float64


def _setup(gen, arch, m=7, H=3, d=4, n=5, E=2, act="tanh"):
    net = wn.Net(arch, act)
    p = wn.init_params(d, m, H, E, generator=gen, dtype=DT, device="cpu")
    X = wn.sphere_inputs(n, d, generator=gen, dtype=DT, device="cpu")
    return net, p, X


def _member(p, e):
    return [v[e : e + 1] for v in p]


def _flat_fn(p1, x, net):
    shapes = [v.shape for v in p1]
    sizes = [v.numel() for v in p1]

    def f(vec):
        parts = torch.split(vec, sizes)
        return wn.forward([t.reshape(s) for s, t in zip(shapes, parts)], x.reshape(1, -1), net)[0, 0]

    return f, torch.cat([v.reshape(-1) for v in p1])


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_grams_match_jacrev(gen, arch, act):
    net, p, X = _setup(gen, arch, act=act)
    K, G, lg = wn.ntk(p, X, net), wn.last_layer_gram(p, X, net), wn.layer_grams(p, X, net)
    for e in range(2):
        J = jacrev(lambda q: wn.forward(q, X, net)[0])(_member(p, e))
        Jf = torch.cat([Jk.reshape(X.shape[0], -1) for Jk in J], 1)
        JH = J[2].reshape(X.shape[0], -1)  # W3
        assert torch.allclose(Jf @ Jf.T, K[e], atol=1e-12, rtol=0)
        assert torch.allclose(JH @ JH.T, G[e], atol=1e-12, rtol=0)
        assert torch.allclose(lg[2][e], G[e], atol=1e-12, rtol=0)
    assert torch.allclose(wn.jacobian_norm(p, X, net) ** 2, torch.linalg.eigvalsh(K)[:, -1])


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("stored", [True, False], ids=["stored-basis", "three-vector"])
def test_hvp_lanczos_and_eigenvector_match_dense_hessian(gen, arch, stored, monkeypatch):
    """output_hessian_norm = dense Hessian, on both paths of the switch: the Ritz vector from the stored Krylov basis
    or by a second pass of the three-vector recurrence (BASIS_BYTES); the R-operator products it uses equal the
    generic forward-over-reverse and double-backward products."""
    monkeypatch.setattr(wn, "BASIS_BYTES", 2**40 if stored else 0)
    net, p, X = _setup(gen, arch)
    v = wn.random_direction(p, 1.0, generator=gen)
    hv_r = wn.output_hvp(p, X[0], v, net)
    for method in ("autograd", "func"):
        for a, b in zip(hv_r, wn.output_hvp(p, X[0], v, net, method=method)):
            assert torch.allclose(a, b, atol=1e-12, rtol=0)
    norm, hist, vec = wn.output_hessian_norm(p, X[0], net, iters=60, generator=gen, return_history=True, return_vector=True)
    assert hist.shape == (2, 60) and torch.all(hist.diff(dim=1) >= -1e-10)
    for e in range(2):
        f, flat = _flat_fn(_member(p, e), X[0], net)
        ev = torch.linalg.eigvalsh(hessian(f)(flat))
        assert abs(norm[e] - ev.abs().max()) <= 1e-8 * ev.abs().max()
    Hv = wn.output_hvp(p, X[0], vec, net)
    lam = paramlist.dot(Hv, vec)
    resid = paramlist.sq_norm([h - lam.view(-1, *([1] * (h.ndim - 1))) * u for h, u in zip(Hv, vec)]).sqrt()
    assert torch.all(resid <= 1e-6 * norm) and torch.allclose(lam.abs(), norm, rtol=1e-8)


def test_output_hessian_norm_is_curvature_lanczos(gen):
    """The chapter's Hessian norm is companion.curvature.lanczos on the flattened operator (full reorthogonalisation
    gives the same extremes)."""
    net, p, X = _setup(gen, "fc", m=5, H=2)
    shapes = [tuple(v.shape[1:]) for v in p]

    def mv_flat(q):
        return curvature.flatten(wn.output_hvp(p, X[1], curvature.unflatten(q, shapes), net))

    P_ = sum(math.prod(s) for s in shapes)
    ritz = curvature.lanczos(mv_flat, 2, P_, P_, generator=gen)
    norm = wn.output_hessian_norm(p, X[1], net, iters=40, generator=gen)
    assert torch.allclose(norm, torch.maximum(ritz[:, 0].abs(), ritz[:, -1]), rtol=1e-8)


@pytest.mark.parametrize("arch", ["fc", "res"])
def test_dense_references_loss_hessian_and_identity(gen, arch):
    """JJ^T, G_H, output and loss Hessian norms and the identity ∇²L = JᵀJ + Σ r_i ∇²f_i against dense references."""
    net, p, X = _setup(gen, arch, m=6, H=3, n=4)
    y = device.randn(4, generator=gen, dtype=DT, device="cpu")
    err = wn.dense_reference_errors(p, X, y, net, generator=gen)
    assert max(err.values()) <= 1e-10, err


def test_loss_hvp_splits_into_gauss_newton_and_curvature(gen):
    net, p, X = _setup(gen, "fc")
    y = device.randn(X.shape[0], generator=gen, dtype=DT, device="cpu")
    v = wn.random_direction(p, 1.0, generator=gen)
    r = (wn.forward(p, X, net) - y).detach()
    Jv = wn.jvp_outputs(p, X, v, net)  # (E, n)
    JtJv = torch.func.grad(lambda q: (wn.forward(q, X, net) * Jv).sum())(p)
    curv = wn.weighted_output_hvp(p, X, r, v, net)
    hv = wn.loss_hvp(p, X, y, v, net)
    for a, b, c in zip(hv, JtJv, curv):
        assert torch.allclose(a, b + c, atol=1e-12, rtol=0)


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("H", [1, 2, 3])
@pytest.mark.parametrize("shared", [True, False], ids=["shared-inputs", "own-inputs"])
def test_rop_products_equal_double_backward(gen, arch, H, shared):
    """The R-operator products of the Lanczos runs (weighted output Hessian, loss Hessian with its Gauss-Newton part)
    equal the generic double backward of weighted_output_hvp and loss_hvp, at every depth, with inputs shared by the
    members or one set per member."""
    net = wn.Net(arch, "tanh", 1.0)
    E, n = 3, 5
    p = wn.init_params(4, 7, H, E, generator=gen, dtype=DT, device="cpu")
    X = wn.sphere_inputs(n, 4, generator=gen, dtype=DT, device="cpu")
    X = X if shared else wn.sphere_inputs(E * n, 4, generator=gen, dtype=DT, device="cpu").reshape(E, n, 4)
    Xb = X.unsqueeze(0) if shared else X
    y = device.randn(n, generator=gen, dtype=DT, device="cpu")
    c = device.randn((E, n), generator=gen, dtype=DT, device="cpu")
    v = wn.random_direction(p, 1.0, generator=gen)
    r = (wn.forward(p, X, net) - y).detach().expand(E, n).contiguous()
    pairs = [
        (wn._rop_hvp_fn(p, Xb, net, c)(v), wn.weighted_output_hvp(p, X, c, v, net)),
        (wn._rop_hvp_fn(p, Xb, net, r, gauss_newton=True)(v), wn.loss_hvp(p, X, y, v, net)),
    ]
    for got, ref in pairs:
        for a, b in zip(got, ref):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-12, rtol=0)


def test_per_member_inputs_and_batched_hessian_norms(gen):
    """X of shape (E, n, d): member e sees its own inputs; output_hessian_norms = one run per input."""
    net, p, _ = _setup(gen, "res")
    X = wn.sphere_inputs(10, 4, generator=gen, dtype=DT, device="cpu").reshape(2, 5, 4)
    for e in range(2):
        assert torch.allclose(wn.ntk(p, X, net)[e], wn.ntk(_member(p, e), X[e], net)[0], atol=1e-14, rtol=0)
    a = wn.output_hessian_norms(p, X, net, iters=60, generator=gen)
    b = torch.stack([wn.output_hessian_norm(p, X[:, i], net, iters=60, generator=gen) for i in range(5)], 1)
    assert a.shape == (2, 5) and torch.allclose(a, b, rtol=1e-8)
    with pytest.raises(ValueError, match="X must have shape"):
        wn.ntk(p, X[:1], net)


def test_feature_and_backward_drift(gen):
    """Zero at h = 0; linear in h for small h; the last backward vector is a, so its drift is |Δa|."""
    net, p, X = _setup(gen, "fc", m=16, H=3)
    h = wn.random_direction(p, 1e-4, generator=gen)
    zero = [torch.zeros_like(v) for v in p]
    assert all(torch.all(v == 0) for v in wn.feature_drift(p, X, zero, net).values())
    f1, f2 = wn.feature_drift(p, X, h, net), wn.feature_drift(p, X, paramlist.scale_to(h, 2e-4), net)
    for k in ("x", "z"):
        assert f1[k].shape == (2, 3) and torch.allclose(f2[k] / f1[k], torch.full_like(f1[k], 2.0), rtol=1e-3)
    bd = wn.backward_drift(p, X, h, net)
    assert torch.allclose(bd["drift"][:, -1], h[-1].norm(dim=1))
    b0 = wn.backward_vectors(p, X, net)
    l2 = torch.stack([b.norm(dim=-1).max(-1).values for b in b0], -1)
    at_zero = wn.backward_drift(p, X, zero, net)
    assert torch.allclose(at_zero["l2"], l2)
    rms = torch.stack([(b**2).sum(-1).mean(-1).sqrt() for b in b0], -1)  # over the inputs, per layer
    assert torch.allclose(at_zero["l2_rms"], rms) and bool((at_zero["l2_rms"] <= at_zero["l2"] + 1e-12).all())
    assert torch.allclose(at_zero["l2_rms"][:, -1], p[-1].norm(dim=1))  # b_H = a for every input


def test_jvp_and_taylor_remainder(gen):
    net, p, X = _setup(gen, "res")
    h = wn.random_direction(p, 1e-2, generator=gen)
    ref = jvp(lambda q: wn.forward(q, X, net), (p,), (h,))[1]
    assert torch.allclose(wn.jvp_outputs(p, X, h, net), ref, atol=1e-14, rtol=0)
    r1 = wn.taylor_remainder(p, X, h, net)
    r2 = wn.taylor_remainder(p, X, paramlist.scale_to(h, 5e-3), net)
    assert torch.allclose(r1 / r2, torch.full_like(r1, 4.0), rtol=0.05)  # second order


def test_c_sigma_normalises_the_first_layer(gen):
    assert abs(wn.c_sigma("tanh") * 0.394294 - 1) < 1e-4  # E tanh(g)^2 = 0.394294...
    net = wn.Net("fc", "tanh")
    p = wn.init_params(6, 4000, 2, 1, generator=gen, dtype=DT, device="cpu")
    X = wn.sphere_inputs(3, 6, generator=gen, dtype=DT, device="cpu")
    xs = wn._forward(p, X, net)[1]
    assert torch.allclose((xs[1] ** 2).sum(-1), torch.ones(1, 3, dtype=DT), rtol=0.1)


def test_ascent_direction_moves_gram_more_than_random(gen):
    net, p, X = _setup(gen, "fc", m=64, H=2)
    G0 = wn.last_layer_gram(p, X, net)
    adv = wn.gram_drift(wn.last_layer_gram(paramlist.add(p, wn.gram_ascent_direction(p, X, 0.1, net)), X, net), G0)[1]
    rnd = wn.gram_drift(wn.last_layer_gram(paramlist.add(p, wn.random_direction(p, 0.1, generator=gen)), X, net), G0)[1]
    assert torch.all(adv > rnd)


def test_ball_measurements_keys_and_shapes(gen):
    net, p, X = _setup(gen, "fc", m=16, H=2)
    out = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=gen, ball_hessian=True)
    assert {"gram_adv_entry", "hess", "hess_ball", "taylor", "feat_x", "feat_z", "back_drift", "resid", "M", "J"} <= set(out)
    assert all(v.shape == (2,) and torch.isfinite(v).all() for v in out.values())
    y = device.randn(X.shape[0], generator=gen, dtype=DT, device="cpu")
    lo = wn.loss_hessian_measurements(p, X, y, 0.5, net, iters=12, generator=gen)
    assert all(v.shape == (2,) and torch.isfinite(v).all() for v in lo.values())
    assert torch.all(lo["hess_loss"] <= lo["bound"] * (1 + 1e-9))  # the bound, with measured factors
    assert torch.all(lo["r_up"] <= lo["r0"] + 0.5 * lo["Jmax"] * 1.01)  # residual bound along the segment
    assert torch.all(lo["r_up"] > lo["r0"]) and torch.all(lo["r"] < lo["r0"])  # up and down the gradient


def test_sweep_point_is_reproducible():
    a = wn.sweep_point(16, 2, 0.5, n=4, d=3, members=2, data_seed=0, init_seed=1, iters=6)
    b = wn.sweep_point(16, 2, 0.5, n=4, d=3, members=2, data_seed=0, init_seed=1, iters=6)
    assert all((a[k] == b[k]).all() for k in a) and a["J"].shape == (2,)


def test_sweep_point_first_order_value_is_the_linear_drift():
    """gram_entry_linear is D max_ij ||grad G_ij(theta0)||: linear in D, and the drift after the first-order step
    (gram_entry_first) agrees with it to first order in D."""
    kw = dict(n=4, d=3, members=2, data_seed=0, init_seed=1, iters=6, hessian=False)
    small, large = (wn.sweep_point(16, 2, D, **kw) for D in (1e-4, 2e-4))
    assert np.allclose(large["gram_entry_linear"], 2 * small["gram_entry_linear"], rtol=1e-12)
    assert np.allclose(small["gram_entry_first"], small["gram_entry_linear"], rtol=1e-3)


def test_sweep_draws_are_the_sweep_points_draws():
    """A longer search on sweep_draws reproduces the sweep point's entrywise maximum at the sweep's own steps."""
    point = wn.sweep_point(16, 2, 0.5, n=4, d=3, members=2, data_seed=0, init_seed=1, iters=6, hessian=False)
    params, X, y = wn.sweep_draws(16, 2, n=4, d=3, members=2, data_seed=0, init_seed=1)
    assert X.shape == (2, 4, 3) and y.shape == (2, 4)
    steps = wn.gram_entry_ascent(params, X, 0.5, wn.Net(), refine=4 * wn.ENTRY_REFINE)["steps"]
    assert torch.equal(steps[wn.ENTRY_REFINE], torch.as_tensor(point["gram_entry"]))
    assert torch.all(steps[-1] >= steps[wn.ENTRY_REFINE])  # the best found never falls with more steps


def test_device_and_dtype_mixes_are_named(gen):
    """Several tensors in one call: a ValueError naming both (float32 and meta-device stand-ins for a second device)."""
    net, p, X = _setup(gen, "fc")
    with pytest.raises(ValueError, match="X has dtype torch.float32 but params has dtype torch.float64"):
        wn.last_layer_gram(p, X.float(), net)
    with pytest.raises(ValueError, match="X is on meta but params is on cpu"):
        wn.forward(p, torch.zeros(X.shape, dtype=DT, device="meta"), net)
    h = wn.random_direction(p, 1.0, generator=gen)
    with pytest.raises(ValueError, match="has dtype torch.float32"):
        wn.jvp_outputs(p, X, [*h[:-1], h[-1].float()], net)
    with pytest.raises(ValueError, match="W2 is on meta but W1 is on cpu"):
        wn.forward([p[0], torch.zeros(p[1].shape, dtype=DT, device="meta"), *p[2:]], X, net)
    with pytest.raises(ValueError, match="coef has dtype"):
        wn.gradient_direction(p, X, 1.0, torch.ones(2, X.shape[0]), net)
    with pytest.raises(ValueError, match="G0 has dtype"):
        wn.gram_drift(torch.zeros(1, 2, 2, dtype=DT), torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="y is on meta"):
        wn.loss_hvp(p, X, torch.zeros(X.shape[0], dtype=DT, device="meta"), h, net)


def test_bad_inputs(gen):
    net, p, X = _setup(gen, "fc")
    with pytest.raises(ValueError, match="arch"):
        wn.Net("cnn")
    with pytest.raises(ValueError, match="smooth"):
        wn.Net("fc", "relu")
    with pytest.raises(ValueError, match="X must have shape"):
        wn.forward(p, X[:, :2], net)
    with pytest.raises(ValueError, match="params must be a list"):
        wn.forward(p[:1], X, net)
    with pytest.raises(ValueError, match="shape"):
        wn.forward([*p[:-1], p[-1][:, :3]], X, net)
    with pytest.raises(ValueError, match="W2 must have shape"):
        wn.forward([p[0], p[1][:, :3], *p[2:]], X, net)
    with pytest.raises(ValueError, match="targets"):
        wn.make_loss_and_grad(X, torch.zeros(X.shape[0] + 1, dtype=DT), net)
    with pytest.raises(ValueError, match="coef"):
        wn.gradient_direction(p, X, 1.0, torch.ones(2, 3, dtype=DT), net)
    with pytest.raises(ValueError, match="iters"):
        wn.output_hessian_norm(p, X[0], net, iters=0)
    with pytest.raises(ValueError, match="method"):
        wn.output_hvp(p, X[0], p, net, method="dense")
    with pytest.raises(ValueError, match="equal shapes"):
        wn.gram_drift(torch.zeros(1, 2, 2, dtype=DT), torch.zeros(1, 3, 3, dtype=DT))


def test_ball_measurements_flags(gen):
    """hessian=False skips every Lanczos quantity; taylor=False keeps the norm and drops the Ritz-vector ones."""
    net, p, X = _setup(gen, "fc", m=16, H=2)
    full = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3))
    none = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), hessian=False)
    no_t = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), taylor=False)
    assert not {"hess", "hess_conv", "taylor"} & set(none) and {"hess", "hess_conv"} <= set(no_t)
    assert "taylor" not in no_t and torch.allclose(no_t["hess"], full["hess"], rtol=1e-12)
    for k in none:
        assert torch.equal(none[k], full[k]), k
    more = wn.ball_measurements(
        p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), derivatives=True, products=True
    )
    assert set(more) - set(full) == {"deriv_x", "deriv_z", "deriv_conv", "deriv_x_layers", "deriv_z_layers", "prod", "prod_conv"}
    for key in ("x", "z"):  # the rows' values are the per-layer values' maxima
        assert more[f"deriv_{key}_layers"].shape == (p[0].shape[0], 2)
        assert torch.equal(more[f"deriv_{key}_layers"].max(1).values, more[f"deriv_{key}"])
    for k in full:  # the derivatives draw from a copy of the generator: every other value is unchanged
        assert torch.equal(more[k], full[k]), k
    alone = wn.ball_measurements(
        p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), hessian=False, derivatives=True
    )
    assert torch.equal(alone["deriv_x"], more["deriv_x"])  # and no flag moves them


def test_radius_measurements_reuse_one_direction(gen):
    """Each radius moves along the directions of ball_measurements (same draws): equal drifts at equal D; the
    drifts are linear and the Taylor remainder quadratic at small D."""
    net, p, X = _setup(gen, "fc", m=16, H=2)
    radii = [1e-4, 2e-4, 0.5]
    r = wn.radius_measurements(p, X, radii, net, iters=8, generator=torch.Generator().manual_seed(5))
    assert all(v.shape == (3, 2) for k, v in r.items() if k not in ("hess", "hess_conv"))
    b = wn.ball_measurements(p, X, 0.5, net, iters=8, generator=torch.Generator().manual_seed(5))
    for k in ("gram_adv_entry", "feat_z", "back_drift"):
        assert torch.allclose(r[k][2], b[k], rtol=1e-10), k
        assert torch.allclose(r[k][1] / r[k][0], torch.full((2,), 2.0, dtype=DT), rtol=1e-3), k
    assert torch.allclose(r["taylor"][1] / r["taylor"][0], torch.full((2,), 4.0, dtype=DT), rtol=1e-3)
    a = wn.radius_sweep(16, 2, radii, n=4, d=3, members=2, data_seed=0, init_seed=1, iters=6)
    assert a["taylor"].shape == (3, 2) and a["hess"].shape == (2,)
    with pytest.raises(ValueError, match="radii"):
        wn.radius_measurements(p, X, [0.1, 0.0], net)


def test_radius_exponent_recovers_the_exponent_with_its_corrections():
    """Y = c D^e (1 + κ1 D + κ2 D² + κ3 D³) per member: the exponent is recovered to within the widened interval,
    which excludes e ± 1; a bare log-log slope over the same radii is off by more than the widening."""
    radii = np.asarray([2.0**-k for k in range(10, 2, -1)])
    rng = np.random.default_rng(0)
    for e in (1.0, 2.0):
        k1, k2, k3 = rng.uniform(0.5, 3.0, (3, 8))
        Y = (
            rng.uniform(0.1, 1.0, 8)
            * radii[:, None] ** e
            * (1 + k1 * radii[:, None] + k2 * radii[:, None] ** 2 + k3 * radii[:, None] ** 3)
        )
        f = wn.radius_exponent(radii, Y, 0.999)
        assert f.contains(e) and not f.contains(e + 1) and not f.contains(e - 1)
        assert f.high - f.low < 1e-2
        bare = np.polyfit(np.log(radii), np.log(Y[:, 0]), 1)[0]
        assert abs(bare - e) > (f.high - f.low) / 2
    with pytest.raises(ValueError, match="R >= order"):
        wn.radius_exponent(radii[:4], Y[:4])
    with pytest.raises(ValueError, match="positive"):
        wn.radius_exponent(radii, -Y)


def _dense_gram_entry_ascent(params, X, D, net, refine):
    """The reference for the factored search: every entry's parameters copied and ascended with torch.func.grad on
    the full (dense) parameters."""
    E, n = X.shape[0], X.shape[1]
    rows, cols = torch.triu_indices(n, n)
    K = rows.numel()
    rep = [v.detach().repeat_interleave(K, 0) for v in params]
    Xp = torch.stack([X[:, rows], X[:, cols]], 2).reshape(E * K, 2, X.shape[-1])

    def entry(p):
        return wn.last_layer_gram(p, Xp, net)[:, 0, 1]

    g0 = entry(rep)
    h = torch.func.grad(lambda p: entry(p).sum())(rep)
    first = D * paramlist.sq_norm(h).sqrt().view(E, K).max(1).values
    rms = D * paramlist.sq_norm(h).view(E, K).mean(1).sqrt()
    dirs = [paramlist.scale_to(h, D), paramlist.scale_to([-t for t in h], D)]
    steps, entry_best = [], torch.zeros(E, K, dtype=X.dtype)
    for _ in range(refine + 1):
        vals = [(entry(paramlist.add(rep, u)) - g0).abs() for u in dirs]
        entry_best = torch.maximum(entry_best, torch.maximum(*vals).view(E, K))
        steps.append(torch.maximum(*vals).view(E, K).max(1).values)
        grads = [torch.func.grad(lambda p: entry(p).sum())(paramlist.add(rep, u)) for u in dirs]
        dirs = [paramlist.scale_to([s * t for t in gu], D) for s, gu in zip((1.0, -1.0), grads)]
    return torch.cummax(torch.stack(steps), 0).values, first, rms, entry_best[:, rows != cols].mean(1)


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("H", [1, 3])
def test_gram_entry_ascent_factored_equals_dense_reference(arch, H):
    g = torch.Generator().manual_seed(5)
    net = wn.Net(arch, "tanh", 1.0)
    X = wn.sphere_inputs(2 * 4, 3, generator=g, dtype=torch.float64).reshape(2, 4, 3)
    p = wn.init_params(3, 7, H, 2, generator=g, dtype=torch.float64)
    steps, first, rms, offdiag = _dense_gram_entry_ascent(p, X, 0.7, net, refine=2)
    found = wn.gram_entry_ascent(p, X, 0.7, net, refine=2, budget=200)  # several batches of entries
    torch.testing.assert_close(found["steps"], steps, rtol=1e-12, atol=0)
    torch.testing.assert_close(found["first_order"], first, rtol=1e-12, atol=0)
    torch.testing.assert_close(found["first_order_rms"], rms, rtol=1e-12, atol=0)
    assert bool((found["first_order_rms"] <= found["first_order"]).all())
    torch.testing.assert_close(found["offdiag_mean"], offdiag, rtol=1e-12, atol=0)
    assert bool((found["offdiag_mean"] <= found["entry"]).all())
    one = wn.gram_entry_ascent(p, X[:, :1], 0.7, net, refine=0)  # one input: no off-diagonal entry
    assert bool(one["offdiag_mean"].isnan().all()) and bool((one["entry"] > 0).all())


def test_gram_entry_ascent_beats_other_directions_and_is_first_order_at_small_radius():
    g = torch.Generator().manual_seed(3)
    net = wn.Net("fc", "tanh", 1.0)
    X = wn.sphere_inputs(3 * 5, 4, generator=g, dtype=torch.float64).reshape(3, 5, 4)
    p = wn.init_params(4, 16, 2, 3, generator=g, dtype=torch.float64)
    G0 = wn.last_layer_gram(p, X, net)
    found = wn.gram_entry_ascent(p, X, 0.5, net, refine=2, budget=2_000)  # several batches of entries
    assert found["entry"].shape == (3,) and found["steps"].shape == (3, 3)
    assert bool((found["steps"][1:] >= found["steps"][:-1]).all())
    for h in (wn.random_direction(p, 0.5, generator=g), wn.gram_ascent_direction(p, X, 0.5, net)):
        other = wn.gram_drift(wn.last_layer_gram(paramlist.add(p, h), X, net), G0)[0]
        assert bool((found["entry"] >= other).all())
    tiny = wn.gram_entry_ascent(p, X, 1e-6, net, refine=0)
    assert torch.allclose(tiny["entry"], tiny["first_order"], rtol=1e-4)
    with pytest.raises(ValueError, match="refine"):
        wn.gram_entry_ascent(p, X, 0.5, net, refine=-1)


def _dense_norms(J: Tensor) -> Tensor:
    return torch.linalg.matrix_norm(J, 2)


@pytest.mark.parametrize("arch", ["fc", "res"])
def test_feature_derivatives_and_layer_products_match_dense_jacobians(gen, arch):
    """sup_{|v|=1} |Dx_h[v]|, |Dz_h[v]| and |P_H ... P_h| against torch.func.jacrev (Lanczos run to m steps: exact)."""
    m, H, n = 9, 3, 3
    net, p, X = _setup(gen, arch, m=m, H=H, n=n)
    out = wn.feature_derivative_norms(p, X, net, iters=m, generator=gen)
    prod = wn.layer_product_norms(p, X, net, iters=m, generator=gen)
    assert out["x"].shape == out["z"].shape == (2, H) and prod["norm"].shape == (2, H - 1)
    for e in range(2):
        ref = {"x": torch.zeros(H, dtype=DT), "z": torch.zeros(H, dtype=DT), "prod": torch.zeros(H - 1, dtype=DT)}
        for i in range(n):
            xi = X[i : i + 1]
            for key, k in (("x", 1), ("z", 2)):
                J = jacrev(lambda q, k=k: torch.stack(wn._forward(q, xi, net)[k][-H:])[:, 0, 0])(_member(p, e))
                Jf = torch.cat([j.reshape(H, m, -1) for j in J], -1)  # (H, m, P): layer h's rows
                ref[key] = torch.maximum(ref[key], _dense_norms(Jf))
            xs = wn._forward(_member(p, e), xi, net)[1]
            for h in range(2, H + 1):  # P_H ... P_h = d x_H / d x_{h-1}

                def top(x_prev, h=h):
                    xt = {k: torch.zeros(1, 1, m, dtype=DT) for k in range(1, H + 1)}
                    xt[h - 1] = (x_prev - xs[h - 1][0, 0]).reshape(1, 1, m)
                    return wn._forward(_member(p, e), xi, net, None, xt)[1][H][0, 0]

                Jp = jacrev(top)(xs[h - 1][0, 0])
                ref["prod"][h - 2] = torch.maximum(ref["prod"][h - 2], _dense_norms(Jp))
        for key in ("x", "z"):
            assert torch.allclose(out[key][e], ref[key], rtol=1e-12, atol=0), key
        assert torch.allclose(prod["norm"][e], ref["prod"], rtol=1e-12, atol=0)
    assert torch.all(out["conv"] >= 1 - 1e-12) and torch.all(prod["conv"] >= 1 - 1e-12)  # estimates grow


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("H", [2, 3])
def test_backward_gradient_norms_match_dense_jacobians(gen, arch, H):
    """max_{i,k} |grad_theta b_{h,k}(x_i)| and its root mean square against jacrev of backward_vectors (the dense
    m x P Jacobian of each b_h, one member and input at a time); the top layer's b_H = a has gradient norm 1."""
    m, n = 6, 3
    net, p, X = _setup(gen, arch, m=m, H=H, n=n)
    out = wn.backward_gradient_norms(p, X, net, chunk=4)  # chunks of 4, 2: the split does not matter
    assert out["max"].shape == out["rms"].shape == (2, H)
    for e in range(2):
        sq = torch.zeros(H, n, m, dtype=DT)
        for i in range(n):
            J = jacrev(lambda q, i=i: torch.stack(wn.backward_vectors(q, X[i : i + 1], net))[:, 0, 0])(_member(p, e))
            sq[:, i] = sum(j.reshape(H, m, -1).square().sum(-1) for j in J)  # (H, m) per input
        assert torch.allclose(out["max"][e], sq.flatten(1).max(1).values.sqrt(), rtol=1e-12, atol=0)
        assert torch.allclose(out["rms"][e], sq.flatten(1).mean(1).sqrt(), rtol=1e-12, atol=0)
    assert torch.allclose(out["max"][:, -1], torch.ones(2, dtype=DT), rtol=1e-12)
    per_member = wn.backward_gradient_norms(p, X.expand(2, n, X.shape[-1]), net, chunk=m)  # (E, n, d) inputs
    assert torch.allclose(per_member["max"], out["max"], rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="chunk"):
        wn.backward_gradient_norms(p, X, net, chunk=0)


def test_back_gradients_flag_adds_one_value_and_moves_nothing(gen):
    net, p, X = _setup(gen, "res", m=8, H=2)
    base = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), hessian=False)
    more = wn.ball_measurements(
        p, X, 0.5, net, iters=6, generator=torch.Generator().manual_seed(3), hessian=False, back_gradients=True
    )
    assert set(more) - set(base) == {"back_grad"}
    for k in base:
        assert torch.equal(more[k], base[k]), k
    want = wn.backward_gradient_norms(p, X[:1], net)["max"].max(1).values  # the first input, every layer
    assert torch.equal(more["back_grad"], want)


def test_layer_products_need_depth_and_memory(gen, monkeypatch):
    net, p, X = _setup(gen, "fc", H=1)
    with pytest.raises(ValueError, match="H >= 2"):
        wn.layer_product_norms(p, X, net)
    net, p, X = _setup(gen, "fc", H=2)
    monkeypatch.setattr(wn, "BASIS_BYTES", 100)
    with pytest.raises(ValueError, match="exceed BASIS_BYTES"):
        wn.layer_product_norms(p, X, net)
    with pytest.raises(ValueError, match="iters"):
        wn.feature_derivative_norms(p, X, net, iters=0)
