"""Tests of companion.descent (paper A, Lemma 4.6's descent lemma, Lemma 4.7's step and the tracker; ch-descent).

The remainder and the step are compared with plain-Python loops over the indices as the paper prints them.
"""

import math

import pytest
import torch
from paper_a_cases import CASES

from companion import activations, deepnet, descent, gd, search

SMOOTH = activations.SMOOTH


# ------------------------------------------------------------ the independent reference (plain Python)
def ref_46_remainder(a, r, loss, L, dmax, cJ=2.0):
    C = 2 ** (2 * L + 2) * cJ * dmax * L**4
    p = sum(a**i for i in range(0, 2 * L - 1))
    q = sum(r ** (k + 2) / (k + 2) for k in range(0, 2 * L - 1))
    return C * (1 + loss**0.5) * p * q


def ref_eta(a, loss, L, dmax, cJ=2.0):
    rho = 2 ** (2 * L + 3) * cJ * dmax**1.5 * L**5
    return 1.0 / (rho * (1 + loss**0.5) * sum(a**i for i in range(0, 2 * L - 1)))


@pytest.mark.parametrize("L", [2, 3, 4, 5])
@pytest.mark.parametrize("dmax", [1, 6])
def test_remainder_and_step_match_independent_implementation(L, dmax):
    a, _, r, loss = (torch.tensor(v, dtype=torch.float64) for v in zip(*CASES))
    got = {
        "4.6": torch.exp(descent.log_lemma_4_6_remainder(a, r, loss, L, dmax)),
        "eta": descent.eta(a, loss, L, dmax),
    }
    for e, (ae, _, re, le) in enumerate(CASES):
        want = {
            "4.6": ref_46_remainder(ae, re, le, L, dmax),
            "eta": ref_eta(ae, le, L, dmax),
        }
        for k in want:
            assert got[k][e].item() == pytest.approx(want[k], rel=1e-12), (k, CASES[e])


def test_constants():
    for L in (2, 3, 4):
        for dmax in (1, 3, 6):
            C = descent.lemma_4_6_C(L, dmax)
            assert C == 2 ** (2 * L + 2) * 2 * dmax * L**4
            assert descent.rho(L, dmax) == pytest.approx(2 * dmax**0.5 * L * C, rel=1e-14)  # rho = 2 d^(1/2) L C (A.7)


# ----------------------------------------------------------------------------- Lemma 4.6 on networks
@pytest.mark.parametrize("act", SMOOTH)
@pytest.mark.parametrize("L", [2, 3, 4])
def test_lemma_4_6_holds_on_random_pairs(gen, act, L):
    widths = [3] + [4] * (L - 1) + [1]
    p1, p2 = search.random_pairs(widths, 64, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = torch.randn(6, generator=gen, dtype=torch.float64)
    c = descent.lemma_4_6(p1, p2, X, y, act)
    assert torch.isfinite(c.lhs).all() and torch.isfinite(c.rhs).all()
    assert (c.ratio <= 1).all()


def test_lemma_4_6_lhs_is_the_taylor_remainder(gen):
    """Lemma 4.6's left side is L(W2) - L(W1) - <grad L(W1), W2 - W1>, with the gradient from autograd."""
    p1, p2 = search.random_pairs([3, 4, 1], 5, generator=gen)
    X = deepnet.ball_data(6, 3, generator=gen)
    y = torch.randn(6, generator=gen, dtype=torch.float64)
    _, g1 = deepnet.loss_and_gradient_autograd(p1, X, y, "tanh")
    c6 = descent.lemma_4_6(p1, p2, X, y, "tanh")
    l1, l2 = deepnet.loss(p1, X, y, "tanh"), deepnet.loss(p2, X, y, "tanh")
    inner = sum((g * (b - a)).flatten(1).sum(1) for g, a, b in zip(g1, p1, p2))
    torch.testing.assert_close(c6.lhs, l2 - l1 - inner, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- the step and the engine
def test_adaptive_step_and_tracker_agree_with_formula(gen):
    widths = [3, 4, 4, 1]
    params = deepnet.init_params(widths, 6, 1.0, generator=gen)
    X = deepnet.ball_data(10, 3, generator=gen)
    y = 0.5 * torch.randn(10, generator=gen, dtype=torch.float64)
    loss, grads = deepnet.loss_and_gradient(params, X, y, "tanh")
    kappa = torch.logspace(0, 5, 6, dtype=torch.float64)
    rule = descent.adaptive_step(3, deepnet.d_max(params), kappa=kappa)
    tr = descent.Tracker(3, deepnet.d_max(params), kappa=kappa)
    a = deepnet.norm(params)
    want = torch.tensor(
        [k * ref_eta(ai, li, 3, 4) for k, ai, li in zip(kappa.tolist(), a.tolist(), loss.tolist())], dtype=torch.float64
    )
    torch.testing.assert_close(rule(params, loss, grads, 0), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(tr(params, loss, grads, 0), want, rtol=1e-12, atol=0)


def test_fast_loss_and_gradient_matches_deepnet(gen):
    params = deepnet.init_params([3, 5, 2, 1], 4, 1.5, generator=gen)
    X = deepnet.ball_data(7, 3, generator=gen)
    y = torch.randn(7, generator=gen, dtype=torch.float64)
    for act in SMOOTH:
        l1, g1 = descent.make_loss_and_grad(params, X, y, act)(params)
        l2, g2 = deepnet.loss_and_gradient(params, X, y, act)
        torch.testing.assert_close(l1, l2, rtol=0, atol=0)
        for u, v in zip(g1, g2):
            torch.testing.assert_close(u, v, rtol=0, atol=0)


def test_lemma_4_7_descent_every_step_and_tracker_bookkeeping(gen):
    """Run gd.run with the paper's step (kappa = 1, and a rescaled one) and re-check the tracker from full history."""
    L = 2
    params = deepnet.init_params([3, 4, 1], 5, 1.0, generator=gen)
    X = deepnet.ball_data(8, 3, generator=gen)
    y = torch.randn(8, generator=gen, dtype=torch.float64)
    for kappa in (1.0, 1e3):
        tr = descent.Tracker(L, deepnet.d_max(params), kappa=kappa, tol=0.0)
        steps = 50
        res = gd.run(
            descent.make_loss_and_grad(params, X, y, "softplus"),
            params,
            steps,
            tr,
            record_at=range(steps + 1),
            observers=tr.observers(),
        )
        h = res.history
        excess = h["loss"][1:] - h["loss"][:-1] + h["eta"][:-1] / (2 * L) * h["grad_norm_sq"][:-1]
        assert (excess <= 0).all()
        # the excess is a difference of nearly equal numbers: agree up to rounding of the loss itself
        torch.testing.assert_close(tr.state["worst_excess"], excess.max(0).values, rtol=0, atol=1e-13 * h["loss"].max().item())
        torch.testing.assert_close(tr.state["sum_eta"], h["eta"][:-1].sum(0), rtol=1e-12, atol=0)
        torch.testing.assert_close(tr.state["min_g2"], h["grad_norm_sq"][:-1].min(0).values, rtol=1e-13, atol=0)
        assert (tr.state["sum_eta_g2"] <= 2 * L * h["loss"][0]).all()
        assert int(tr.state["violations"].sum()) == 0
        root_sum = (h["eta"][:-1] ** (1 / (2 * L - 2)) * h["grad_norm_sq"][:-1].sqrt()).sum(0)
        torch.testing.assert_close(tr.state["sum_eta_root_g"], root_sum, rtol=1e-12, atol=0)


def test_tracker_loop_step_is_its_call_as_a_pure_function(gen):
    """``loop_step`` on ``loop_carry``'s columns (gd.run's compiled loop) returns the call's step and state, bit for
    bit, and writes nothing; ``loop_load`` puts the state back."""
    params = deepnet.init_params([3, 4, 4, 1], 5, 1.0, generator=gen)
    X = deepnet.ball_data(8, 3, generator=gen)
    y = torch.randn(8, generator=gen, dtype=torch.float64)
    f = descent.make_loss_and_grad(params, X, y, "softplus")
    a, b = (descent.Tracker(3, deepnet.d_max(params), kappa=1e3, tol=1e-13) for _ in range(2))
    with pytest.raises(ValueError, match="not been run"):
        a.loop_carry()
    loss, grads = f(params)
    eta = a(params, loss, grads, 0)
    assert torch.equal(b(params, loss, grads, 0), eta)
    for _ in range(6):
        params = [w - eta.view(-1, 1, 1) * g for w, g in zip(params, grads)]
        loss, grads = f(params)
        before = b.loop_carry()
        eta, carry = b.loop_step(params, loss, grads, before)
        assert torch.equal(b.loop_carry(), before)  # pure: nothing written
        b.loop_load(carry, loss)
        assert torch.equal(a(params, loss, grads, 1), eta)
        assert b.state["prev_loss"] is loss
    for k in ("min_g2", "sum_eta", "sum_eta_g2", "sum_eta_root_g", "worst_excess", "violations", "ambiguous"):
        assert torch.equal(a.state[k], b.state[k]), k


# --------------------------------------------------------------------------------------- ValueErrors
def test_relu_is_refused(gen):
    p1, p2 = search.random_pairs([3, 4, 1], 2, generator=gen)
    X = deepnet.ball_data(4, 3, generator=gen)
    y = torch.zeros(4, dtype=torch.float64)
    for call in (
        lambda: descent.lemma_4_6(p1, p2, X, y, "relu"),
        lambda: descent.make_loss_and_grad(p1, X, y, "relu"),
    ):
        with pytest.raises(ValueError, match="not smooth"):
            call()


def test_bad_arguments():
    with pytest.raises(ValueError, match="L >= 2"):
        descent.lemma_4_6_C(1, 3)
    with pytest.raises(ValueError, match="c_J >= 1"):
        descent.rho(2, 3, c_J=0.5)
    with pytest.raises(ValueError, match="kappa"):
        descent.adaptive_step(2, 3, kappa=-1.0)
    with pytest.raises(ValueError, match="kappa"):
        descent.Tracker(2, 3, kappa=0.0)
    with pytest.raises(ValueError, match="kappa"):
        descent.eta(torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64), 2, 3, kappa=0.0)


# ------------------------------------------------------------ Lemma 4.7 decided in ball arithmetic
@pytest.mark.parametrize("act", SMOOTH)
def test_exact_excess_encloses_the_float64_excess_where_float64_resolves_it(act):
    gen = torch.Generator().manual_seed(3)
    W = deepnet.init_params([3, 5, 4, 1], 3, 1.0, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(10, 3, generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(10, generator=gen, dtype=torch.float64)
    kappa = 1e5  # a step large enough for float64 to resolve its excess to many digits
    excess, loss = descent.one_step_excess(W, X, y, act, kappa=kappa)
    low, high = descent.exact_excess(W, X, y, act, kappa=kappa)
    assert bool((low <= high).all())
    assert torch.allclose((low + high) / 2, excess, rtol=1e-6, atol=1e-9 * float(loss.max()))
    # a 256-bit ball (~1e-70 wide) rounded outward: no float64 between its ends, so they are equal or neighbours
    assert bool((high <= torch.nextafter(low, torch.tensor(math.inf, dtype=low.dtype))).all())


def test_exact_excess_decides_a_step_inside_the_float64_band():
    gen = torch.Generator().manual_seed(4)
    W = deepnet.init_params([4, 6, 6, 6, 1], 2, 2.0, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(32, 4, generator=gen, device="cpu", dtype=torch.float64)
    y = 0.5 * torch.randn(32, generator=gen, dtype=torch.float64)
    excess, loss = descent.one_step_excess(W, X, y, "tanh")
    inside = excess.abs() <= 2 * 32 * 2.0**-52 * loss  # float64 cannot tell
    assert bool(inside.any())
    low, high = descent.exact_excess(W, X, y, "tanh")
    assert bool((high[inside] < 0).all())  # the balls can: a descent


def test_exact_excess_rejects_bad_input():
    W = deepnet.init_params([2, 3, 1], 2, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(4, 2, device="cpu", dtype=torch.float64)
    with pytest.raises(ValueError, match="prec"):
        descent.exact_excess(W, X, X[:, 0], "tanh", prec=20)
    with pytest.raises(ValueError, match="one activation per member"):
        descent.exact_excess(W, X, X[:, 0], ["tanh"])
    with pytest.raises(ValueError, match="not smooth"):
        descent.exact_excess(W, X, X[:, 0], "relu")


# ----------------------------------------------------------------------------- the rounding band
def test_rounding_band_is_the_registered_product_and_checks_agreement():
    band = {"band_factor": 2, "n": 32, "eps": torch.finfo(torch.float64).eps}
    assert descent.rounding_band([band, dict(band)], n=32, dtype=torch.float64) == 2 * 32 * 2.0**-52
    with pytest.raises(ValueError, match="rules\\[1\\]"):
        descent.rounding_band([band, {**band, "band_factor": 4}], n=32, dtype=torch.float64)
    with pytest.raises(ValueError, match="data n = 8"):
        descent.rounding_band([band], n=8, dtype=torch.float64)
    with pytest.raises(ValueError, match="eps"):
        descent.rounding_band([band], n=32, dtype=torch.float32)
    with pytest.raises(ValueError, match="at least one"):
        descent.rounding_band([], n=32)
