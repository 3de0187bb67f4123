"""The engine (companion.gd.run) against a per-member loop and hand-written GD; divergence flags; records; step rules."""

import torch

from companion import activations, deepnet, gd

SMOOTH = activations.SMOOTH


def _problem(gen, widths=(4, 5, 3, 1), E=3, n=10, init=1.0):
    params = deepnet.init_params(list(widths), E, init, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


def test_engine_equals_per_member_loop(gen):
    """One batched run equals E separate single-member runs, to 1e-12, with per-member steps."""
    params, X, y = _problem(gen, E=5)
    etas = torch.tensor([0.01, 0.05, 0.1, 0.2, 0.3], dtype=torch.float64)
    lg = lambda p: deepnet.loss_and_gradient(p, X, y, "tanh")  # noqa: E731
    batched = gd.run(lg, params, 50, etas, record_at=range(51), observers={"gn": gd.grad_norm_sq})
    for e in range(5):
        alone = gd.run(
            lg, [w[e : e + 1] for w in params], 50, float(etas[e]), record_at=range(51), observers={"gn": gd.grad_norm_sq}
        )
        for a, b in zip(batched.params, alone.params):
            assert torch.allclose(a[e : e + 1], b, rtol=1e-12, atol=1e-14)
        assert torch.allclose(batched.history["loss"][:, e], alone.history["loss"][:, 0], rtol=1e-12, atol=1e-14)
        assert torch.allclose(batched.history["gn"][:, e], alone.history["gn"][:, 0], rtol=1e-12, atol=1e-14)


def test_engine_matches_hand_written_gd(gen):
    params, X, y = _problem(gen, E=2)
    ws = [w.clone() for w in params]
    for _ in range(20):
        _, g = deepnet.loss_and_gradient(ws, X, y, "softplus")
        ws = [w - 0.1 * gw for w, gw in zip(ws, g)]
    res = gd.run(lambda p: deepnet.loss_and_gradient(p, X, y, "softplus"), params, 20, 0.1)
    for a, b in zip(res.params, ws):
        assert torch.allclose(a, b, rtol=1e-13, atol=1e-15)
    assert res.history["loss"].shape == (2, 2)


def test_divergent_member_is_flagged_and_others_continue(gen):
    """A huge step makes one linear-network member blow up; it is flagged and frozen, the rest converge."""
    params, X, y = _problem(gen, widths=(3, 3, 1), E=4, init=0.5)
    etas = torch.tensor([0.05, 0.05, 1e6, 0.05], dtype=torch.float64)
    lg = lambda p: deepnet.loss_and_gradient(p, X, y, "linear")  # noqa: E731
    res = gd.run(lg, params, 300, etas, record_at=range(301))
    assert res.diverged.tolist() == [False, False, True, False]
    t = int(res.diverged_at[2])
    assert 0 <= t < 300
    assert torch.isnan(res.history["loss"][t + 1 :, 2]).all()  # nothing recorded after the flag
    assert torch.isfinite(res.history["loss"][:t, 2]).all()
    for w in res.params:
        assert torch.isfinite(w).all()  # frozen at its last finite iterate
    healthy = res.history["loss"][:, [0, 1, 3]]
    assert (healthy[-1] < healthy[0]).all()
    alone = gd.run(lg, [w[[0, 1, 3]] for w in params], 300, 0.05)
    for a, b in zip(res.params, alone.params):
        assert torch.allclose(a[[0, 1, 3]], b, rtol=1e-12, atol=1e-14)


def test_record_at_and_step_rule(gen):
    params, X, y = _problem(gen, E=2)
    seen = []

    def rule(p, loss, grads, t):
        seen.append(t)
        return torch.full_like(loss, 0.1)

    res = gd.run(lambda p: deepnet.loss_and_gradient(p, X, y, "tanh"), params, 10, rule, record_at=[0, 5, 10])
    assert seen == list(range(10))
    assert res.iterations.tolist() == [0, 5, 10]
    assert torch.isnan(res.history["eta"][-1]).all() and (res.history["eta"][0] == 0.1).all()


def test_log_spaced():
    r = gd.log_spaced(10_000, 30)
    assert r[0] == 0 and r[-1] == 10_000 and (r.diff() > 0).all()
