"""Tests of companion.curvature: HVPs and Lanczos validated in float64 against dense Hessians (rtol 1e-8)."""
import math

import pytest
import torch

from companion import activations, curvature, deepnet


def _net(gen, widths=(3, 4, 3, 1), E=3, n=6, init=1.5):
    params = deepnet.init_params(list(widths), E, init, generator=gen)
    X = deepnet.ball_data(n, widths[0], generator=gen)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


def _autograd_hessian(f, theta):
    """Member-by-member dense Hessian by torch.autograd.functional.hessian (reverse-over-reverse)."""
    out = []
    for e in range(theta.shape[0]):
        g = lambda t, e=e: f(torch.cat([theta[:e], t[None], theta[e + 1:]]))[e]
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
    Q, _ = torch.linalg.qr(torch.randn(E, P, P, generator=gen, dtype=torch.float64))
    vals = torch.tensor([0.0] * 5 + [2.0] * 4 + [-1.0, 3.0, 7.5], dtype=torch.float64)
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
    B = torch.randn(E, P, P, generator=gen, dtype=torch.float64)
    A = B + B.transpose(1, 2)
    f = lambda th: 0.5 * torch.einsum("ep,epq,eq->e", th, A, th)
    theta = torch.randn(E, P, generator=gen, dtype=torch.float64)
    v = torch.randn(E, P, generator=gen, dtype=torch.float64)
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


@pytest.mark.gpu
def test_lanczos_on_cuda_matches_cpu(gen):
    params, X, y = _net(gen)
    f_cpu = curvature.deepnet_loss_fn(params, X, y, "tanh")
    theta = curvature.flatten(params)
    ev = torch.linalg.eigvalsh(curvature.hessian(f_cpu, theta))
    pc = [p.cuda() for p in params]
    f_gpu = curvature.deepnet_loss_fn(pc, X.cuda(), y.cuda(), "tanh")
    hi = curvature.top_eigenvalue(f_gpu, curvature.flatten(pc), steps=theta.shape[1])
    torch.testing.assert_close(hi.cpu(), ev[:, -1], rtol=1e-8, atol=0)
