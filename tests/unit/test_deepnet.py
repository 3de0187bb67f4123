"""Tests of companion.deepnet (paper A's network; ch-setup): Lemma 4.2's gradient against gradcheck and
autograd, the ensemble axis, clear errors on bad inputs, the zero-embedding."""

import pytest
import torch

from companion import activations, deepnet, device, gd, scale, stats

SMOOTH = activations.SMOOTH


def _problem(gen, widths=(4, 5, 3, 1), E=3, n=10, init=1.0):
    params = deepnet.init_params(list(widths), E, init, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


@pytest.mark.parametrize("act", SMOOTH)
def test_explicit_gradient_passes_gradcheck(gen, act):
    """torch.autograd.gradcheck on the explicit recursion, wrapped as a Function with its gradient as backward."""
    params, X, y = _problem(gen, E=1)

    class ExplicitLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *ws):
            value, grads = deepnet.loss_and_gradient(list(ws), X, y, act)
            ctx.save_for_backward(*grads)
            return value

        @staticmethod
        def backward(ctx, g):
            return tuple(g.view(-1, 1, 1) * gr for gr in ctx.saved_tensors)

    inputs = tuple(w.clone().requires_grad_(True) for w in params)
    assert torch.autograd.gradcheck(ExplicitLoss.apply, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("act", SMOOTH)
@pytest.mark.parametrize("widths", [(3, 1), (6, 4, 1), (5, 7, 2, 3, 1)])
def test_explicit_gradient_equals_autograd(gen, act, widths):
    params, X, y = _problem(gen, widths=widths, E=4, init=2.0)
    l1, g1 = deepnet.loss_and_gradient(params, X, y, act)
    l2, g2 = deepnet.loss_and_gradient_autograd(params, X, y, act)
    assert torch.allclose(l1, l2, rtol=1e-14, atol=0)
    for a, b in zip(g1, g2):
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_validated_once_closure_equals_loss_and_gradient(gen):
    params, X, y = _problem(gen, E=3)
    lg = deepnet.make_loss_and_grad(X, y, "softplus")
    l1, g1 = lg(params)
    l2, g2 = deepnet.loss_and_gradient(params, X, y, "softplus")
    assert torch.equal(l1, l2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    with pytest.raises(ValueError, match="targets"):
        deepnet.make_loss_and_grad(X, y[:3], "softplus")


def test_output_gradient_sums_to_loss_gradient(gen):
    """∇𝓛 = (1/n) Σ_i 2(F_i − y_i) ∇F_i, with ∇F_i = δ_ℓ h_{ℓ−1}ᵀ from output_gradient."""
    params, X, y = _problem(gen)
    F = deepnet.forward(params, X, "tanh")
    per_sample = deepnet.output_gradient(params, X, "tanh")
    _, grads = deepnet.loss_and_gradient(params, X, y, "tanh")
    for g, gs in zip(grads, per_sample):
        assert torch.allclose(g, (2 * (F - y)[..., None, None] * gs).mean(dim=1), rtol=1e-12, atol=1e-15)


def test_blockdiag_norm(gen):
    params, _, _ = _problem(gen)
    W = deepnet.blockdiag(params)
    assert W.shape == (3, 5 + 3 + 1, 4 + 5 + 3)
    assert torch.allclose(W.flatten(1).norm(dim=1), deepnet.norm(params), rtol=1e-14)


def test_ensemble_members_are_independent(gen):
    """Member e of a batched forward equals the same network evaluated alone."""
    params, X, y = _problem(gen, E=4)
    batched = deepnet.loss(params, X, y, "sigmoid")
    alone = torch.stack([deepnet.loss([w[e : e + 1] for w in params], X, y, "sigmoid")[0] for e in range(4)])
    assert torch.equal(batched, alone) or torch.allclose(batched, alone, rtol=1e-15, atol=0)


def _bad_inputs(gen):
    params, X, y = _problem(gen)
    nan_X = X.clone()
    nan_X[0, 0] = float("nan")
    inf_y = y.clone()
    inf_y[1] = float("inf")
    return [
        (lambda: deepnet.init_params([4, 3, 1], -2), "ensemble size"),
        (lambda: deepnet.init_params([4, 3, 1], 0), "ensemble size"),
        (lambda: deepnet.init_params([4, 3, 2], 2), "d_L must be 1"),
        (lambda: deepnet.init_params([4, 0, 1], 2), "width d_1"),
        (lambda: deepnet.loss(params, X[:, :3], y, "tanh"), "features"),
        (lambda: deepnet.loss(params, X, y[:5], "tanh"), "targets"),
        (lambda: deepnet.loss(params, nan_X, y, "tanh"), "non-finite"),
        (lambda: deepnet.loss(params, X, inf_y, "tanh"), "non-finite"),
        (lambda: deepnet.loss(params, X, y, "swish"), "unknown activation"),
        (lambda: deepnet.loss([params[0], params[2]], X, y, "tanh"), "input columns"),
        (lambda: deepnet.loss([params[0][:2], *params[1:]], X, y, "tanh"), "ensemble sizes differ"),
        (lambda: deepnet.loss([w[0] for w in params], X, y, "tanh"), "dimensions"),
        (lambda: deepnet.loss(params, X.unsqueeze(0).expand(7, -1, -1), y, "tanh"), "ensemble size"),
        (lambda: deepnet.check_assumption_3_2(3 * X + 10), "Assumption 3.2"),
        (lambda: deepnet.loss(params, X.long(), y, "tanh"), "floating-point"),
        (lambda: gd.run(lambda p: deepnet.loss_and_gradient(p, X, y, "tanh"), params, 0, 0.1), "steps"),
        (lambda: gd.run(lambda p: deepnet.loss_and_gradient(p, X, y, "tanh"), params, 5, -0.1), "step size"),
        (lambda: gd.run(lambda p: deepnet.loss_and_gradient(p, X, y, "tanh"), params, 5, 0.1, record_at=[7]), "record_at"),
        (lambda: scale.select({"quick": 1}), "missing"),
        (lambda: device.generator(-1), "seed"),
        (lambda: stats.wilson(5, 3), "successes"),
        (lambda: stats.loglog_slope([1, 2, 3], [1, -1, 2]), "positive"),
    ]


def test_bad_inputs_raise_value_errors(gen, monkeypatch):
    cases = _bad_inputs(gen)
    assert len(cases) >= 10
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    monkeypatch.setenv("COMPANION_SCALE", "huge")
    with pytest.raises(ValueError, match="COMPANION_SCALE"):
        scale.current()


def test_deepnet_mixed_devices_and_dtypes_raise_clear_errors(gen):
    """Parameters, data and targets on two devices (a meta-device stand-in) or in two dtypes: a ValueError naming both."""
    params = deepnet.init_params([3, 4, 1], 2, generator=gen, device="cpu")
    X = deepnet.ball_data(5, 3, generator=gen, device="cpu")
    y = torch.zeros(5, dtype=torch.float64)
    X_meta, y_meta = X.to("meta"), y.to("meta")
    for call in (
        lambda: deepnet.forward(params, X_meta, "tanh"),
        lambda: deepnet.loss(params, X, y_meta, "tanh"),
        lambda: deepnet.loss_and_gradient(params, X_meta, y, "tanh"),
        lambda: deepnet.make_loss_and_grad(X, y_meta, "tanh", params_like=params),
        lambda: deepnet.output_gradient(params, X_meta, "tanh"),
        lambda: deepnet.backward_deltas(params, [z.to("meta") for z in deepnet.forward_all(params, X, "tanh")[0]], "tanh"),
    ):
        with pytest.raises(ValueError, match="is on meta but params is on cpu"):
            call()
    with pytest.raises(ValueError, match="X has dtype torch.float32 but params has dtype torch.float64"):
        deepnet.forward(params, X.float(), "tanh")
    with pytest.raises(ValueError, match="w_2 is on meta but w_1 is on cpu"):
        deepnet.forward([params[0], params[1].to("meta")], X, "tanh")


def test_gradient_relative_error_is_rounding_and_detects_a_wrong_gradient(gen):
    params = deepnet.init_params([3, 5, 1], 4, generator=gen)
    X = deepnet.ball_data(7, 3, generator=gen)
    y = torch.zeros(7, dtype=X.dtype, device=X.device)
    err = deepnet.gradient_relative_error(params, X, y, "tanh")
    assert err.shape == (4,) and (err < 1e-13).all()
    _, g = deepnet.loss_and_gradient(params, X, y, "tanh")
    _, g_ref = deepnet.loss_and_gradient_autograd(params, X, y, "tanh")
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-15) for a, b in zip(g, g_ref))


def _directions(gen, params, K=2):
    return [torch.randn(w.shape[0], K, *w.shape[1:], generator=gen, dtype=w.dtype) for w in params]


@pytest.mark.parametrize("act", SMOOTH)
def test_gradient_gap_in_balls_decides_lemma_4_2_and_rejects_a_wrong_recursion(gen, act):
    """The recursion equals the forward-mode derivative to the balls' resolution, in saturated units too (init 3),
    and the recursion with σ' at h_ℓ is rejected wherever σ' is not constant."""
    params, X, y = _problem(gen, widths=(4, 6, 5, 1), E=2, n=9, init=3.0)
    V = _directions(gen, params)
    low, high = deepnet.gradient_gap_in_balls(params, X, y, act, V)
    assert low.shape == high.shape == (2, 2)
    assert ((low <= 0) & (0 <= high)).all() and (high - low < 1e-60).all()
    low, high = deepnet.gradient_gap_in_balls(params, X, y, act, V, prec=64)
    assert ((low <= 0) & (0 <= high)).all() and (high - low > 1e-25).all()  # fewer bits, wider enclosures
    wrong_low, wrong_high = deepnet.gradient_gap_in_balls(params, X, y, act, V, sigma_prime_at="h")
    rejected = (wrong_low > 0) | (wrong_high < 0)
    assert (~rejected).all() if act == "linear" else rejected.all()


def test_gradient_gap_in_balls_rejects_bad_input(gen):
    params, X, y = _problem(gen, widths=(3, 4, 1), E=2, n=5)
    V = _directions(gen, params)
    with pytest.raises(ValueError, match="one tensor per layer"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", V[:1])
    with pytest.raises(ValueError, match="must have 4 dimensions"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", [v[:, 0] for v in V])
    with pytest.raises(ValueError, match=r"directions\[1\] must be \(E, K, d_ℓ, d_ℓ-1\)"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", [V[0], V[1][:, :1]])
    with pytest.raises(ValueError, match="must be nonzero"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", [v * 0 for v in V])
    with pytest.raises(ValueError, match="non-finite"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", [V[0] * float("nan"), V[1]])
    with pytest.raises(ValueError, match="at least 53 bits"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", V, prec=32)
    with pytest.raises(ValueError, match="sigma_prime_at"):
        deepnet.gradient_gap_in_balls(params, X, y, "tanh", V, sigma_prime_at="x")
    with pytest.raises(ValueError, match="ReLU|relu|smooth"):
        deepnet.gradient_gap_in_balls(params, X, y, "relu", V)


def test_ball_endpoints_round_outward():
    """The float64 endpoints of an enclosure never cut into the ball: a number that float64 cannot hold moves one
    ulp outward, one it holds stays."""
    import math

    from flint import arb

    with deepnet._arb_precision(256):
        third = arb(1) / 3
        lo, hi = deepnet._float_down(third), deepnet._float_up(third)
        assert arb(lo) < third < arb(hi) and hi == math.nextafter(lo, math.inf)
        assert deepnet._float_down(arb(0.5)) == deepnet._float_up(arb(0.5)) == 0.5


@pytest.mark.parametrize("act", ["linear", "tanh"])
def test_embed_is_exact_for_activations_vanishing_at_zero(gen, act):
    params = deepnet.init_params([3, 2, 4, 1], 3, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = torch.zeros(6, dtype=X.dtype, device=X.device)
    padded, mask = deepnet.embed(params, 5)
    assert [tuple(w.shape) for w in padded] == [(3, 5, 3), (3, 5, 5), (3, 1, 5)]
    l0, g0 = deepnet.loss_and_gradient(params, X, y, act)
    l1, g1 = deepnet.loss_and_gradient(padded, X, y, act)
    assert torch.allclose(l0, l1, rtol=1e-13)
    for g, gp, m in zip(g0, g1, mask):
        assert torch.equal(gp[m == 0], torch.zeros_like(gp[m == 0]))
        assert torch.allclose(gp[m == 1], g.flatten(), rtol=1e-12)
    with pytest.raises(ValueError, match="smaller than a hidden width"):
        deepnet.embed(params, 3)
