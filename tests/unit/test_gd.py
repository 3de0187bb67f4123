"""The batched gradient-descent engine, :mod:`companion.gd` (``gd.run``), in one file.

* **Core** — the batched run against per-member runs and hand-written GD; divergence flags; records; step rules;
  ``log_spaced``.
* **Loop semantics** — the optimised inner loop (one-reduction finiteness test ``finite_rows``, fused ``addcmul``,
  in-place freeze) against the loop as first written (``reference_run``): per-member steps, divergence iterations,
  freezing, history, wider-dtype step sizes, and no host synchronisation per step (counted). No timings here
  (benchmarks/run.py measures speed).
* **The runner** — the stop rule (members leave the batch, their state and records kept), snapshots, per-member data
  restricted with the batch.
* **Captured loop** (CUDA graphs) — validated on the CPU with an eager stand-in for the graph (equal to the eager
  loop, fallback on a failed capture); on CUDA (``gpu``-marked, skipped without one) against the CPU and the eager
  loop, and without device synchronisation per step.
* **Compiled loop** (``compile=True``: the steps between records as one ``torch.while_loop``) — the loop logic with
  an eager stand-in for the compiler (equal to the eager loop, divergence, stops, snapshots; the Tracker's running
  state carried as columns), a real ``torch.compile`` on the CPU (float64-rounding agreement on paper A's network
  with the Tracker), the fallback to the eager loop with a warning when compiling fails, and rules that cannot be
  compiled.
* **Hot paths** — the closures the chapters use make no host conversion per step (on CUDA each is a synchronisation).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from comparisons import close, cpu_gen  # noqa: E402
from host_conversions import HostConversions  # noqa: E402

from companion import deepnet, descent, device, gd, population, relunet

F64 = torch.float64
CUDA = torch.device("cuda")


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def paper_b_problem(E=48, k=2, d=20, n=300, sigma=1.0, per_member=False, r=None):
    g = cpu_gen()
    target = (
        relunet.unit_target(d, device="cpu", dtype=F64)
        if r is None
        else relunet.orthonormal_rows(r, d, generator=g, device="cpu", dtype=F64)
    )
    X, Y = relunet.gaussian_data(n, d, target, ensemble=E if per_member else None, generator=g, device="cpu", dtype=F64)
    W, V = relunet.xavier_init(k, d, E, sigma, r=r, generator=g, device="cpu", dtype=F64)
    return X, Y, W, V


# ---------------------------------------------------------------------------------------- core
def _deepnet_problem(gen, widths=(4, 5, 3, 1), E=3, n=10, init=1.0):
    params = deepnet.init_params(list(widths), E, init, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


def test_engine_equals_per_member_loop(gen):
    """One batched run equals E separate single-member runs, to 1e-12, with per-member steps."""
    params, X, y = _deepnet_problem(gen, E=5)
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
    params, X, y = _deepnet_problem(gen, E=2)
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
    params, X, y = _deepnet_problem(gen, widths=(3, 3, 1), E=4, init=0.5)
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
    params, X, y = _deepnet_problem(gen, E=2)
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


# ---------------------------------------------------------------------------------------- loop semantics
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


# ---------------------------------------------------------------------------------------- the runner: stop rule, snapshots
def _relunet_problem(E=10, per_member=False):
    g = torch.Generator().manual_seed(5)
    d, k, n = 6, 2, 80
    a = relunet.unit_target(d, dtype=F64, device="cpu")
    if per_member:
        X, Y = relunet.gaussian_data(n, d, a, generator=g, ensemble=E, dtype=F64, device="cpu")
    else:
        X, Y = relunet.gaussian_data(n, d, a, generator=g, dtype=F64, device="cpu")
    W, v = relunet.xavier_init(k, d, E, 0.3, generator=g, dtype=F64, device="cpu")
    return relunet.make_loss_and_grad(X, Y), [W, v], a


def _loss_below(level):
    return lambda params, loss, grads: loss <= level


@pytest.mark.parametrize("per_member", [False, True])
def test_stopped_members_keep_the_state_they_had_when_the_rule_first_held(per_member):
    f, params, a = _relunet_problem(per_member=per_member)
    steps, every = 600, 50
    checks = list(range(every, steps, every))
    ref = gd.run(f, params, steps, 0.2, record_at=[0, *checks, steps], snapshot_at=checks, progress=False)
    level = float(ref.history["loss"][len(checks) // 2].median())
    got = gd.run(f, params, steps, 0.2, record_at=[0, *checks, steps], stop=_loss_below(level), check_every=every,
                 progress=False)  # fmt: skip
    below = ref.history["loss"][1:-1] <= level  # (checks, E): the rule at every check of the reference run
    first = torch.where(below.any(0), below.float().argmax(0), -1)
    assert 0 < int((first >= 0).sum()) < params[0].shape[0]  # some members stop, some run to the end
    for e in range(params[0].shape[0]):
        if first[e] < 0:
            assert got.stopped_at[e] == -1
            for p, q in zip(got.params, ref.params):
                torch.testing.assert_close(p[e], q[e], rtol=0, atol=1e-13)
            continue
        t = checks[int(first[e])]
        assert got.stopped_at[e] == t
        for p, q in zip(got.params, ref.snapshots[t]):
            torch.testing.assert_close(p[e], q[e], rtol=0, atol=1e-13)
        i = checks.index(t) + 1  # history row of iteration t
        later = got.history["loss"][i:, e]
        assert torch.all(later == later[0]) and torch.isnan(got.history["eta"][i + 1 :, e]).all()


def test_a_stop_rule_needs_a_closure_that_can_be_restricted():
    f, params, a = _relunet_problem()
    with pytest.raises(ValueError, match="restrict"):
        gd.run(lambda p: f(p), params, 20, 0.1, stop=_loss_below(0.0), progress=False)
    plain = gd.run(gd.shared_data(lambda p: f(p)), params, 20, 0.1, stop=_loss_below(-1.0), check_every=5,
                   progress=False)  # fmt: skip
    assert (plain.stopped_at == -1).all()


def test_snapshots_are_the_states_before_their_step():
    f, params, a = _relunet_problem()
    short = gd.run(f, params, 30, 0.1, progress=False)
    long = gd.run(f, params, 80, 0.1, snapshot_at=[0, 30, 80], progress=False)
    for p, q in zip(long.snapshots[30], short.params):
        assert torch.equal(p, q)
    assert all(torch.equal(p, q) for p, q in zip(long.snapshots[0], params))
    assert all(torch.equal(p, q) for p, q in zip(long.snapshots[80], long.params))
    with pytest.raises(ValueError, match="snapshot_at"):
        gd.run(f, params, 10, 0.1, snapshot_at=[11], progress=False)


def test_everyone_stopping_ends_the_run_with_full_records():
    f, params, a = _relunet_problem()
    res = gd.run(f, params, 400, 0.1, record_at=[0, 100, 200, 400], snapshot_at=[300], stop=_loss_below(1e9),
                 check_every=100, progress=False)  # fmt: skip
    assert (res.stopped_at == 100).all()
    assert torch.equal(res.history["loss"][1], res.history["loss"][3])
    assert all(torch.equal(p, q) for p, q in zip(res.snapshots[300], res.params))


def test_population_closure_with_fixed_output_weights_is_restricted():
    g = torch.Generator().manual_seed(2)
    a = relunet.unit_target(5, dtype=F64, device="cpu")
    W, v = relunet.xavier_init(2, 5, 6, 0.5, generator=g, dtype=F64, device="cpu")
    f = population.make_loss_and_grad(a, fixed_v=v)
    ref = gd.run(f, [W], 300, 0.1, progress=False)
    stopped = gd.run(f, [W], 300, 0.1, stop=lambda p, loss, g_: torch.arange(6) % 2 == 0, check_every=150,
                     progress=False)  # fmt: skip
    assert stopped.stopped_at.tolist() == [150, -1, 150, -1, 150, -1]
    torch.testing.assert_close(stopped.params[0][1::2], ref.params[0][1::2], rtol=0, atol=1e-14)


def test_divergence_and_stopping_together():
    f, params, a = _relunet_problem()
    eta = torch.full((10,), 0.1, dtype=F64)
    eta[3] = 1e9
    res = gd.run(f, params, 300, eta, record_at=[0, 300], stop=_loss_below(0.05), check_every=50, progress=False)
    assert res.diverged[3] and res.stopped_at[3] == -1 and res.diverged_at[3] >= 0
    assert torch.isnan(res.history["loss"][-1, 3])
    assert all(torch.isfinite(p).all() for p in res.params)


def test_captured_loop_with_stops_and_snapshots_equals_the_eager_loop(monkeypatch):
    monkeypatch.setattr(gd, "_CAPTURE", lambda body, dev: body)
    monkeypatch.setattr(gd, "_capture_wanted", lambda capture, dev, rule: capture is not False)
    f, params, a = _relunet_problem(per_member=True)
    eta = torch.full((10,), 0.2, dtype=F64)
    eta[7] = 1e9
    kw = dict(record_at=gd.log_spaced(500, 12), snapshot_at=[250], stop=_loss_below(0.02), check_every=100,
              observers={"gn": gd.grad_norm_sq}, progress=False)  # fmt: skip
    eager = gd.run(f, params, 500, eta, capture=False, **kw)
    graph = gd.run(f, params, 500, eta, capture=True, **kw)
    assert graph.meta["captured"] and (eager.stopped_at >= 0).any()
    assert torch.equal(eager.stopped_at, graph.stopped_at) and torch.equal(eager.diverged_at, graph.diverged_at)
    for p, q in zip(eager.params, graph.params):
        assert torch.equal(p, q)
    for key in eager.history:
        assert torch.equal(torch.nan_to_num(eager.history[key]), torch.nan_to_num(graph.history[key])), key
    assert all(torch.equal(p, q) for p, q in zip(eager.snapshots[250], graph.snapshots[250]))


# ---------------------------------------------------------------------------------------- hot paths, capture option (CPU)
def _paper_a_closure():
    g = cpu_gen()
    X = deepnet.ball_data(40, 6, generator=g, device="cpu", dtype=F64)
    y = 0.5 * torch.tanh(X[:, 0])
    params = deepnet.init_params([6, 8, 1], 16, generator=g, device="cpu", dtype=F64)
    return (lambda p: deepnet.loss_and_gradient(p, X, y, "tanh")), params


def _paper_a_validated_once():
    _, params = _paper_a_closure()
    g = cpu_gen()
    X = deepnet.ball_data(40, 6, generator=g, device="cpu", dtype=F64)
    y = 0.5 * torch.tanh(X[:, 0])
    return deepnet.make_loss_and_grad(X, y, "tanh"), params


def _paper_b_closure():
    X, Y, W, V = paper_b_problem(E=16)
    return relunet.make_loss_and_grad(X, Y), [W, V]


def _paper_b_per_member_eta():
    """A per-member step-size tensor: converted to the parameters' device once, not at every step."""
    X, Y, W, V = paper_b_problem(E=16)
    return relunet.make_loss_and_grad(X, Y), [W, V], torch.full((16,), 0.05, dtype=F64)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            _paper_a_closure,
            marks=pytest.mark.xfail(
                strict=True,
                reason="deepnet.loss_and_gradient validates params, X and y (finite: bool() of validation.all_finite) on "
                "every call: ~7 host syncs per step on CUDA; deepnet.make_loss_and_grad removes them",
            ),
        ),
        _paper_a_validated_once,
        _paper_b_closure,
        _paper_b_per_member_eta,
    ],
    ids=["paper_a_deepnet", "paper_a_make_loss_and_grad", "paper_b_relunet", "paper_b_per_member_eta"],
)
def test_hot_paths_make_no_host_conversion_per_step(make):
    """The host conversions of a whole gd.run do not grow with the number of steps (after a warm-up run)."""
    made = make()
    lg, params = made[:2]
    eta = made[2] if len(made) > 2 else 0.05
    gd.run(lg, params, 2, eta, progress=False)  # warm-up: the closure's one-off checks
    counts = []
    for steps in (4, 40):
        with HostConversions() as mode:
            res = gd.run(lg, params, steps, eta, record_at=[0, steps], observers={"gn": gd.grad_norm_sq}, progress=False)
        counts.append(mode.count)
        assert all(p.device == params[0].device for p in res.params)
        assert res.diverged_at.device == params[0].device and res.history["gn"].device == params[0].device
    assert counts[0] == counts[1], counts


def test_capture_option_on_cpu():
    """``capture=None`` runs the eager loop on the CPU; ``capture=True`` there, or with a rule not marked
    capturable, is an error rather than a silent fallback."""
    lg, params = _paper_b_closure()
    assert gd.run(lg, params, 3, 0.05, progress=False).meta["captured"] is False
    assert gd.run(lg, params, 3, 0.05, progress=False, capture=False).meta["captured"] is False
    with pytest.raises(ValueError, match="CUDA"):
        gd.run(lg, params, 3, 0.05, progress=False, capture=True)
    assert gd.constant(0.1).capturable and gd.constant(torch.full((16,), 0.1, dtype=F64)).capturable


def _divergent_problem():
    X, Y, W, V = paper_b_problem(E=32, sigma=1.0)
    eta = torch.full((32,), 0.1, dtype=F64)
    eta[[3, 17]] = 1e6  # these two blow up
    obs = relunet.make_observers(relunet.unit_target(20, device="cpu", dtype=F64))
    return relunet.make_loss_and_grad(X, Y), [W, V], eta, obs


def _same_run(a, b):
    assert torch.equal(a.diverged_at, b.diverged_at) and torch.equal(a.iterations, b.iterations)
    assert all(torch.equal(p, q) for p, q in zip(a.params, b.params))
    assert set(a.history) == set(b.history)
    for key in a.history:
        assert torch.equal(torch.isnan(a.history[key]), torch.isnan(b.history[key])), key
        assert torch.equal(torch.nan_to_num(a.history[key]), torch.nan_to_num(b.history[key])), key


def test_captured_loop_logic_on_cpu(monkeypatch):
    """The captured loop (static buffers, device iteration counter, recording between replays, NaN step size
    at the end) with an eager stand-in for the graph: identical to the eager loop, divergence included."""
    monkeypatch.setattr(gd, "_CAPTURE", lambda body, dev: body)
    monkeypatch.setattr(gd, "_capture_wanted", lambda capture, dev, rule: capture is not False)
    lg, params, eta, obs = _divergent_problem()
    record = gd.log_spaced(120, 10)
    eager = gd.run(lg, params, 120, eta, record_at=record, observers=obs, progress=False, capture=False)
    graph = gd.run(lg, params, 120, eta, record_at=record, observers=obs, progress=False, capture=True)
    assert graph.meta["captured"] and not eager.meta["captured"]
    assert set(eager.diverged_at[[3, 17]].tolist()) != {-1}
    _same_run(graph, eager)


def test_failed_capture_falls_back_to_the_eager_loop(monkeypatch):
    """A closure that cannot be captured: ``capture=None`` continues eagerly from the same state (and says
    why), ``capture=True`` raises."""

    def refuse(body, dev):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(gd, "_CAPTURE", refuse)
    monkeypatch.setattr(gd, "_capture_wanted", lambda capture, dev, rule: capture is not False)
    lg, params, eta, obs = _divergent_problem()
    eager = gd.run(lg, params, 60, eta, observers=obs, progress=False, capture=False)
    auto = gd.run(lg, params, 60, eta, observers=obs, progress=False, capture=None)
    assert not auto.meta["captured"] and "not permitted" in auto.meta["capture_error"]
    _same_run(auto, eager)
    with pytest.raises(RuntimeError, match="could not capture"):
        gd.run(lg, params, 60, eta, progress=False, capture=True)


def test_params_on_two_devices_rejected():
    lg, (W, V) = _paper_b_closure()
    with pytest.raises(ValueError, match="params\\[1\\] is on meta but params\\[0\\] is on cpu"):
        gd.run(lg, [W, V.to("meta")], 3, 0.05, progress=False)


# ---------------------------------------------------------------------------------------- compiled step (CPU)
def _paper_a_tracker_problem(L=2, members=3):
    """The rate chapter's setting (:ref:`ch-rate`) in small: paper A's sigmoid net, target 1.5, members with κη_t and with η_t."""
    g = cpu_gen(3)
    X = deepnet.ball_data(8, 2, generator=g, device="cpu", dtype=F64)
    y = torch.full((8,), 1.5, dtype=F64)
    w = deepnet.init_params([2] + [3] * (L - 1) + [1], members, 0.3, generator=g, device="cpu", dtype=F64)
    params = [torch.cat([a, a]) for a in w]
    kappa = torch.cat([torch.full((members,), 1e3, dtype=F64), torch.ones(members, dtype=F64)])
    return descent.make_loss_and_grad(params, X, y, "sigmoid"), params, lambda: descent.Tracker(L, 3, kappa=kappa)


def test_compiled_loop_logic_on_cpu(monkeypatch):
    """The compiled step's loop (a step per call, records between calls, the last step eager, the iteration on the
    device) with an eager stand-in for the compiler: identical to the eager loop, divergence included; and with a
    stop rule and snapshots (the batch shrinks: a new step is compiled)."""
    monkeypatch.setattr(gd, "_COMPILE", lambda fn: fn)
    lg, params, eta, obs = _divergent_problem()
    record = gd.log_spaced(120, 10)
    eager = gd.run(lg, params, 120, eta, record_at=record, observers=obs, progress=False)
    comp = gd.run(lg, params, 120, eta, record_at=record, observers=obs, progress=False, compile=True)
    assert comp.meta["compiled"] and not eager.meta["compiled"] and comp.meta["compile_s"] >= 0
    assert set(eager.diverged_at[[3, 17]].tolist()) != {-1}
    _same_run(comp, eager)
    f, params, a = _relunet_problem(per_member=True)
    eta = torch.full((10,), 0.2, dtype=F64)
    eta[7] = 1e9
    kw = dict(record_at=gd.log_spaced(500, 12), snapshot_at=[250], stop=_loss_below(0.02), check_every=100,
              observers={"gn": gd.grad_norm_sq}, progress=False)  # fmt: skip
    eager = gd.run(f, params, 500, eta, **kw)
    comp = gd.run(f, params, 500, eta, compile=True, **kw)
    assert comp.meta["compiled"] and (eager.stopped_at >= 0).any()
    assert torch.equal(eager.stopped_at, comp.stopped_at)
    _same_run(comp, eager)
    assert all(torch.equal(p, q) for p, q in zip(eager.snapshots[250], comp.snapshots[250]))


def test_compiled_tracker_loop_logic_on_cpu(monkeypatch):
    """The Tracker (a rule with running state, carried as columns through the loop) inside the compiled loop,
    stand-in compiler (``torch.while_loop`` traced by dynamo, run eagerly): the same records and descent counts as
    the eager loop, and the same running quantities. Not bit for bit: inside a traced graph paper A's matmuls are
    broadcast products summed (``deepnet._bmm``), equal to ``torch.matmul`` up to rounding."""
    monkeypatch.setattr(gd, "_COMPILE", lambda fn: fn)
    lg, params, tracker = _paper_a_tracker_problem()
    runs = {}
    for c in (False, True):
        tr = tracker()
        runs[c] = (gd.run(lg, params, 150, tr, record_at=gd.log_spaced(150, 20), observers=tr.observers(),
                          progress=False, compile=c), tr)  # fmt: skip
    (a, ta), (b, tb) = runs[False], runs[True]
    assert b.meta["compiled"] and torch.equal(a.diverged_at, b.diverged_at) and torch.equal(a.iterations, b.iterations)
    for p, q in zip(b.params, a.params):
        assert rel(p, q) < 1e-12
    assert set(a.history) == set(b.history)
    for key in a.history:
        x, y = b.history[key], a.history[key]
        assert torch.equal(torch.isnan(x), torch.isnan(y)), key
        if key in ("violations", "ambiguous"):
            assert torch.equal(x, y), key
        elif key != "worst_excess":  # a difference of nearly equal losses: compared on the loss's scale below
            assert rel(torch.nan_to_num(x), torch.nan_to_num(y)) < 1e-12, key
    scale = float(a.history["loss"][0].abs().max())
    assert float((ta.state["worst_excess"] - tb.state["worst_excess"]).abs().max()) < 1e-14 * scale
    for k in ("min_g2", "sum_eta", "sum_eta_g2", "sum_eta_root_g"):
        assert rel(ta.state[k], tb.state[k]) < 1e-12, k
    for k in ("violations", "ambiguous"):
        assert torch.equal(ta.state[k], tb.state[k]), k


@pytest.mark.slow
def test_compiled_step_with_torch_compile_on_cpu():
    """A real ``torch.compile`` (inductor, C++ on the CPU) of the rate chapter's step (:ref:`ch-rate`) with the Tracker: the same
    trajectory to float64 rounding, the same descent counts. Compiling takes tens of seconds on two cores."""
    lg, params, tracker = _paper_a_tracker_problem()
    runs = {}
    for c in (False, True):
        tr = tracker()
        runs[c] = (gd.run(lg, params, 200, tr, record_at=gd.log_spaced(200, 20), observers=tr.observers(),
                          progress=False, compile=c), tr)  # fmt: skip
    (a, ta), (b, tb) = runs[False], runs[True]
    if not b.meta["compiled"]:
        pytest.skip(f"torch.compile is not available here: {b.meta['compile_error']}")
    assert torch.equal(a.diverged_at, b.diverged_at)
    for p, q in zip(b.params, a.params):
        assert rel(p, q) < 1e-12
    for key in ("loss", "eta", "grad_norm_sq", "param_norm", "min_g2", "sum_eta", "sum_eta_g2"):
        x, y = b.history[key], a.history[key]
        assert torch.equal(torch.isnan(x), torch.isnan(y)), key  # the step after the last one is NaN on both
        assert rel(torch.nan_to_num(x), torch.nan_to_num(y)) < 1e-12, key
    for key in ("violations", "ambiguous"):
        assert torch.equal(ta.state[key], tb.state[key]), key


def test_failed_compile_falls_back_to_the_eager_loop_with_a_warning(monkeypatch):
    """Without a working compiler (here: one that raises) the run warns and continues eagerly from the same state;
    ``meta`` says why."""

    def missing(fn):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(gd, "_COMPILE", missing)
    lg, params, eta, obs = _divergent_problem()
    eager = gd.run(lg, params, 60, eta, observers=obs, progress=False)
    with pytest.warns(RuntimeWarning, match="continuing with the eager loop"):
        comp = gd.run(lg, params, 60, eta, observers=obs, progress=False, compile=True)
    assert not comp.meta["compiled"] and "C++ compiler" in comp.meta["compile_error"]
    _same_run(comp, eager)


def test_compile_needs_a_compilable_rule():
    lg, params = _paper_b_closure()
    with pytest.raises(ValueError, match="compilable"):
        gd.run(lg, params, 3, lambda p, loss, g, t: torch.full_like(loss, 0.01 * (t + 1)), progress=False, compile=True)
    assert gd.constant(0.1).compilable and descent.Tracker.compilable
    assert gd.run(lg, params, 3, 0.05, progress=False).meta["compiled"] is False


def test_compile_from_the_environment(monkeypatch):
    """``compile=None`` follows ``COMPANION_COMPILE``, for runs of at least ``COMPILE_MIN_STEPS`` steps with a marked
    rule; ``compile=False`` overrides it."""
    monkeypatch.setattr(gd, "_COMPILE", lambda fn: fn)
    monkeypatch.setattr(gd, "COMPILE_MIN_STEPS", 10)
    lg, params = _paper_b_closure()
    monkeypatch.delenv("COMPANION_COMPILE", raising=False)
    assert not gd.run(lg, params, 12, 0.05, progress=False).meta["compiled"]
    monkeypatch.setenv("COMPANION_COMPILE", "1")
    assert gd.run(lg, params, 12, 0.05, progress=False).meta["compiled"]
    assert not gd.run(lg, params, 9, 0.05, progress=False).meta["compiled"]  # too short to pay
    assert not gd.run(lg, params, 12, 0.05, progress=False, compile=False).meta["compiled"]
    assert not gd.run(lg, params, 12, lambda p, loss, g, t: torch.full_like(loss, 0.05), progress=False).meta["compiled"]


# ---------------------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
def test_engine_cuda_matches_cpu_with_divergence():
    """Paper B's GD on both devices: same divergence flags and iterations, same trajectories."""
    X, Y, W, V = paper_b_problem(E=32, sigma=1.0)
    eta = torch.full((32,), 0.1, dtype=F64)
    eta[[3, 17]] = 1e6  # these two must blow up, on both devices
    record = gd.log_spaced(300, 20)
    obs = relunet.make_observers(relunet.unit_target(20, device="cpu", dtype=F64))
    cpu = gd.run(relunet.make_loss_and_grad(X, Y), [W, V], 300, eta, record_at=record, observers=obs, progress=False)
    obs_cuda = relunet.make_observers(relunet.unit_target(20, device=CUDA, dtype=F64))
    for capture in (False, True):
        gpu = gd.run(
            relunet.make_loss_and_grad(X.to(CUDA), Y.to(CUDA)),
            [W.to(CUDA), V.to(CUDA)],
            300,
            eta.to(CUDA),
            record_at=record,
            observers=obs_cuda,
            progress=False,
            capture=capture,
        )
        assert gpu.meta["captured"] is capture
        assert gpu.params[0].device.type == CUDA.type and gpu.diverged_at.device.type == CUDA.type
        assert torch.equal(gpu.diverged_at.cpu(), cpu.diverged_at)
        assert set(cpu.diverged_at[[3, 17]].tolist()) != {-1}
        for a, b in zip(gpu.params, cpu.params):
            close(a, b, rtol=1e-9)
        for key in cpu.history:
            close(gpu.history[key], cpu.history[key], rtol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", ["paper_b", "paper_b_fixed_v", "paper_a"])
def test_captured_run_equals_eager_run(problem):
    """The CUDA graph replays the eager loop's kernels: the same parameters, history and divergence flags
    (bitwise up to cuBLAS's choice of algorithm inside a capture, hence a float64-rounding tolerance)."""
    if problem == "paper_a":
        g = cpu_gen()
        X = deepnet.ball_data(40, 6, generator=g, device=CUDA, dtype=F64)
        y = 0.5 * torch.tanh(X[:, 0])
        params = deepnet.init_params([6, 8, 8, 1], 16, generator=g, device=CUDA, dtype=F64)
        lg = deepnet.make_loss_and_grad(X, y, "tanh")
        eta = device.log_uniform((16,), 1e-2, 1e3, generator=g, device=CUDA, dtype=F64)  # some diverge
        obs = {"gn": gd.grad_norm_sq, "pn": gd.param_norm}
    else:
        X, Y, W, V = (t.to(CUDA) for t in paper_b_problem(E=64, sigma=1.0))
        eta = torch.full((64,), 0.1, dtype=F64, device=CUDA)
        eta[5] = 1e7
        if problem == "paper_b":
            lg, params = relunet.make_loss_and_grad(X, Y), [W, V]
        else:
            lg, params = relunet.make_loss_and_grad(X, Y, fixed_v=V), [W]
        obs = {"gn": gd.grad_norm_sq}
    record = gd.log_spaced(200, 15)
    eager = gd.run(lg, params, 200, eta, record_at=record, observers=obs, progress=False, capture=False)
    graph = gd.run(lg, params, 200, eta, record_at=record, observers=obs, progress=False, capture=True)
    assert graph.meta["captured"] and not eager.meta["captured"]
    assert torch.equal(graph.diverged_at, eager.diverged_at)
    for a, b in zip(graph.params, eager.params):
        close(a, b.cpu(), rtol=1e-12)
    assert set(graph.history) == set(eager.history)
    for key in eager.history:
        close(graph.history[key], eager.history[key].cpu(), rtol=1e-12)


@pytest.mark.gpu
def test_finite_rows_cuda():
    x = device.randn((4, 129), generator=cpu_gen(), device=CUDA, dtype=F64)
    for j in range(129):
        for bad in (math.nan, math.inf, -math.inf):
            y = x.clone()
            y[2, j] = bad
            assert torch.equal(gd.finite_rows(y), torch.isfinite(y).all(1))


@pytest.mark.gpu
@pytest.mark.parametrize("capture", [False, True], ids=["eager", "captured"])
def test_engine_loop_has_no_cuda_sync(capture):
    """CUDA's sync debug mode warns at every device synchronisation. After one warm-up run (cuBLAS handles,
    the allocator, the closure's one-off validation), a run of 40 steps synchronises exactly as often as one
    of 4: the per-run conversions (parameter validation, the record index) and none per step."""
    X, Y, W, V = paper_b_problem(E=16)
    lg = relunet.make_loss_and_grad(X.to(CUDA), Y.to(CUDA))
    params = [W.to(CUDA), V.to(CUDA)]
    eta = torch.full((16,), 0.1, dtype=F64, device=CUDA)
    gd.run(lg, params, 3, eta, progress=False, capture=capture)  # warm-up
    counts = []
    for steps in (4, 40):
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                gd.run(lg, params, steps, eta, record_at=[0, steps // 2, steps], progress=False, capture=capture)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message).lower() for w in caught))
    assert counts[0] == counts[1], counts
