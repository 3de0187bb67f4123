"""companion.landscape: the zero-finder and its Newton polish reach stationary points near the manifolds, and the
continued stationary-point search decides every run (stationary, escaping, stalled)."""

import pytest
import torch

from companion import landscape
from companion import population as P

DT = torch.float64


def test_escaping_needs_growth_and_fall_at_every_round():
    theta = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 1.0], [3.0, 3.0, 1.0]])
    grad = torch.tensor([[1e-3, 1e-3, 1e-3], [5e-4, 5e-4, 5e-4], [1e-4, 2e-3, 1e-4]])
    assert landscape.escaping(theta, grad).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="histories"):
        landscape.escaping(theta[:1], grad[:1])


def test_a_run_near_a_manifold_becomes_stationary_and_is_taken_out():
    a = torch.zeros(4, dtype=torch.float64)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([1.0, 0.5], dtype=torch.float64), 1.0, 1.0, a)
    W[0] = W[0] + 1e-3 * torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)  # tilted
    out = landscape.continue_search(W, v, a, rounds=2, iters=20, polish_iters=30)
    assert out.theta_norm.shape == (3, 2) and out.grad_norm.shape == (3, 2)
    assert out.stationary_at[1] == 0  # stationary before the continuation: never moved
    assert torch.equal(out.W[1], W[1])
    assert (out.ratio[out.stationary_at >= 0] <= 64).all()


def _valley_point(beta=30.0, h=1e-2):
    """A k = 2 point on the valley to infinity: two nearly parallel neurons with opposite outputs ~ beta / h
    compute a finite difference of ReLU, f(x) ~ 1{u x > 0} a x."""
    a = torch.zeros(4, dtype=DT)
    a[0] = 1.0
    u = torch.tensor([0.6, 0.8, 0.0, 0.0], dtype=DT)
    b = a - (a @ u) * u
    W = torch.stack([u + h * b / beta, u])[None]
    v = torch.tensor([[beta / h, -beta / h + (a @ u).item()]], dtype=DT)
    return W, v, a


def test_a_run_on_the_valley_to_infinity_escapes_along_the_spheres():
    W, v, a = _valley_point()
    assert P.stationarity_ratio(W, v, a) > 1e6  # far from stationary
    out = landscape.continue_in_radius(W, v, a, steps=6, growth=0.02, iters=40)
    assert out.theta_norm.shape == out.grad_norm.shape == (7, 1)
    radii = out.theta_norm[0] * 1.02 ** torch.arange(7, dtype=DT)[:, None]
    assert torch.allclose(out.theta_norm, radii, rtol=1e-12)  # each step stays on its sphere
    assert landscape.escaping(out.theta_norm, out.grad_norm).item()  # ||grad L|| falls at every sphere
    assert out.stationary_at.item() == -1
    loss = P.loss(out.W, out.v, a)
    assert 0.24 < loss.item() < 0.25  # still on the valley, below ||a||^2 / 4


def test_a_run_next_to_a_manifold_becomes_stationary_on_a_sphere_and_is_taken_out():
    a = torch.zeros(4, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([1.0]), 1.0, 1.0, a)
    W = W + 1e-4 * torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=DT)  # tilted off the manifold
    assert P.stationarity_ratio(W, v, a) > 64
    out = landscape.continue_in_radius(W, v, a, steps=3, growth=0.02, iters=40)
    assert out.stationary_at.item() >= 1 and out.ratio.item() <= 64
    assert out.grad_norm[out.stationary_at.item() :].eq(out.grad_norm[out.stationary_at.item()]).all()  # kept


def test_continue_in_radius_rejects_bad_input():
    W, v, a = _valley_point()
    with pytest.raises(ValueError, match="growth"):
        landscape.continue_in_radius(W, v, a, steps=2, growth=0.0)
    with pytest.raises(ValueError, match="growth"):
        landscape.continue_in_radius(W, v, a, steps=2, growth=float("nan"))
    with pytest.raises(ValueError, match="steps"):
        landscape.continue_in_radius(W, v, a, steps=0, growth=0.02)
    with pytest.raises(ValueError):
        landscape.continue_in_radius(W, v.float(), a, steps=2, growth=0.02)


def test_valley_tolerance_accepts_a_rounding_level_tilt_and_rejects_a_visible_one():
    a = torch.zeros(4, dtype=torch.float64)
    a[0] = 1.0
    W, v = P.paper_point(0.5, 1.0, 1.0, a)
    W, v = W.expand(3, -1, -1).clone(), v.expand(3, -1).clone()
    W[1, 0, 1] += 1e-15 * W[1, 0].norm()  # a tilt at the rounding level of the stationarity rule
    W[2, 0, 1] += 1e-6 * W[2, 0].norm()  # a tilt the gradient sees at first order
    out = landscape.valley_tolerance(W, v, a, c_stat=64)
    assert out.angle[0] == 0 and out.tau[0] == float("inf") and out.exponent[0].isnan()  # on the manifold exactly
    assert out.exponent[1:].sub(1).abs().max() < 1e-2  # one neuron tilted alone: the gradient is linear in the angle
    assert out.angle[1] <= out.tau[1] and out.angle[2] > out.tau[2]
    assert torch.allclose(out.tau[1], out.tau[2], rtol=1e-2)  # the tolerance is the point's, not its tilt's
    assert P.stationarity_ratio(W[2:], v[2:], a) > 64  # ... and rule 1 agrees


def test_valley_tolerance_rejects_bad_input():
    a = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    W = torch.tensor([[[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]], dtype=torch.float64)
    v = torch.tensor([[1.0, -0.5]], dtype=torch.float64)
    with pytest.raises(ValueError, match="c_stat"):
        landscape.valley_tolerance(W, v, a, c_stat=0.0)
    with pytest.raises(ValueError, match="phi0"):
        landscape.valley_tolerance(W, v, a, c_stat=64, phi0=0.5)
    with pytest.raises(ValueError, match="neuron is zero"):
        landscape.valley_tolerance(torch.zeros_like(W), v, a, c_stat=64)


def test_neuron_tilt_is_the_largest_sine_to_the_line_of_a_and_agrees_with_valley_tolerance():
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    a = 2.0 * torch.randn(5, generator=gen, dtype=torch.float64)
    unit = a / a.norm()
    cos = (W @ unit).abs() / W.norm(dim=-1)
    expected = (1 - cos**2).clamp_min(0).sqrt().amax(-1)
    tilt = landscape.neuron_tilt(W, a)
    assert torch.allclose(tilt, expected, rtol=1e-12, atol=1e-15)
    assert torch.equal(tilt, landscape.valley_tolerance(W, v, a, c_stat=64).angle)
    on_line = unit * torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)[None, :, None]
    assert landscape.neuron_tilt(on_line.expand(2, 3, 5), a).abs().max() < 1e-15


def test_neuron_tilt_rejects_bad_input():
    W = torch.ones(2, 3, 4, dtype=torch.float64)
    a = torch.ones(4, dtype=torch.float64)
    for bad in (
        lambda: landscape.neuron_tilt(W[0], a),
        lambda: landscape.neuron_tilt(W, a[:3]),
        lambda: landscape.neuron_tilt(W, torch.zeros(4, dtype=torch.float64)),
        lambda: landscape.neuron_tilt(W.float(), a),
        lambda: landscape.neuron_tilt(torch.zeros_like(W), a),
    ):
        with pytest.raises(ValueError):
            bad()


def test_find_stationary_converges_from_near_a_saddle():
    a = torch.zeros(3, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(1.0, 1.0, 1.0, a)
    g = torch.Generator().manual_seed(5)
    v0 = v[None] + 1e-2 * torch.randn(1, 2, generator=g, dtype=DT)
    W0 = W[None] + 1e-2 * torch.randn(1, 2, 3, generator=g, dtype=DT)
    Ws, vs, gn = landscape.find_stationary(W0, v0, a, iters=200)
    assert gn[0] < 1e-9 * max(1.0, P.flatten_params(Ws[0], vs[0]).norm().item())


def test_polish_reaches_the_rounding_floor_near_the_manifolds(gen):
    a = torch.zeros(4, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([1.0, -3.0]), 1.0, 1.5, a)
    W0, v0 = W + 1e-3 * torch.randn(W.shape, generator=gen, dtype=DT), v + 1e-3 * torch.randn(v.shape, generator=gen, dtype=DT)
    Ws, vs, _ = landscape.find_stationary(W0, v0, a, iters=100)  # LM first, as in ch-landscape
    Ws, vs, ratio, steps = landscape.polish_stationary(Ws, vs, a, iters=60)
    assert (ratio <= 64).all(), ratio
    labels, _ = P.classify_stationary(Ws, vs, a, ratio, tol=1e-4, converged=ratio <= 64)
    assert all("saddle" in lbl or lbl == P.CLASSES[0] for lbl in labels), labels


def test_the_search_refuses_bad_input():
    a = torch.zeros(4, dtype=DT)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([1.0, -3.0]), 1.0, 1.5, a)
    for fn in (landscape.find_stationary, landscape.polish_stationary):
        with pytest.raises(ValueError, match="meta"):
            fn(W, v, torch.empty(4, dtype=DT, device="meta"))
        with pytest.raises(ValueError):
            fn(W, v.float(), a)
        with pytest.raises(ValueError, match="iters"):
            fn(W, v, a, iters=0)
