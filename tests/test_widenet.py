"""Unit tests of companion.widenet (paper C's width-m networks, Chapter 13)."""
import math

import pytest
import torch
from torch.func import hessian, jacrev, jvp

from companion import curvature, widenet as wn

DT = torch.float64


def _setup(gen, arch, m=7, H=3, d=4, n=5, E=2, act="tanh"):
    net = wn.Net(arch, act)
    p = wn.init_params(d, m, H, E, generator=gen, dtype=DT, device_="cpu")
    X = wn.sphere_inputs(n, d, generator=gen, dtype=DT, device_="cpu")
    return net, p, X


def _member(p, e):
    return {k: v[e:e + 1] for k, v in p.items()}


def _flat_fn(p1, x, net):
    shapes = {k: v.shape for k, v in p1.items()}
    sizes = [v.numel() for v in p1.values()]

    def f(vec):
        parts = torch.split(vec, sizes)
        return wn.forward({k: t.reshape(shapes[k]) for k, t in zip(p1, parts)}, x.reshape(1, -1), net)[0, 0]
    return f, torch.cat([v.reshape(-1) for v in p1.values()])


@pytest.mark.parametrize("arch", ["fc", "res"])
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_grams_match_jacrev(gen, arch, act):
    net, p, X = _setup(gen, arch, act=act)
    K, G, lg = wn.ntk(p, X, net), wn.last_layer_gram(p, X, net), wn.layer_grams(p, X, net)
    for e in range(2):
        J = jacrev(lambda q: wn.forward(q, X, net)[0])(_member(p, e))
        Jf = torch.cat([J[k].reshape(X.shape[0], -1) for k in p], 1)
        JH = J["W3"].reshape(X.shape[0], -1)
        assert torch.allclose(Jf @ Jf.T, K[e], atol=1e-12, rtol=0)
        assert torch.allclose(JH @ JH.T, G[e], atol=1e-12, rtol=0)
        assert torch.allclose(lg["W3"][e], G[e], atol=1e-12, rtol=0)
    assert torch.allclose(wn.jacobian_norm(p, X, net) ** 2, torch.linalg.eigvalsh(K)[:, -1])


@pytest.mark.parametrize("arch", ["fc", "res"])
def test_hvp_lanczos_and_eigenvector_match_dense_hessian(gen, arch):
    net, p, X = _setup(gen, arch)
    v = wn.random_direction(p, 1.0, generator=gen)
    hv_a, hv_f = wn.output_hvp(p, X[0], v, net), wn.output_hvp(p, X[0], v, net, method="func")
    for k in p:
        assert torch.allclose(hv_a[k], hv_f[k], atol=1e-12, rtol=0)
    norm, vec = wn.output_hessian_norm(p, X[0], net, iters=60, generator=gen, return_vector=True)
    for e in range(2):
        f, flat = _flat_fn(_member(p, e), X[0], net)
        ev = torch.linalg.eigvalsh(hessian(f)(flat))
        assert abs(norm[e] - ev.abs().max()) <= 1e-8 * ev.abs().max()
    Hv = wn.output_hvp(p, X[0], vec, net)
    lam = wn.dot(Hv, vec)
    resid = wn.sq_norm({k: Hv[k] - wn._bc(lam, Hv[k]) * vec[k] for k in Hv}).sqrt()
    assert torch.all(resid <= 1e-6 * norm) and torch.allclose(lam.abs(), norm, rtol=1e-8)


def test_lanczos_agrees_with_shared_curvature_module(gen):
    """The low-memory dict Lanczos against companion.curvature's (full reorthogonalisation) on one operator."""
    net, p, X = _setup(gen, "fc", m=5, H=2)
    keys, shapes = list(p), [tuple(v.shape[1:]) for v in p.values()]

    def mv_flat(q):
        d = dict(zip(keys, curvature.unflatten(q, shapes)))
        return curvature.flatten([wn.output_hvp(p, X[1], d, net)[k] for k in keys])
    P_ = sum(math.prod(s) for s in shapes)
    ritz = curvature.lanczos(mv_flat, 2, P_, P_, generator=gen)
    lo, hi = wn.lanczos_extremes(lambda v: wn.output_hvp(p, X[1], v, net), wn.random_direction(p, 1.0, generator=gen), 40)
    assert torch.allclose(hi[:, -1], ritz[:, -1], rtol=1e-8) and torch.allclose(lo[:, -1], ritz[:, 0], rtol=1e-8)


def test_jvp_and_taylor_remainder(gen):
    net, p, X = _setup(gen, "res")
    h = wn.random_direction(p, 1e-2, generator=gen)
    ref = jvp(lambda q: wn.forward(q, X, net), (p,), (h,))[1]
    assert torch.allclose(wn.jvp_outputs(p, X, h, net), ref, atol=1e-14, rtol=0)
    r1 = wn.taylor_remainder(p, X, h, net)
    r2 = wn.taylor_remainder(p, X, wn.scale_to(h, 5e-3), net)
    assert torch.allclose(r1 / r2, torch.full_like(r1, 4.0), rtol=0.05)       # second order


def test_c_sigma_normalises_the_first_layer(gen):
    assert abs(wn.c_sigma("tanh") * 0.394294 - 1) < 1e-4                       # E tanh(g)^2 = 0.394294...
    net = wn.Net("fc", "tanh")
    p = wn.init_params(6, 4000, 2, 1, generator=gen, dtype=DT, device_="cpu")
    X = wn.sphere_inputs(3, 6, generator=gen, dtype=DT, device_="cpu")
    xs = wn._forward(p, X, net)[1]
    assert torch.allclose((xs[1] ** 2).sum(-1), torch.ones(1, 3, dtype=DT), rtol=0.1)


def test_ascent_direction_moves_gram_more_than_random(gen):
    net, p, X = _setup(gen, "fc", m=64, H=2)
    G0 = wn.last_layer_gram(p, X, net)
    adv = wn.gram_drift(wn.last_layer_gram(wn.add(p, wn.gram_ascent_direction(p, X, 0.1, net)), X, net), G0)[1]
    rnd = wn.gram_drift(wn.last_layer_gram(wn.add(p, wn.random_direction(p, 0.1, generator=gen)), X, net), G0)[1]
    assert torch.all(adv > rnd)


def test_ball_measurements_keys_and_shapes(gen):
    net, p, X = _setup(gen, "fc", m=16, H=2)
    out = wn.ball_measurements(p, X, 0.5, net, iters=6, generator=gen, ball_hessian=True)
    assert {"gram_adv_entry", "hess", "hess_ball", "taylor", "M", "J"} <= set(out)
    assert all(v.shape == (2,) and torch.isfinite(v).all() for v in out.values())


def test_bad_inputs(gen):
    net, p, X = _setup(gen, "fc")
    with pytest.raises(ValueError, match="arch"):
        wn.Net("cnn")
    with pytest.raises(ValueError, match="smooth"):
        wn.Net("fc", "relu")
    with pytest.raises(ValueError, match="X must have shape"):
        wn.forward(p, X[:, :2], net)
    with pytest.raises(ValueError, match="keys"):
        wn.forward({k: v for k, v in p.items() if k != "W2"}, X, net)
    with pytest.raises(ValueError, match="shape"):
        wn.forward({**p, "a": p["a"][:, :3]}, X, net)
    with pytest.raises(ValueError, match="coef"):
        wn.gradient_direction(p, X, 1.0, torch.ones(2, 3, dtype=DT), net)
    with pytest.raises(ValueError, match="iters"):
        wn.output_hessian_norm(p, X[0], net, iters=0)
    with pytest.raises(ValueError, match="method"):
        wn.output_hvp(p, X[0], p, net, method="dense")
    with pytest.raises(ValueError, match="equal shapes"):
        wn.gram_drift(torch.zeros(1, 2, 2, dtype=DT), torch.zeros(1, 3, 3, dtype=DT))
