"""Tests of companion.curvature: HVPs and Lanczos validated in float64 against dense Hessians (rtol 1e-8)."""

import math

import pytest
import torch

from companion import activations, curvature, deepnet, device


def _net(gen, widths=(3, 4, 3, 1), E=3, n=6, init=1.5, dev=None):
    """A small paper-A network, its data and targets, all on ``dev`` (default: the policy device); drawn on the CPU."""
    params = deepnet.init_params(list(widths), E, init, generator=gen, device=dev, dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device=dev, dtype=torch.float64)
    y = device.randn(n, generator=gen, dtype=torch.float64, device=X.device)
    return params, X, y


def _autograd_hessian(f, theta):
    """Member-by-member dense Hessian by torch.autograd.functional.hessian (reverse-over-reverse)."""
    out = []
    for e in range(theta.shape[0]):
        g = lambda t, e=e: f(torch.cat([theta[:e], t[None], theta[e + 1 :]]))[e]
        out.append(torch.autograd.functional.hessian(g, theta[e]))
    return torch.stack(out)


@pytest.mark.parametrize("act", activations.SMOOTH)
def test_dense_hessian_matches_autograd(gen, act):
    params, X, y = _net(gen)
    f = curvature.deepnet_loss_fn(params, X, y, act)
    theta = curvature.flatten(params)
    H = curvature.hessian(f, theta)
    torch.testing.assert_close(H, _autograd_hessian(f, theta), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act", activations.SMOOTH)
def test_lanczos_extremes_match_dense_eigenvalues(gen, act):
    params, X, y = _net(gen)
    f = curvature.deepnet_loss_fn(params, X, y, act)
    theta = curvature.flatten(params)
    ev = torch.linalg.eigvalsh(curvature.hessian(f, theta))
    lo, hi = curvature.extreme_eigenvalues(f, theta, steps=theta.shape[1])
    torch.testing.assert_close(hi, ev[:, -1], rtol=1e-8, atol=0)
    torch.testing.assert_close(lo, ev[:, 0], rtol=1e-8, atol=0)
    # a truncated run still gets the top eigenvalue to 1e-8 on these small nets
    torch.testing.assert_close(curvature.top_eigenvalue(f, theta, steps=20), ev[:, -1], rtol=1e-8, atol=0)
    torch.testing.assert_close(curvature.spectral_norm(f, theta, steps=theta.shape[1]), ev.abs().amax(1), rtol=1e-8, atol=0)


def test_lanczos_full_spectrum_with_degenerate_operator(gen):
    """Repeated eigenvalues exhaust the Krylov space early; the restart must still give every eigenvalue."""
    E, P = 3, 12
    Q, _ = torch.linalg.qr(device.randn((E, P, P), generator=gen, dtype=torch.float64))
    vals = torch.tensor([0.0] * 5 + [2.0] * 4 + [-1.0, 3.0, 7.5], dtype=torch.float64, device=Q.device)
    A = Q @ torch.diag_embed(vals.expand(E, P)) @ Q.transpose(1, 2)
    ritz = curvature.lanczos(lambda v: torch.einsum("epq,eq->ep", A, v), E, P, P, generator=gen)
    torch.testing.assert_close(ritz, vals.sort().values.expand(E, P), rtol=1e-8, atol=1e-10)


def test_eigsh_reference_agrees(gen):
    params, X, y = _net(gen, E=2)
    f = curvature.deepnet_loss_fn(params, X, y, "tanh")
    theta = curvature.flatten(params)
    ev = torch.linalg.eigvalsh(curvature.hessian(f, theta))
    torch.testing.assert_close(curvature.eigsh(f, theta, which="LA")[:, 0], ev[:, -1], rtol=1e-8, atol=0)
    torch.testing.assert_close(curvature.eigsh(f, theta, which="SA")[:, 0], ev[:, 0], rtol=1e-8, atol=0)


def test_generic_loss_function_quadratic(gen):
    """Any (E, P) -> (E,) loss works: a quadratic 0.5 x^T A_e x has Hessian A_e exactly."""
    E, P = 4, 7
    B = device.randn((E, P, P), generator=gen, dtype=torch.float64)
    A = B + B.transpose(1, 2)
    f = lambda th: 0.5 * torch.einsum("ep,epq,eq->e", th, A, th)
    theta = device.randn((E, P), generator=gen, dtype=torch.float64)
    v = device.randn((E, P), generator=gen, dtype=torch.float64)
    torch.testing.assert_close(curvature.hvp(f, theta, v), torch.einsum("epq,eq->ep", A, v), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(curvature.hessian(f, theta), A, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(curvature.top_eigenvalue(f, theta, steps=P), torch.linalg.eigvalsh(A)[:, -1], rtol=1e-8, atol=0)


def test_softplus_hvp_finite_at_large_weights(gen):
    """Softplus units deep in saturation (pre-activations ~ -1e4) must give finite curvature."""
    params, X, y = _net(gen, init=1.0)
    params = [40.0 * w for w in params]
    f = curvature.deepnet_loss_fn(params, X, y, "softplus")
    theta = curvature.flatten(params)
    assert torch.isfinite(curvature.hvp(f, theta, torch.ones_like(theta))).all()


def test_flatten_roundtrip_and_errors(gen):
    params, X, y = _net(gen)
    theta = curvature.flatten(params)
    back = curvature.unflatten(theta, [p.shape[1:] for p in params])
    for a, b in zip(params, back):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="theta must be"):
        curvature.unflatten(theta[:, :-1], [p.shape[1:] for p in params])
    f = curvature.deepnet_loss_fn(params, X, y, "tanh")
    with pytest.raises(ValueError, match="shape of theta"):
        curvature.hvp(f, theta, theta[:, :-1])
    with pytest.raises(ValueError, match="non-finite"):
        curvature.hvp(f, theta, torch.full_like(theta, math.nan))
    with pytest.raises(ValueError, match="loss of shape"):
        curvature.hvp(lambda th: th.sum(), theta, theta)
    with pytest.raises(ValueError, match="positive integer"):
        curvature.lanczos(lambda v: v, 2, 3, 0)


def _sym(gen, E=3, P=15):
    B = device.randn((E, P, P), generator=gen, dtype=torch.float64)
    return B + B.transpose(1, 2)


@pytest.mark.parametrize("reorth", [True, False])
def test_lanczos_history_and_ritz_vector(gen, reorth):
    """Both modes (full reorthogonalisation and the three-vector recurrence): the running extremes approach the
    dense extremes monotonically, and the returned vector is a unit eigenvector of the largest-modulus eigenvalue."""
    A = _sym(gen)
    E, P = A.shape[:2]
    mv = lambda v: torch.einsum("epq,eq->ep", A, v)
    res = curvature.lanczos(mv, E, P, P, generator=gen, reorthogonalize=reorth, history=True, vector=True)
    ev = torch.linalg.eigvalsh(A)
    torch.testing.assert_close(res.high[:, -1], ev[:, -1], rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(res.low[:, -1], ev[:, 0], rtol=1e-8, atol=1e-10)
    assert torch.all(res.high.diff(dim=1) >= -1e-10) and torch.all(res.low.diff(dim=1) <= 1e-10)
    torch.testing.assert_close(res.norm, ev.abs().amax(1), rtol=1e-8, atol=0)
    lam = (mv(res.vector) * res.vector).sum(1)
    torch.testing.assert_close(res.vector.norm(dim=1), torch.ones(E, dtype=torch.float64))
    torch.testing.assert_close(lam.abs(), ev.abs().amax(1), rtol=1e-8, atol=0)
    assert ((mv(res.vector) - lam[:, None] * res.vector).norm(dim=1) <= 1e-6 * lam.abs()).all()


def test_lanczos_three_vector_mode_matches_full_reorthogonalisation(gen):
    """Without reorthogonalisation (the low-memory mode paper C's chapter uses) the extreme Ritz values agree
    with the reorthogonalised run once converged, from the same start vector."""
    A = _sym(gen, E=2, P=40)
    mv = lambda v: torch.einsum("epq,eq->ep", A, v)
    v0 = device.randn((2, 40), generator=gen, dtype=torch.float64)
    full = curvature.lanczos(mv, 2, 40, 40, v0=v0)
    plain = curvature.lanczos(mv, 2, 40, 60, v0=v0, reorthogonalize=False)
    torch.testing.assert_close(plain[:, -1], full[:, -1], rtol=1e-8, atol=0)
    torch.testing.assert_close(plain[:, 0], full[:, 0], rtol=1e-8, atol=0)
    with pytest.raises(ValueError, match="v0 must have shape"):
        curvature.lanczos(mv, 2, 40, 5, v0=v0[:, :3])


def test_kept_basis_gives_the_rebuilt_ritz_vector_without_a_second_pass(gen):
    """keep_basis: the three-term recurrence's vectors stored, so the Ritz vector is read from them: the vector the
    second pass rebuilds (to rounding), the same Ritz values, and only ``steps`` products instead of ``2 steps``."""
    A = _sym(gen, E=2, P=40)
    calls = []

    def mv(v):
        calls.append(1)
        return torch.einsum("epq,eq->ep", A, v)

    v0 = device.randn((2, 40), generator=gen, dtype=torch.float64)
    rebuilt = curvature.lanczos(mv, 2, 40, 25, v0=v0, reorthogonalize=False, vector=True)
    n_rebuilt = len(calls)
    kept = curvature.lanczos(mv, 2, 40, 25, v0=v0, reorthogonalize=False, vector=True, keep_basis=True)
    assert len(calls) - n_rebuilt == 25 and n_rebuilt == 25 + 24  # the second pass: one product per vector but the last
    torch.testing.assert_close(kept.ritz, rebuilt.ritz, rtol=0, atol=0)
    torch.testing.assert_close(kept.vector, rebuilt.vector, rtol=0, atol=1e-12)


def test_flatten_dicts_roundtrip(gen):
    p = {"W1": device.randn((2, 3, 4), generator=gen), "a": device.randn((2, 3), generator=gen)}
    theta = curvature.flatten(p)
    assert theta.shape == (2, 15)
    back = curvature.unflatten(theta, {k: v.shape[1:] for k, v in p.items()})
    assert list(back) == ["W1", "a"] and all(torch.equal(back[k], p[k]) for k in p)


def test_device_and_dtype_mixes_are_named(gen):
    """Several tensors on different devices/dtypes: a ValueError naming both (meta device and float32 stand-ins)."""
    theta = device.randn((2, 5), generator=gen, dtype=torch.float64, device="cpu")
    f = lambda th: (th**2).sum(1)
    with pytest.raises(ValueError, match="v is on meta but theta is on cpu"):
        curvature.hvp(f, theta, torch.zeros(2, 5, dtype=torch.float64, device="meta"))
    with pytest.raises(ValueError, match="v has dtype torch.float32 but theta has dtype torch.float64"):
        curvature.hvp(f, theta, theta.float())
    with pytest.raises(ValueError, match="params\\[1\\] is on meta"):
        curvature.flatten([theta, torch.zeros(2, 3, dtype=torch.float64, device="meta")])


@pytest.mark.gpu
def test_lanczos_on_cuda_matches_cpu(gen):
    params, X, y = _net(gen, dev="cpu")
    f_cpu = curvature.deepnet_loss_fn(params, X, y, "tanh")
    theta = curvature.flatten(params)
    ev = torch.linalg.eigvalsh(curvature.hessian(f_cpu, theta))
    pc = [p.cuda() for p in params]
    f_gpu = curvature.deepnet_loss_fn(pc, X.cuda(), y.cuda(), "tanh")
    hi = curvature.top_eigenvalue(f_gpu, curvature.flatten(pc), steps=theta.shape[1])
    torch.testing.assert_close(hi.cpu(), ev[:, -1], rtol=1e-8, atol=0)
