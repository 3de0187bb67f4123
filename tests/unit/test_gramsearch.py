"""companion.gramsearch: the entrywise Gram supremum in the entries' own coordinates (paper C, ch-parameter-ball)."""

import pytest
import torch

from companion import gramsearch as gs
from companion import widenet as wn


def _draws(m=16, H=2, n=3):
    params, X, _ = wn.sweep_draws(m, H, n=n, d=4, members=2, data_seed=0, init_seed=1)
    return [p.detach().double() for p in params], X.double()


@pytest.mark.parametrize("arch", ["fc", "res"])
def test_the_moving_frame_is_the_dense_change_it_stands_for(arch):
    """G_ij at θ0 + (B_h Q_hᵀ, Δa), Q_h from the perturbed features, equals G_ij of the dense parameters, and
    ‖B_h Q_hᵀ‖_F = ‖B_h‖_F."""
    net, (params, X) = wn.Net(arch), _draws(H=3)
    g = torch.Generator().manual_seed(3)
    for i, j in ((0, 1), (2, 2)):
        Xp = torch.stack([X[:, [i]], X[:, [j]]], 2)  # (E, 1, 2, d)
        single = torch.tensor([i == j])
        v = [torch.randn(2, 1, 16, 2, generator=g, dtype=torch.float64) * 0.3 for _ in range(3)]
        v.append(torch.randn(2, 1, 16, generator=g, dtype=torch.float64) * 0.3)
        dense, x = [], Xp
        for h in range(3):
            Q = gs._frame(x, single)[:, 0]  # (E, m_in, 2)
            dW = v[h][:, 0] @ Q.transpose(-1, -2)
            used = v[h][:, 0] * torch.tensor([1.0, 0.0 if i == j else 1.0], dtype=torch.float64)
            torch.testing.assert_close(dW.flatten(1).norm(dim=1), used.flatten(1).norm(dim=1))
            dense.append(params[h] + dW)
            x = wn._forward(dense + params[h + 1 :], Xp[:, 0], net, upto=h + 1)[1][-1].unsqueeze(1)
        dense.append(params[-1] + v[3][:, 0])
        want = wn._pair_entries(dense, Xp, net)[0]
        torch.testing.assert_close(gs._entries(params, Xp, net, v, single), want, rtol=1e-12, atol=1e-15)


def test_the_supremum_climbs_from_the_first_order_start_and_random_starts_agree():
    params, X = _draws()
    r = gs.gram_entry_supremum(params, X, 0.5, steps=80, random_starts=2, generator=torch.Generator().manual_seed(0))
    first = wn.gram_entry_ascent(params, X, 0.5, refine=0)["steps"][0]
    torch.testing.assert_close(r["first_order"], first, rtol=1e-2, atol=0)  # the same start up to the frame's motion
    assert bool((r["entry"] >= r["first_order"]).all())
    assert bool((r["stationarity"] <= 1e-4).all()) and int(r["unconverged"].sum()) == 0
    assert bool((r["random"] <= r["entry"] * (1 + 1e-6)).all())


@pytest.mark.parametrize("budget", [20_000_000, 4000])  # one chunk, and several (the draws chunk by chunk)
def test_random_starts_alone_find_what_they_find_beside_the_first_order_starts(budget):
    """``first_order=False`` ascends the same random draws, so ``"random"`` agrees up to rounding."""
    params, X = _draws()
    kw = dict(steps=400, random_starts=2, quasi_newton=True, budget=budget)
    both = gs.gram_entry_supremum(params, X, 1.0, generator=torch.Generator().manual_seed(5), **kw)
    alone = gs.gram_entry_supremum(params, X, 1.0, generator=torch.Generator().manual_seed(5), first_order=False, **kw)
    torch.testing.assert_close(alone["random"], both["random"], rtol=1e-10, atol=0)
    torch.testing.assert_close(alone["random_stationarity"], both["random_stationarity"], rtol=1e-6, atol=1e-12)
    assert int(alone["random_unconverged"].sum()) == int(both["random_unconverged"].sum())
    assert not bool(alone["entry"].any()) and not bool(alone["first_order"].any())


def test_quasi_newton_steps_reach_the_same_maximum():
    params, X = _draws()
    plain = gs.gram_entry_supremum(params, X, 2.0, steps=2000, tol=1e-6)
    qn = gs.gram_entry_supremum(params, X, 2.0, steps=2000, tol=1e-6, quasi_newton=True)
    assert int(plain["unconverged"].sum()) == 0 and int(qn["unconverged"].sum()) == 0
    torch.testing.assert_close(qn["entry"], plain["entry"], rtol=1e-6, atol=0)
    assert bool((qn["entry"] >= qn["first_order"]).all())
    assert qn["steps"] < plain["steps"] / 3  # quasi-Newton steps: 87 here, the projected gradient 501


def test_the_two_loop_recursion_inverts_the_secant_pairs():
    """On pairs ``y = A s`` of a quadratic, the L-BFGS estimate maps the newest ``y`` back to its ``s``; a pair
    left out (``rho = 0``) changes nothing."""
    g = torch.Generator().manual_seed(0)
    N = 7
    A = torch.randn(N, N, generator=g, dtype=torch.float64)
    A = A @ A.T + N * torch.eye(N, dtype=torch.float64)
    S = [torch.randn(2, 3, N, generator=g, dtype=torch.float64) for _ in range(4)]
    Y = [s @ A for s in S]
    rho = [1 / (s * y).sum(-1) for s, y in zip(S, Y)]
    gamma = 1 / (rho[-1] * (Y[-1] * Y[-1]).sum(-1))  # sᵀy/yᵀy of the newest pair
    p, have = gs._two_loop(Y[-1], S, Y, rho, gamma)
    assert bool(have.all())
    torch.testing.assert_close(p, S[-1], rtol=1e-10, atol=1e-12)
    junk = torch.randn(2, 3, N, generator=g, dtype=torch.float64)
    q, _ = gs._two_loop(Y[-1], [junk, *S], [junk, *Y], [torch.zeros(2, 3, dtype=torch.float64), *rho], gamma)
    torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-14)
    q, have = gs._two_loop(Y[-1], S[:1], Y[:1], [torch.zeros(2, 3, dtype=torch.float64)], gamma)
    assert not bool(have.any())  # no pair kept: the caller steps along the gradient


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_every_quasi_newton_step_raises_the_drift(sign):
    """The quasi-Newton ascent stopped after 0, 1, 2, … steps: every pair's drift never falls, rises at every step
    until the pair stops, and ends at the projected gradient's maximum."""
    params, X = _draws()
    net = wn.Net()
    rows, cols = torch.triu_indices(3, 3)
    Xp, single = torch.stack([X[:, rows], X[:, cols]], 2), rows == cols
    g0 = gs._entries(params, Xp, net, gs._zeros(params, Xp), single)
    kw = {"D": 1.5, "sign": sign, "tol": 1e-6}
    prev = None
    for k in range(60):
        best, _, stat, _, taken = gs._ascend(params, Xp, net, g0, single, steps=k, quasi_newton=True, **kw)
        if prev is not None:
            moving = prev[1] > 1e-6  # still ascending after k - 1 steps
            assert bool((best[moving] > prev[0][moving]).all()) and bool((best[~moving] == prev[0][~moving]).all())
        prev = best, stat
        if taken < k:
            break
    assert taken < k and bool((stat <= 1e-6).all())
    plain = gs._ascend(params, Xp, net, g0, single, steps=2000, **kw)[0]
    torch.testing.assert_close(best, plain, rtol=1e-6, atol=0)


def test_bad_input_is_refused():
    params, X = _draws()
    for kwargs in (
        {"D": 0.0},
        {"D": 1.0, "tol": 0.0},
        {"D": 1.0, "steps": -1},
        {"D": 1.0, "random_starts": 1},
        {"D": 1.0, "first_order": False},
    ):
        with pytest.raises(ValueError):
            gs.gram_entry_supremum(params, X, **kwargs)
    with pytest.raises(ValueError):
        gs.gram_entry_supremum(params, X[..., :3], 1.0)


@pytest.mark.parametrize("quasi_newton,random_start", [(False, False), (True, False), (True, True)])
def test_each_entry_ascends_as_it_would_alone(quasi_newton, random_start):
    """Entries leave the batch as they stop and backtracking re-evaluates only the entries still failing: each
    (member, entry) pair, stopped or cut off mid-ascent by ``steps``, must end where it ends in a batch of its own."""
    params, X, _ = wn.sweep_draws(8, 2, n=3, d=4, members=3, data_seed=0, init_seed=2)
    params, X, net = [p.detach().double() for p in params], X.double(), wn.Net("res")
    rows, cols = torch.triu_indices(3, 3)
    Xp, single = torch.stack([X[:, rows], X[:, cols]], 2), rows == cols
    g0 = gs._entries(params, Xp, net, gs._zeros(params, Xp), single)
    g = torch.Generator().manual_seed(1)
    start = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in gs._zeros(params, Xp)] if random_start else None
    kw = {"D": 1.5, "steps": 25 if quasi_newton else 45, "tol": 1e-6, "quasi_newton": quasi_newton}
    for sign in (1.0, -1.0):
        best, first, stat, left, _ = gs._ascend(params, Xp, net, g0, single, sign=sign, start=start, **kw)
        assert 0 < int(left.sum()) < left.numel() * rows.numel()  # some pairs stopped, others were cut off
        for k in range(rows.numel()):
            alone = None if start is None else [t[:, k : k + 1] for t in start]
            one = (params, Xp[:, k : k + 1], net, g0[:, k : k + 1], single[k : k + 1])
            b1, f1, s1, _, _ = gs._ascend(*one, sign=sign, start=alone, **kw)
            torch.testing.assert_close(first[:, k], f1[:, 0], rtol=1e-12, atol=0)
            torch.testing.assert_close(best[:, k], b1[:, 0], rtol=1e-10, atol=0)
            assert torch.equal(stat[:, k] > 1e-6, s1[:, 0] > 1e-6)


def test_the_radius_sweep_searches_each_radius_on_the_sweeps_draws():
    net = wn.Net("fc", "tanh", 1.0)
    kw = dict(H=2, n=3, d=4, members=2, net=net, data_seed=0, init_seed=1)
    r = gs.supremum_sweep(16, [0.5, 1.0], steps=200, **kw)
    assert tuple(r["entry"].shape) == (2, 2) and len(r["steps"]) == 2
    params, X, _ = wn.sweep_draws(16, 2, n=3, d=4, members=2, data_seed=0, init_seed=1)
    one = gs.gram_entry_supremum(params, X, 1.0, net, steps=200, quasi_newton=True)
    torch.testing.assert_close(r["entry"][1], one["entry"], rtol=0, atol=0)
    assert bool((r["entry"][1] > r["entry"][0]).all())  # nearly linear in D at these radii
    with pytest.raises(ValueError):
        gs.supremum_sweep(16, [], **kw)
