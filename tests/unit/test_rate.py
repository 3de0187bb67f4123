"""The statements ch-descent and ch-rate rest on, checked at unit scale: the zero-embedding that batches the d_max sweep
is exact for tanh, a per-member kappa turns the tracker's step into each member's own eta_t, the rate instance
has no critical point, Theorem 4.8's constants (companion.rate) satisfy their definition, and the inequalities of
Theorem 4.8's proof hold on a short run with kappa * eta_t."""

from __future__ import annotations

import math

import pytest
import torch

from companion import deepnet, descent, device, gd, rate


@pytest.fixture
def gen():
    return device.generator(7)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_zero_embedding_is_exact_for_tanh(gen, L):
    """A narrow tanh network embedded in a wider one with zero weights follows the same GD trajectory, and the
    padded weights stay exactly zero (sigma(0) = 0: the extra units output 0 and receive zero gradient)."""
    d, narrow, wide, n = 3, 4, 9, 6
    X = deepnet.ball_data(n, d, generator=gen, dtype=torch.float64, device="cpu")
    y = device.randn((n,), generator=gen, dtype=torch.float64, device="cpu")
    p = deepnet.init_params([d] + [narrow] * (L - 1) + [1], 3, 1.0, generator=gen, dtype=torch.float64, device="cpu")
    q, mask = deepnet.embed(p, wide)
    eta = 0.05
    a = gd.run(descent.make_loss_and_grad(p, X, y, "tanh"), p, 50, eta, record_at=range(51))
    b = gd.run(descent.make_loss_and_grad(q, X, y, "tanh"), q, 50, eta, record_at=range(51))
    torch.testing.assert_close(a.history["loss"], b.history["loss"], rtol=1e-13, atol=0)
    assert all(float((w * (1 - m)).abs().max()) == 0.0 for w, m in zip(b.params, mask))
    assert deepnet.norm(a.params).tolist() == pytest.approx(deepnet.norm(b.params).tolist(), rel=1e-13)


def test_zero_embedding_is_not_exact_for_sigmoid(gen):
    """The embedding needs sigma(0) = 0: with the sigmoid (sigma(0) = 1/2) the padded weights start to move."""
    d = 3
    X = deepnet.ball_data(6, d, generator=gen, dtype=torch.float64, device="cpu")
    y = device.randn((6,), generator=gen, dtype=torch.float64, device="cpu")
    p = deepnet.init_params([d, 4, 4, 1], 2, 1.0, generator=gen, dtype=torch.float64, device="cpu")
    q, mask = deepnet.embed(p, 8)
    b = gd.run(descent.make_loss_and_grad(q, X, y, "sigmoid"), q, 5, 0.05)
    assert max(float((w * (1 - m)).abs().max()) for w, m in zip(b.params, mask)) > 0


@pytest.mark.parametrize("L", [2, 3, 4])
def test_per_member_kappa_gives_each_member_its_own_eta(gen, L):
    """kappa_e = rho(L, D) / rho(L, d_e) in a tracker built for d_max = D is Lemma 4.7's step for d_max = d_e."""
    D, dms = 64, [4, 8, 16, 32, 64]
    E = len(dms)
    params = deepnet.init_params([4] + [D] * (L - 1) + [1], E, 1.0, generator=gen, dtype=torch.float64, device="cpu")
    loss = device.rand((E,), generator=gen, dtype=torch.float64, device="cpu")
    kappa = torch.tensor([descent.rho(L, D) / descent.rho(L, dm) for dm in dms], dtype=torch.float64)
    step = descent.Tracker(L, D, kappa=kappa)(params, loss, [torch.zeros_like(w) for w in params], 0)
    norm = deepnet.norm(params)
    want = torch.stack([descent.eta(norm[e : e + 1], loss[e : e + 1], L, dm)[0] for e, dm in enumerate(dms)])
    torch.testing.assert_close(step, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("L", [2, 3, 4])
def test_rate_instance_has_no_critical_point(gen, L):
    """ch-rate's instance (sigmoid, every target 1.5): every entry of dL/dw_L is strictly negative."""
    X = deepnet.ball_data(8, 2, generator=gen, dtype=torch.float64, device="cpu")
    y = torch.full((8,), 1.5, dtype=torch.float64)
    for scale in (0.1, 1.0, 10.0):
        p = deepnet.init_params([2] + [3] * (L - 1) + [1], 64, scale, generator=gen, dtype=torch.float64, device="cpu")
        _, g = deepnet.loss_and_gradient(p, X, y, "sigmoid")
        assert (g[-1] < 0).all()


def test_theorem_4_8_chain_on_a_short_rescaled_run(gen):
    """On a short run of kappa * eta_t (L = 2): descent at every step, min ||grad||^2 <= 2L L0 / sum eta,
    ||W_T||^N <= alpha* T^((L-1)/L) + beta and sum eta >= sum 1/D_t with rho' = rho / kappa."""
    L, steps, kappa = 2, 300, 1e3
    X = deepnet.ball_data(8, 2, generator=gen, dtype=torch.float64, device="cpu")
    y = torch.full((8,), 1.5, dtype=torch.float64)
    p = deepnet.init_params([2, 3, 1], 4, 0.3, generator=gen, dtype=torch.float64, device="cpu")
    tr = descent.Tracker(L, deepnet.d_max(p), kappa=kappa, tol=2 * 8 * torch.finfo(torch.float64).eps)
    res = gd.run(
        descent.make_loss_and_grad(p, X, y, "sigmoid"),
        p,
        steps,
        tr,
        record_at=gd.log_spaced(steps, 20),
        observers=tr.observers(),
    )
    h = res.history
    assert int(tr.state["violations"].sum()) == 0 and not bool(res.diverged.any())
    assert (h["min_g2"] * h["sum_eta"] <= 2 * L * h["loss"][0]).all()
    rho_p = descent.rho(L, deepnet.d_max(p)) / kappa
    T = torch.clamp(res.iterations + 1, max=steps)
    for e in range(4):
        c = rate.rate_constants(L, rho_p, h["loss"][0, e].item(), h["param_norm"][0, e].item())
        assert (h["param_norm"][:, e] ** (2 * L - 2) <= c.norm_power_bound(res.iterations.to(torch.float64))).all()
        assert (c.eta_sum_lower_bound(steps)[T - 1] <= h["sum_eta"][:, e]).all()
    assert math.isfinite(float(h["sum_eta"][-1].min()))


def test_rate_constants_satisfy_their_definition():
    for L in (2, 3, 4):
        c = rate.rate_constants(L, 50.0, 0.8, 1.7)
        N = 2 * L - 2
        p = (N - 2) / (2 * N)
        assert c.beta == pytest.approx(1.7**N + sum(math.comb(N, k) * (2 * L * 0.8) ** (k / 2) for k in range(2, N + 1)))
        assert c.A * ((1 + c.beta) ** p + c.alpha**p) <= c.alpha * (1 + 1e-12)
        if p > 0:  # alpha* is the smallest such alpha
            a = 0.999 * c.alpha
            assert c.A * ((1 + c.beta) ** p + a**p) > a
        assert c.norm_power_bound(0).item() == pytest.approx(c.beta)
        lb = c.eta_sum_lower_bound(100)
        assert lb.shape == (100,) and (lb.diff() > 0).all()
    with pytest.raises(ValueError, match="rho >= 1"):
        rate.rate_constants(2, 0.5, 1.0, 1.0)
