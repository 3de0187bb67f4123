"""The fused formulation of paper B's loss and gradient, :mod:`companion.fused`: its out-of-place hot path against
:mod:`companion.relunet`'s, as a closure in the engine, its input checks, and compiled inside ``gd.run``'s CUDA graph
(``gpu``-marked, skipped without a device)."""

import pytest
import torch

from companion import fused, gd, relunet

F64 = torch.float64


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _fused_problem(E=24, k=3, d=12, n=200, sigma=1.0, dev="cpu"):
    g = torch.Generator().manual_seed(11)
    a = relunet.unit_target(d, device=dev, dtype=F64)
    X, y = relunet.gaussian_data(n, d, a, generator=g, device=dev, dtype=F64)
    W, v = relunet.xavier_init(k, d, E, sigma, generator=g, device=dev, dtype=F64)
    return X, y, W, v


def test_fused_formulation_matches_relunet():
    X, y, W, v = _fused_problem()
    ref = relunet.loss_and_gradient_wv(W, v, X, y)
    got = fused.paper_b_loss_and_grad(W, v, X, y)
    for a, b in zip(got, ref):
        assert a.shape == b.shape and rel(a, b) < 1e-13


def test_fused_closure_in_the_engine_matches_relunet():
    X, y, W, v = _fused_problem()
    eta = torch.full((24,), 0.1, dtype=F64)
    eta[4] = 1e8  # one member diverges
    record = gd.log_spaced(150, 12)
    a = gd.run(relunet.make_loss_and_grad(X, y), [W, v], 150, eta, record_at=record, progress=False)
    b = gd.run(fused.make_loss_and_grad(X, y, mode=None), [W, v], 150, eta, record_at=record, progress=False)
    assert torch.equal(a.diverged_at, b.diverged_at) and int(a.diverged.sum()) >= 1
    for p, q in zip(b.params, a.params):
        assert rel(p, q) < 1e-10
    ok = ~torch.isnan(a.history["loss"])
    assert torch.equal(ok, ~torch.isnan(b.history["loss"]))
    assert rel(b.history["loss"][ok], a.history["loss"][ok]) < 1e-10


def test_fused_closure_rejects_bad_inputs():
    X, y, W, v = _fused_problem()
    with pytest.raises(ValueError, match="y has"):
        fused.make_loss_and_grad(X, y[:-1], mode=None)
    f = fused.make_loss_and_grad(X, y, mode=None)
    with pytest.raises(ValueError, match="one output"):
        f([W, v.unsqueeze(-1)])
    with pytest.raises(ValueError, match="features"):
        f([W[..., :-1], v])
    with pytest.raises(ValueError, match="on meta"):
        f([W, v.to("meta")])


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs"])
def test_compiled_closure_captured_on_cuda(mode):
    """inductor's kernels inside gd.run's CUDA graph: the same trajectory as the eager relunet loop."""
    X, y, W, v = _fused_problem(E=256, k=2, d=50, n=500, dev="cuda")
    record = gd.log_spaced(200, 10)
    ref = gd.run(relunet.make_loss_and_grad(X, y), [W, v], 200, 0.1, record_at=record, progress=False, capture=False)
    got = gd.run(fused.make_loss_and_grad(X, y, mode=mode), [W, v], 200, 0.1, record_at=record, progress=False, capture=True)
    assert got.meta["captured"]
    assert torch.equal(got.diverged_at, ref.diverged_at)
    for p, q in zip(got.params, ref.params):
        assert rel(p, q) < 1e-9
    assert rel(got.history["loss"], ref.history["loss"]) < 1e-9
