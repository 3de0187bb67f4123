"""Tests of companion.activations (Assumption 3.1's constants; ch-setup)."""

import pytest
import torch

from companion import activations, deepnet

SMOOTH = activations.SMOOTH


def _problem(gen, widths=(4, 5, 3, 1), E=3, n=10, init=1.0):
    params = deepnet.init_params(list(widths), E, init, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


@pytest.mark.parametrize("act", SMOOTH)
def test_registry_constants_match_measurement(act):
    a = activations.get(act)
    m = activations.measure_constants(act, num=400_001)
    assert m["c1"] <= a.c1 + 1e-12
    assert m["c2"] == pytest.approx(a.c2, rel=1e-6)
    assert m["c3"] == pytest.approx(a.c3, abs=1e-6)
    assert max(a.constants().values()) <= 1


@pytest.mark.parametrize("act", SMOOTH)
def test_stored_derivatives_match_autograd(act):
    a = activations.get(act)
    x = torch.linspace(-30, 30, 2001, dtype=torch.float64, requires_grad=True)
    (d1,) = torch.autograd.grad(a.fn(x).sum(), x, create_graph=True)
    d2 = torch.autograd.grad(d1.sum(), x)[0] if d1.requires_grad else torch.zeros_like(x)  # linear: σ'' ≡ 0
    assert torch.allclose(d1.detach(), a.d1(x.detach()), rtol=1e-12, atol=1e-15)
    assert torch.allclose(d2, a.d2(x.detach()), rtol=1e-10, atol=1e-14)


def test_relu_has_no_smoothness_constant():
    relu = activations.get("relu")
    assert not relu.smooth
    with pytest.raises(ValueError, match="not smooth"):
        _ = relu.c3
    with pytest.raises(ValueError, match="not smooth"):
        relu.require_smooth()


@pytest.mark.parametrize("act", SMOOTH)
def test_certified_constants_enclose_the_registry(act):
    a = activations.get(act)
    enc = activations.certify_constants(act)
    for key, value in (("c0", a.c0), ("c2", a.c2), ("c3", a.c3)):
        assert enc[key].low - 1e-15 <= value <= enc[key].high + 1e-15
        assert enc[key].high - enc[key].low <= 1e-11


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "softplus"])
def test_ball_derivatives_match_autograd(act):
    from flint import arb

    a = activations.get(act)
    x = torch.linspace(-8, 8, 33, dtype=torch.float64, requires_grad=True)
    (d2,) = torch.autograd.grad(a.d1(x).sum(), x, create_graph=True)
    (d3,) = torch.autograd.grad(d2.sum(), x)
    derivatives = activations._ARB[act][1]
    for xi, e1, e2, e3 in zip(x.tolist(), a.d1(x).tolist(), d2.tolist(), d3.tolist(), strict=True):
        b1, b2, b3 = (float(v.mid()) for v in derivatives(arb(xi)))
        assert (b1, b2, b3) == pytest.approx((e1, e2, e3), rel=1e-9, abs=1e-12)


def test_certify_constants_rejects_relu_and_bad_radius():
    with pytest.raises(ValueError, match="not smooth"):
        activations.certify_constants("relu")
    with pytest.raises(ValueError, match="radius"):
        activations.certify_constants("tanh", radius=0)


@pytest.mark.parametrize("act", SMOOTH)
def test_ball_functions_contain_the_float64_values(act):
    from flint import arb, ctx

    a = activations.get(act)
    sigma, sigma_prime = activations.ball_functions(act)
    saved, ctx.prec = ctx.prec, 128
    try:
        for w in (-30.0, -2.5, 0.0, 0.7, 12.0):
            x = torch.tensor([w], dtype=torch.float64)
            assert float(sigma(arb(w)).mid()) == pytest.approx(a.fn(x).item(), rel=1e-13, abs=1e-300)
            assert float(sigma_prime(arb(w)).mid()) == pytest.approx(a.d1(x).item(), rel=1e-12, abs=1e-15)
            # σ' alone is the certificate's σ' (the first of its derivatives), ball for ball
            certified = activations._ARB[act][1](arb(w))[0]
            assert sigma_prime(arb(w)).mid() == certified.mid() and sigma_prime(arb(w)).rad() == certified.rad()
    finally:
        ctx.prec = saved
