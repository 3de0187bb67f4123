"""The batched gradient-descent engine (Chapter 1; every dynamics chapter runs on it).

One call trains ``E`` independent members at once: every parameter tensor carries a leading ensemble
axis, and one vectorised update moves all members. Each member has its own step size (a step-size
*rule* maps the current state to an ``(E,)`` tensor, so Lemma 4.7's adaptive ``η_t`` plugs in beside a
constant). A member whose loss, gradient or parameters become non-finite is marked diverged at that
iteration and frozen, while the others continue; nothing raises. The divergence bookkeeping stays on
the device (no host sync per step). History is recorded at chosen iterations into preallocated tensors.

On CUDA the step (loss-and-gradient, divergence bookkeeping, step-size rule, update) can be captured once
in a CUDA graph and replayed, which removes the per-kernel launch cost that dominates small ensembles;
history is recorded outside the graph. See the ``capture`` argument of :func:`run`.

The engine is model-agnostic: it takes ``loss_and_grad(params) -> (loss (E,), grads)`` where ``grads``
matches ``params`` (e.g. :func:`companion.deepnet.loss_and_gradient`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from tqdm.auto import tqdm

from . import validation

Params = list[Tensor]
LossAndGrad = Callable[[Params], tuple[Tensor, Sequence[Tensor]]]
# A step-size rule: (params, loss (E,), grads, t) -> step sizes (E,)
StepRule = Callable[[Params, Tensor, Sequence[Tensor], int], Tensor]
# An observer: (params, loss (E,), grads) -> tensor with leading axis E, recorded at chosen iterations
Observer = Callable[[Params, Tensor, Sequence[Tensor]], Tensor]


def constant(eta: float | Tensor) -> StepRule:
    """A constant step size: a scalar for all members, or an ``(E,)`` tensor of per-member steps.

    The rule is marked ``capturable`` (it ignores ``t`` and makes no host conversion), so :func:`run` may
    capture it in a CUDA graph. A per-member tensor is converted to the loss's device and dtype once.
    """
    if isinstance(eta, Tensor):
        validation.tensor("eta", eta, ndim=1)
        if bool((eta <= 0).any()):
            raise ValueError("step sizes must be positive")
    elif not float(eta) > 0 or float(eta) == float("inf"):
        raise ValueError(f"step size must be a positive finite number, got {eta!r}")

    value = None if isinstance(eta, Tensor) else float(eta)
    converted: dict = {}  # eta on the loss's device and dtype, converted once (no copy per step)

    def rule(params: Params, loss: Tensor, grads: Sequence[Tensor], t: int) -> Tensor:
        if value is not None:
            return torch.full_like(loss, value)
        if eta.shape[0] != loss.shape[0]:
            raise ValueError(f"eta has {eta.shape[0]} entries but the ensemble has {loss.shape[0]} members")
        key = (loss.device, loss.dtype)
        if key not in converted:
            converted[key] = eta.to(loss)
        return converted[key]

    rule.description = f"constant({eta if not isinstance(eta, Tensor) else 'per-member'})"  # type: ignore[attr-defined]
    rule.capturable = True  # type: ignore[attr-defined]  # independent of t, no host sync: CUDA-graph safe
    return rule


def grad_norm_sq(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖∇𝓛‖²`` per member, shape ``(E,)``."""
    return sum((g**2).flatten(1).sum(dim=1) for g in grads)


def param_norm(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖W‖_F`` (all parameter tensors together) per member, shape ``(E,)``."""
    return torch.sqrt(sum((p**2).flatten(1).sum(dim=1) for p in params))


@dataclass
class GDResult:
    """What :func:`run` returns.

    ``params``: final parameters (diverged members frozen at their last finite iterate);
    ``iterations``: the recorded iterations, ``(R,)``; ``history[name]``: ``(R, E, …)`` per observer
    (``'loss'`` and ``'eta'`` always present; entries after a member diverged are NaN);
    ``diverged``: ``(E,)`` bool; ``diverged_at``: ``(E,)`` iteration at which it was flagged, −1 if never.
    """

    params: Params
    iterations: Tensor
    history: dict[str, Tensor]
    diverged: Tensor
    diverged_at: Tensor
    meta: dict = field(default_factory=dict)


def finite_rows(x: Tensor) -> Tensor:
    """``(E,)`` bool: whether every entry of member ``e`` (row ``x[e]``) is finite (the engine's divergence test).

    One multiply and one row sum: ``0·x`` is ``±0`` for finite ``x`` and NaN for ``±inf``/NaN, so the row sum
    is 0 exactly when the row is finite (it cannot overflow). A few times cheaper than
    ``isfinite(x).all(1)``, which makes four passes. Chapter 1 (the engine).
    """
    if x.ndim == 1:
        return torch.isfinite(x)
    if x[0].numel() == 0:
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    return torch.isfinite(x.mul(0).sum(dim=tuple(range(1, x.ndim))))  # no copy for a strided x


def _finite_all(tensors: Sequence[Tensor]) -> Tensor:
    """``(E,)`` bool: whether every entry of member ``e`` of every tensor is finite: :func:`finite_rows` with one
    finiteness test for all tensors (the ``0·x`` row sums are 0 or NaN, so their sum is too)."""
    sums = [x.mul(0).sum(dim=tuple(range(1, x.ndim))) if x.ndim > 1 else x.mul(0) for x in tensors]
    total = sums[0]
    for extra in sums[1:]:
        total = total + extra
    return torch.isfinite(total)


def _progress_enabled(progress: bool | None, work: int) -> bool:
    if progress is not None:
        return progress
    if os.environ.get("COMPANION_PROGRESS", "1") == "0":
        return False
    return work >= 200_000


def _capture_wanted(capture: bool | None, dev: torch.device, rule: StepRule) -> bool:
    if capture is None:
        return dev.type == "cuda" and bool(getattr(rule, "capturable", False))
    if not capture:
        return False
    if dev.type != "cuda":
        raise ValueError(f"capture=True needs CUDA tensors; the parameters are on {dev}")
    if not getattr(rule, "capturable", False):
        raise ValueError(
            "capture=True replays the step-size rule with t frozen at its capture value: mark a rule "
            "that ignores t and makes no host conversion with rule.capturable = True "
            "(gd.constant is marked)"
        )
    return True


def run(
    loss_and_grad: LossAndGrad,
    params: Sequence[Tensor],
    steps: int,
    step_size: StepRule | float | Tensor,
    *,
    record_at: Sequence[int] | Tensor | None = None,
    observers: Mapping[str, Observer] | None = None,
    progress: bool | None = None,
    desc: str = "GD",
    capture: bool | None = None,
) -> GDResult:
    """Full-batch gradient descent ``θ_{t+1} = θ_t − η_t ∇𝓛(θ_t)`` on an ensemble, for ``steps`` steps (Chapter 1).

    ``params``: tensors with leading ensemble axis ``E`` (copied; the inputs are not modified).
    ``step_size``: a :data:`StepRule`, a float, or an ``(E,)`` tensor (constant per member).
    ``record_at``: iterations in ``[0, steps]`` at which to record (default: 0 and ``steps``); the state
    recorded at ``t`` is the one *before* step ``t`` (``t = steps`` is the final state).
    ``observers``: extra quantities to record; ``loss``, ``eta`` are always recorded.
    ``capture``: on CUDA, capture one step (the update, then loss-and-gradient, divergence bookkeeping and
    the rule at the new point) in a CUDA graph and replay it ``steps`` times; recording and observers run
    outside the graph. ``None`` (default) captures when the parameters are on CUDA and the rule is marked
    ``capturable`` (:func:`constant` is), ``False`` never, ``True`` always (an error on the CPU or with an
    unmarked rule). The closure must then make no host conversion after its first call (the one-off checks
    of :func:`companion.relunet.make_loss_and_grad` and :func:`companion.deepnet.make_loss_and_grad` run in
    a warm-up before the capture); if the capture fails, ``None`` continues with the eager loop from the
    same state (``meta['capture_error']`` says why) and ``True`` raises ``RuntimeError``. The graph replays the
    eager loop's kernels: the results equal the eager loop's (``tests/test_gpu.py``). ``meta['captured']``
    says which path ran.
    """
    validation.positive_int("steps", steps)
    if not isinstance(params, (list, tuple)) or not params:
        raise ValueError("params must be a non-empty list of tensors with a leading ensemble axis")
    for i, p in enumerate(params[1:], 1):
        if isinstance(p, Tensor) and isinstance(params[0], Tensor) and p.device != params[0].device:
            raise ValueError(f"params[{i}] is on {p.device} but params[0] is on {params[0].device}")
    params = [validation.tensor(f"params[{i}]", p, finite=True).detach().clone() for i, p in enumerate(params)]
    E = params[0].shape[0]
    if any(p.shape[0] != E for p in params):
        raise ValueError(f"every parameter tensor needs the same leading ensemble size; got {[p.shape[0] for p in params]}")
    dev = params[0].device
    if isinstance(step_size, Tensor):
        validation.tensor("step_size", step_size, ndim=1)
        step_size = step_size.to(dev)  # one copy, not one per step
    rule = step_size if callable(step_size) else constant(step_size)
    if record_at is None:
        record_at = [0, steps]
    rec = torch.as_tensor(record_at, dtype=torch.long).cpu().flatten().unique(sorted=True)
    if rec.numel() == 0 or rec.min() < 0 or rec.max() > steps:
        raise ValueError(f"record_at must lie in [0, {steps}]")
    slot = {int(t): i for i, t in enumerate(rec.tolist())}
    observers = dict(observers or {})
    captured = _capture_wanted(capture, dev, rule)
    history: dict[str, Tensor] = {}
    alive = torch.ones(E, dtype=torch.bool, device=dev)
    diverged_at = torch.full((E,), -1, dtype=torch.long, device=dev)
    views = [(E,) + (1,) * (p.ndim - 1) for p in params]

    def record(i: int, loss: Tensor, grads: Sequence[Tensor], eta: Tensor) -> None:
        values = {"loss": loss, "eta": eta, **{k: f(params, loss, grads) for k, f in observers.items()}}
        for k, v in values.items():
            v = v.detach()
            if k not in history:
                history[k] = torch.full(
                    (rec.numel(), *v.shape), float("nan"), dtype=v.dtype if v.is_floating_point() else torch.float64, device=dev
                )
            mask = alive.view(E, *([1] * (v.ndim - 1)))
            history[k][i] = torch.where(mask, v.to(history[k].dtype), torch.nan)

    def evaluate(t: int | Tensor, last: bool) -> tuple[Tensor, Sequence[Tensor], Tensor]:
        """Loss and gradient at the current point, members with a non-finite loss or gradient flagged at ``t``."""
        loss, grads = loss_and_grad(params)
        if loss.shape != (E,):
            raise ValueError(f"loss_and_grad must return a loss of shape ({E},), got {tuple(loss.shape)}")
        finite = torch.isfinite(loss)
        if last or not isinstance(t, int) or t in slot:
            # a non-finite gradient elsewhere makes θ − η g non-finite, which update() flags at the same t and
            # freezes at the same iterate; only a recorded state needs it flagged before the record
            finite &= _finite_all(grads)
        flag(alive.gt(finite), t)  # alive & ~finite in one kernel
        alive.logical_and_(finite)
        eta = torch.full_like(loss, float("nan")) if last else rule(params, loss, grads, t if isinstance(t, int) else 0)
        return loss, grads, eta

    def flag(mask: Tensor, t: int | Tensor) -> None:
        if isinstance(t, int):
            diverged_at.masked_fill_(mask, t)  # on device: no host sync
        else:  # t on the device (inside a graph)
            torch.where(mask, t, diverged_at, out=diverged_at)

    def update(grads: Sequence[Tensor], eta: Tensor, t: int | Tensor) -> None:
        # θ − η g in one fused pass per tensor; a step that produces non-finite parameters freezes the
        # member at its last finite iterate (flagged at this iteration)
        news = [torch.addcmul(p, eta.view(shape), g, value=-1) for p, g, shape in zip(params, grads, views)]
        ok = torch.isfinite(eta)
        ok &= _finite_all(news)
        flag(alive.gt(ok), t)  # alive & ~ok in one kernel
        alive.logical_and_(ok)
        for p, new, shape in zip(params, news, views):
            if new.dtype == p.dtype:
                torch.where(alive.view(shape), new, p, out=p)  # in place, one pass
            else:  # η of a wider dtype than θ
                p.copy_(torch.where(alive.view(shape), new, p))

    bar = tqdm(total=steps, desc=desc, disable=not _progress_enabled(progress, steps * E), leave=False)
    meta = {"steps": steps, "rule": getattr(rule, "description", repr(rule)), "captured": captured}
    with torch.no_grad():
        first = None
        if captured:
            try:
                first = _run_captured(evaluate, update, steps, slot, record, bar, dev)
            except _CaptureFailed as exc:
                if capture:  # asked for explicitly: say why it cannot be done
                    raise RuntimeError(f"gd.run could not capture the step in a CUDA graph: {exc.__cause__!r}") from exc
                first, meta["captured"] = exc.first, False  # automatic: continue eagerly from iteration 0
                meta["capture_error"] = repr(exc.__cause__)
        if not meta["captured"]:
            for t in range(steps + 1):
                loss, grads, eta = first if (t == 0 and first is not None) else evaluate(t, t == steps)
                if t in slot:
                    record(slot[t], loss, grads, eta)
                if t == steps:
                    break
                update(grads, eta, t)
                bar.update(1)
    bar.close()
    return GDResult(
        params=params, iterations=rec.to(dev), history=history, diverged=diverged_at >= 0, diverged_at=diverged_at, meta=meta
    )


class _CaptureFailed(Exception):
    """The capture raised (e.g. the closure converts a tensor to a Python number); ``first`` is the evaluation
    at iteration 0, already made eagerly, from which the eager loop continues."""

    def __init__(self, first):
        super().__init__("capture failed")
        self.first = first


def _run_captured(evaluate, update, steps: int, slot: dict, record, bar, dev: torch.device) -> None:
    """The loop of :func:`run` with one step captured in a CUDA graph.

    Iteration 0 is evaluated eagerly into static buffers; the graph then holds ``update(t)``, ``t ← t + 1``
    and ``evaluate(t)`` (``t`` a device counter), writing the new loss, gradients and step sizes into the same
    buffers. Each replay is one launch; between replays the buffers hold the state at ``t`` for recording.
    At ``t = steps`` the recorded step size is NaN, as in the eager loop. Raises :class:`_CaptureFailed` when the
    capture fails (nothing has been replayed then).
    """
    loss, grads, eta = _warm_up(lambda: evaluate(0, False), dev)
    buf_loss, buf_grads, buf_eta = loss.clone(), [g.clone() for g in grads], eta.clone()
    t_dev = torch.zeros((), dtype=torch.long, device=dev)

    def body() -> None:
        update(buf_grads, buf_eta, t_dev)
        t_dev.add_(1)
        loss, grads, eta = evaluate(t_dev, False)
        buf_loss.copy_(loss)
        for b, g in zip(buf_grads, grads):
            b.copy_(g)
        buf_eta.copy_(eta)

    try:
        replay = _CAPTURE(body, dev)
    except Exception as exc:  # nothing ran: a capture only records kernels; the state is still iteration 0
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        raise _CaptureFailed((buf_loss, buf_grads, buf_eta)) from exc
    for t in range(steps + 1):
        if t in slot:
            record(slot[t], buf_loss, buf_grads, torch.full_like(buf_eta, float("nan")) if t == steps else buf_eta)
        if t == steps:
            break
        replay()
        bar.update(1)


def _warm_up(fn, dev: torch.device):
    """``fn()`` on a side stream on CUDA (lazy initialisations and one-off checks before a capture), else directly."""
    if dev.type != "cuda":
        return fn()
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        out = fn()
    torch.cuda.current_stream(dev).wait_stream(stream)
    return out


def _cuda_graph(body: Callable[[], None], dev: torch.device) -> Callable[[], None]:
    """Capture ``body`` in a CUDA graph (its kernels are recorded, not run); returns the graph's ``replay``."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return graph.replay


_CAPTURE = _cuda_graph  # tests substitute an eager stand-in (``lambda body, dev: body``) to check the loop on the CPU


def log_spaced(steps: int, num: int = 60) -> Tensor:
    """About ``num`` iterations in ``[0, steps]``, log-spaced, always including 0 and ``steps``."""
    validation.positive_int("steps", steps)
    pts = torch.logspace(0, torch.log10(torch.tensor(float(steps))), num).round().long()
    return torch.cat([torch.tensor([0]), pts, torch.tensor([steps])]).unique()
