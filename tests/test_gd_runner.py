"""gd.run as the one runner: a stop rule takes decided members out of the batch (their state and records kept), snapshots
at chosen iterations, per-member data restricted with the batch, and the captured loop (an eager stand-in for the CUDA
graph) equal to the eager one with all of these."""

import pytest
import torch

from companion import gd, population, relunet

F64 = torch.float64


def _problem(E=10, per_member=False):
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
    f, params, a = _problem(per_member=per_member)
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
    f, params, a = _problem()
    with pytest.raises(ValueError, match="restrict"):
        gd.run(lambda p: f(p), params, 20, 0.1, stop=_loss_below(0.0), progress=False)
    plain = gd.run(gd.shared_data(lambda p: f(p)), params, 20, 0.1, stop=_loss_below(-1.0), check_every=5,
                   progress=False)  # fmt: skip
    assert (plain.stopped_at == -1).all()


def test_snapshots_are_the_states_before_their_step():
    f, params, a = _problem()
    short = gd.run(f, params, 30, 0.1, progress=False)
    long = gd.run(f, params, 80, 0.1, snapshot_at=[0, 30, 80], progress=False)
    for p, q in zip(long.snapshots[30], short.params):
        assert torch.equal(p, q)
    assert all(torch.equal(p, q) for p, q in zip(long.snapshots[0], params))
    assert all(torch.equal(p, q) for p, q in zip(long.snapshots[80], long.params))
    with pytest.raises(ValueError, match="snapshot_at"):
        gd.run(f, params, 10, 0.1, snapshot_at=[11], progress=False)


def test_everyone_stopping_ends_the_run_with_full_records():
    f, params, a = _problem()
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
    f, params, a = _problem()
    eta = torch.full((10,), 0.1, dtype=F64)
    eta[3] = 1e9
    res = gd.run(f, params, 300, eta, record_at=[0, 300], stop=_loss_below(0.05), check_every=50, progress=False)
    assert res.diverged[3] and res.stopped_at[3] == -1 and res.diverged_at[3] >= 0
    assert torch.isnan(res.history["loss"][-1, 3])
    assert all(torch.isfinite(p).all() for p in res.params)


def test_captured_loop_with_stops_and_snapshots_equals_the_eager_loop(monkeypatch):
    monkeypatch.setattr(gd, "_CAPTURE", lambda body, dev: body)
    monkeypatch.setattr(gd, "_capture_wanted", lambda capture, dev, rule: capture is not False)
    f, params, a = _problem(per_member=True)
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
