"""The engine's optimised inner loop keeps the semantics of the straightforward one.

``reference_run`` below is the engine's loop as first written (four-pass ``isfinite(x).all(1)`` checks,
``p − η g`` then ``copy_(where(...))``). :func:`companion.gd.run` now uses a one-reduction finiteness
test (:func:`companion.gd.finite_rows`), a fused ``addcmul`` step and an in-place ``where``; these tests
check that per-member step sizes, divergence flags and iterations, freezing, history and final parameters
are unchanged, and that the loop makes no host synchronisation per step. No timings here
(benchmarks/run.py measures speed).
"""

from __future__ import annotations

import math

import pytest
import torch
from host_conversions import HostConversions  # noqa: E402

from companion import gd

F64 = torch.float64


def reference_run(loss_and_grad, params, steps, step_size, record_at, observers=None):
    """The original loop of ``gd.run`` (before the performance work), kept as the semantic reference."""
    params = [p.detach().clone() for p in params]
    E = params[0].shape[0]
    rule = step_size if callable(step_size) else gd.constant(step_size)
    rec = torch.as_tensor(record_at, dtype=torch.long).flatten().unique(sorted=True)
    slot = {int(t): i for i, t in enumerate(rec.tolist())}
    observers = dict(observers or {})
    history = {}
    alive = torch.ones(E, dtype=torch.bool)
    diverged_at = torch.full((E,), -1, dtype=torch.long)

    def record(i, loss, grads, eta):
        values = {"loss": loss, "eta": eta, **{k: f(params, loss, grads) for k, f in observers.items()}}
        for k, v in values.items():
            if k not in history:
                history[k] = torch.full((rec.numel(), *v.shape), float("nan"), dtype=v.dtype)
            mask = alive.view(E, *([1] * (v.ndim - 1)))
            history[k][i] = torch.where(mask, v.to(history[k].dtype), torch.nan)

    for t in range(steps + 1):
        loss, grads = loss_and_grad(params)
        finite = torch.isfinite(loss)
        for g in grads:
            finite &= torch.isfinite(g.flatten(1)).all(dim=1)
        newly = alive & ~finite
        diverged_at = torch.where(newly, torch.tensor(t), diverged_at)
        alive = alive & finite
        eta = rule(params, loss, grads, t) if t < steps else torch.full_like(loss, float("nan"))
        if t in slot:
            record(slot[t], loss, grads, eta)
        if t == steps:
            break
        shapes = [(E,) + (1,) * (p.ndim - 1) for p in params]
        news = [p - eta.view(shape) * g for p, g, shape in zip(params, grads, shapes)]
        ok = torch.isfinite(eta)
        for new in news:
            ok = ok & torch.isfinite(new.flatten(1)).all(dim=1)
        blew = alive & ~ok
        diverged_at = torch.where(blew, torch.tensor(t), diverged_at)
        alive = alive & ok
        for p, new, shape in zip(params, news, shapes):
            p.copy_(torch.where(alive.view(shape), new, p))
    return params, rec, history, diverged_at


def quadratic(curv: torch.Tensor, poison: dict[int, tuple[int, float]] | None = None):
    """``L_e(θ) = ½ c_e ‖θ_e‖²`` for params ``[a (E, 3), b (E, 2, 2)]``; ``poison[t] = (e, value)`` writes
    ``value`` (NaN/inf) into member e's gradient at the t-th call."""
    calls = {"t": 0}

    def lg(params):
        a, b = params
        c = curv.to(a)
        loss = 0.5 * c * ((a * a).sum(1) + (b * b).flatten(1).sum(1))
        ga, gb = c[:, None] * a, c[:, None, None] * b
        if poison and calls["t"] in poison:
            e, val = poison[calls["t"]]
            gb = gb.clone()
            gb[e, 1, 0] = val
        calls["t"] += 1
        return loss, [ga, gb]

    return lg


def _params(E, gen):
    return [torch.randn(E, 3, generator=gen, dtype=F64), torch.randn(E, 2, 2, generator=gen, dtype=F64)]


def _same(x, y):
    assert x.shape == y.shape
    assert torch.equal(torch.isnan(x), torch.isnan(y))
    torch.testing.assert_close(torch.nan_to_num(x), torch.nan_to_num(y), rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_finite_rows_matches_isfinite_all(dtype, gen):
    for D in (1, 7, 8, 9, 63, 64, 65, 257):
        x = torch.randn(3, D, generator=gen).to(dtype) * 1e3
        assert torch.equal(gd.finite_rows(x), torch.ones(3, dtype=torch.bool))
        for j in range(D):
            for bad in (math.nan, math.inf, -math.inf):
                y = x.clone()
                y[1, j] = bad
                assert torch.equal(gd.finite_rows(y), torch.isfinite(y).all(1)), (D, j, bad)
    big = torch.full((2, 50), torch.finfo(dtype).max, dtype=dtype)  # finite, but its sum overflows
    assert bool(gd.finite_rows(big).all())
    assert torch.equal(gd.finite_rows(torch.tensor([1.0, math.nan, math.inf], dtype=dtype)), torch.tensor([True, False, False]))
    assert torch.equal(gd.finite_rows(torch.zeros(4, 0, dtype=dtype)), torch.ones(4, dtype=torch.bool))
    z = torch.randn(2, 3, 4, generator=gen).to(dtype)
    z[0, 2, 3] = math.nan
    assert torch.equal(gd.finite_rows(z), torch.tensor([False, True]))


def test_divergence_iteration_freeze_and_history_match_reference(gen):
    E, steps = 6, 60
    params = _params(E, gen)
    curv = torch.tensor([1.0, 1.0, 1.0, 1.0, 2.0, 1.0], dtype=F64)
    # per-member steps: members 0-1 converge, 2 and 3 blow up (|1 − η c| = 1e3 and 1e5), 4 converges with
    # c = 2, 5 converges but gets a NaN gradient at iteration 17
    eta = torch.tensor([0.5, 1.5, 1001.0, 100001.0, 0.25, 0.9], dtype=F64)
    poison = {17: (5, math.nan), 23: (5, math.inf)}
    record_at = [0, 1, 5, 16, 17, 18, 40, 59, 60]
    obs = {"gn": gd.grad_norm_sq, "pn": gd.param_norm}
    res = gd.run(quadratic(curv, poison), params, steps, eta, record_at=record_at, observers=obs, progress=False)
    ref_p, ref_rec, ref_h, ref_at = reference_run(quadratic(curv, poison), params, steps, eta, record_at, obs)
    assert torch.equal(res.diverged_at, ref_at)
    assert torch.equal(res.iterations, ref_rec)
    assert torch.equal(res.diverged, ref_at >= 0)
    assert res.diverged.tolist() == [False, False, True, True, False, True]
    assert int(res.diverged_at[5]) == 17
    for p, q in zip(res.params, ref_p):
        _same(p, q)
    assert set(res.history) == set(ref_h)
    for k in ref_h:
        _same(res.history[k], ref_h[k])
    # the blow-ups: ‖θ_t‖ grows like 1000^t (member 2) and 1e5^t (member 3) until ½‖θ‖² overflows; the flag is
    # the first iteration whose loss is non-finite, and the member is frozen at that (finite) iterate
    for e, growth in ((2, 1000.0), (3, 1e5)):
        frozen = [res.params[0][e : e + 1], res.params[1][e : e + 1]]
        assert all(bool(torch.isfinite(p).all()) for p in frozen)
        before = [p / growth for p in frozen]
        c1 = curv[e : e + 1]
        assert not math.isfinite(float(quadratic(c1)(frozen)[0][0]))
        assert math.isfinite(float(quadratic(c1)(before)[0][0]))
        assert 0 < int(res.diverged_at[e]) < steps
    # after its flag a member's history is NaN, before it finite
    it = res.iterations
    for e in range(E):
        at = int(res.diverged_at[e])
        row = res.history["loss"][:, e]
        if at >= 0:
            assert bool(torch.isnan(row[it >= at]).all()) and bool(torch.isfinite(row[it < at]).all())
        else:
            assert bool(torch.isfinite(row[:-1]).all())


def test_nonfinite_gradient_between_records_matches_reference(gen):
    """A NaN or inf gradient at an iteration that is not recorded (even with a tiny step) is flagged at that
    iteration and the member frozen there, as in the reference loop."""
    E, steps = 4, 40
    params = _params(E, gen)
    curv = torch.ones(E, dtype=F64)
    eta = torch.tensor([0.5, 1e-300, 0.3, 0.7], dtype=F64)
    poison = {29: (1, math.inf), 31: (2, math.nan)}
    record_at = [0, 10, 40]
    res = gd.run(quadratic(curv, poison), params, steps, eta, record_at=record_at, progress=False)
    ref_p, _, ref_h, ref_at = reference_run(quadratic(curv, poison), params, steps, eta, record_at)
    assert res.diverged_at.tolist() == [-1, 29, 31, -1]
    assert torch.equal(res.diverged_at, ref_at)
    for p, q in zip(res.params, ref_p):
        _same(p, q)
    for k in ref_h:
        _same(res.history[k], ref_h[k])


def test_nonfinite_new_params_flag_at_the_step(gen):
    """A finite loss and gradient whose step overflows: flagged at that iteration, frozen before it."""
    E = 3
    params = [torch.ones(E, 2, dtype=F64)]

    def lg(p):
        (a,) = p
        return (a * 0).sum(1), [torch.full_like(a, 1e300)]

    eta = torch.tensor([1.0, 1e10, 1e-300], dtype=F64)  # member 1: 1e310 overflows at the first step
    res = gd.run(lg, params, 5, eta, progress=False)
    ref_p, _, _, ref_at = reference_run(lg, params, 5, eta, [0, 5])
    assert torch.equal(res.diverged_at, ref_at)
    assert res.diverged_at.tolist() == [-1, 0, -1]
    assert torch.equal(res.params[0][1], torch.ones(2, dtype=F64))
    _same(res.params[0], ref_p[0])


def test_step_rule_and_wider_eta_dtype(gen):
    """A step-size rule (per member, state dependent) and float32 parameters with a float64 η."""
    E = 4
    params = [torch.randn(E, 5, generator=gen, dtype=torch.float32)]

    def lg(p):
        (a,) = p
        return 0.5 * (a * a).sum(1), [a.clone()]

    def rule(p, loss, grads, t):
        return (0.1 + 0.01 * t + 0.1 * torch.arange(E, dtype=F64)) / (1 + loss.double())

    res = gd.run(lg, params, 30, rule, record_at=range(31), progress=False)
    ref_p, _, ref_h, ref_at = reference_run(lg, params, 30, rule, list(range(31)))
    assert res.params[0].dtype == torch.float32
    assert torch.equal(res.diverged_at, ref_at)
    torch.testing.assert_close(res.params[0], ref_p[0], rtol=1e-6, atol=0)
    torch.testing.assert_close(res.history["eta"], ref_h["eta"], rtol=1e-6, atol=0, equal_nan=True)


def test_no_host_sync_per_step(gen):
    """The number of host conversions does not grow with the number of steps (none inside the loop)."""
    E = 5
    params = _params(E, gen)
    curv = torch.linspace(0.5, 2.0, E, dtype=F64)
    eta = torch.full((E,), 0.3, dtype=F64)
    counts = []
    for steps in (5, 50):
        with HostConversions() as mode:
            gd.run(quadratic(curv), params, steps, eta, record_at=[0, 1, 2, steps], progress=False)
        counts.append(mode.count)
    assert counts[0] == counts[1], counts


def test_frozen_members_do_not_disturb_the_others(gen):
    """Members that diverge leave the others bit-identical to a run without them."""
    E = 4
    params = _params(E, gen)
    curv = torch.ones(E, dtype=F64)
    eta = torch.tensor([0.3, 1e4, 0.7, 1e6], dtype=F64)  # members 1 and 3 overflow within 80 steps
    res = gd.run(quadratic(curv), params, 80, eta, progress=False)
    keep = [0, 2]
    alone = gd.run(quadratic(curv[keep]), [p[keep] for p in params], 80, eta[keep], progress=False)
    assert res.diverged.tolist() == [False, True, False, True]
    for p, q in zip(res.params, alone.params):
        assert torch.equal(p[keep], q)


def test_sync_counter_sees_a_per_step_item(gen):
    """The counter above is not blind: a loss that calls ``.item()`` every step makes the counts differ."""
    E = 3
    params = _params(E, gen)
    base = quadratic(torch.ones(E, dtype=F64))

    def chatty(p):
        loss, grads = base(p)
        loss.sum().item()
        return loss, grads

    counts = []
    for steps in (5, 50):
        with HostConversions() as mode:
            gd.run(chatty, params, steps, 0.1, progress=False)
        counts.append(mode.count)
    assert counts[1] - counts[0] == 45, counts
