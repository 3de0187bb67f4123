"""The batched gradient-descent engine (Chapter 1; every dynamics chapter runs on it).

One call trains ``E`` independent members at once: every parameter tensor carries a leading ensemble
axis, and one vectorised update moves all members. Each member has its own step size (a step-size
*rule* maps the current state to an ``(E,)`` tensor, so Lemma 4.7's adaptive ``η_t`` plugs in beside a
constant). A member whose loss, gradient or parameters become non-finite is marked diverged at that
iteration and frozen, while the others continue; nothing raises. The divergence bookkeeping stays on
the device (no host sync per step). History is recorded at chosen iterations into preallocated tensors.

The engine is model-agnostic: it takes ``loss_and_grad(params) -> (loss (E,), grads)`` where ``grads``
matches ``params`` (e.g. :func:`companion.deepnet.loss_and_gradient`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

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
    """A constant step size: a scalar for all members, or an ``(E,)`` tensor of per-member steps."""
    if isinstance(eta, Tensor):
        validation.tensor("eta", eta, ndim=1)
        if bool((eta <= 0).any()):
            raise ValueError("step sizes must be positive")
    elif not float(eta) > 0 or float(eta) == float("inf"):
        raise ValueError(f"step size must be a positive finite number, got {eta!r}")

    def rule(params: Params, loss: Tensor, grads: Sequence[Tensor], t: int) -> Tensor:
        if isinstance(eta, Tensor):
            if eta.shape[0] != loss.shape[0]:
                raise ValueError(f"eta has {eta.shape[0]} entries but the ensemble has {loss.shape[0]} members")
            return eta.to(loss)
        return torch.full_like(loss, float(eta))

    rule.description = f"constant({eta if not isinstance(eta, Tensor) else 'per-member'})"  # type: ignore[attr-defined]
    return rule


def grad_norm_sq(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖∇𝓛‖²`` per member, shape ``(E,)``."""
    return sum((g ** 2).flatten(1).sum(dim=1) for g in grads)


def param_norm(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖W‖_F`` (all parameter tensors together) per member, shape ``(E,)``."""
    return torch.sqrt(sum((p ** 2).flatten(1).sum(dim=1) for p in params))


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
    return torch.isfinite(x.mul(0).sum(dim=tuple(range(1, x.ndim))))      # no copy for a strided x


def _progress_enabled(progress: bool | None, work: int) -> bool:
    if progress is not None:
        return progress
    if os.environ.get("COMPANION_PROGRESS", "1") == "0":
        return False
    return work >= 200_000


def run(loss_and_grad: LossAndGrad, params: Sequence[Tensor], steps: int, step_size: StepRule | float | Tensor,
        *, record_at: Sequence[int] | Tensor | None = None, observers: Mapping[str, Observer] | None = None,
        progress: bool | None = None, desc: str = "GD") -> GDResult:
    """Full-batch gradient descent ``θ_{t+1} = θ_t − η_t ∇𝓛(θ_t)`` on an ensemble, for ``steps`` steps.

    ``params``: tensors with leading ensemble axis ``E`` (copied; the inputs are not modified).
    ``step_size``: a :data:`StepRule`, a float, or an ``(E,)`` tensor (constant per member).
    ``record_at``: iterations in ``[0, steps]`` at which to record (default: 0 and ``steps``); the state
    recorded at ``t`` is the one *before* step ``t`` (``t = steps`` is the final state).
    ``observers``: extra quantities to record; ``loss``, ``eta`` are always recorded.
    """
    validation.positive_int("steps", steps)
    if not isinstance(params, (list, tuple)) or not params:
        raise ValueError("params must be a non-empty list of tensors with a leading ensemble axis")
    params = [validation.tensor(f"params[{i}]", p, finite=True).detach().clone() for i, p in enumerate(params)]
    E = params[0].shape[0]
    if any(p.shape[0] != E for p in params):
        raise ValueError(f"every parameter tensor needs the same leading ensemble size; got {[p.shape[0] for p in params]}")
    rule = step_size if callable(step_size) else constant(step_size)
    if record_at is None:
        record_at = [0, steps]
    rec = torch.as_tensor(record_at, dtype=torch.long).flatten().unique(sorted=True)
    if rec.numel() == 0 or rec.min() < 0 or rec.max() > steps:
        raise ValueError(f"record_at must lie in [0, {steps}]")
    slot = {int(t): i for i, t in enumerate(rec.tolist())}
    observers = dict(observers or {})
    dev = params[0].device
    history: dict[str, Tensor] = {}
    alive = torch.ones(E, dtype=torch.bool, device=dev)
    diverged_at = torch.full((E,), -1, dtype=torch.long, device=dev)

    def record(i: int, loss: Tensor, grads: Sequence[Tensor], eta: Tensor) -> None:
        values = {"loss": loss, "eta": eta, **{k: f(params, loss, grads) for k, f in observers.items()}}
        for k, v in values.items():
            v = v.detach()
            if k not in history:
                history[k] = torch.full((rec.numel(), *v.shape), float("nan"), dtype=v.dtype if v.is_floating_point() else torch.float64, device=dev)
            mask = alive.view(E, *([1] * (v.ndim - 1)))
            history[k][i] = torch.where(mask, v.to(history[k].dtype), torch.nan)

    bar = tqdm(total=steps, desc=desc, disable=not _progress_enabled(progress, steps * E), leave=False)
    views = [(E,) + (1,) * (p.ndim - 1) for p in params]
    with torch.no_grad():
        for t in range(steps + 1):
            loss, grads = loss_and_grad(params)
            if loss.shape != (E,):
                raise ValueError(f"loss_and_grad must return a loss of shape ({E},), got {tuple(loss.shape)}")
            finite = torch.isfinite(loss)
            for g in grads:
                finite &= finite_rows(g)
            diverged_at.masked_fill_(alive & ~finite, t)        # on device: no host sync
            alive &= finite
            eta = rule(params, loss, grads, t) if t < steps else torch.full_like(loss, float("nan"))
            if t in slot:
                record(slot[t], loss, grads, eta)
            if t == steps:
                break
            # θ − η g in one fused pass per tensor; a step that produces non-finite parameters freezes the
            # member at its last finite iterate (flagged at this iteration)
            news = [torch.addcmul(p, eta.view(shape), g, value=-1) for p, g, shape in zip(params, grads, views)]
            ok = torch.isfinite(eta)
            for new in news:
                ok &= finite_rows(new)
            diverged_at.masked_fill_(alive & ~ok, t)
            alive &= ok
            for p, new, shape in zip(params, news, views):
                if new.dtype == p.dtype:
                    torch.where(alive.view(shape), new, p, out=p)           # in place, one pass
                else:                                                       # η of a wider dtype than θ
                    p.copy_(torch.where(alive.view(shape), new, p))
            bar.update(1)
    bar.close()
    return GDResult(params=params, iterations=rec.to(dev), history=history, diverged=diverged_at >= 0,
                    diverged_at=diverged_at, meta={"steps": steps, "rule": getattr(rule, "description", repr(rule))})


def log_spaced(steps: int, num: int = 60) -> Tensor:
    """About ``num`` iterations in ``[0, steps]``, log-spaced, always including 0 and ``steps``."""
    validation.positive_int("steps", steps)
    pts = torch.logspace(0, torch.log10(torch.tensor(float(steps))), num).round().long()
    return torch.cat([torch.tensor([0]), pts, torch.tensor([steps])]).unique()
