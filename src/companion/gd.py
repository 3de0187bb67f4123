"""The batched gradient-descent engine (:ref:`ch-setup`; every dynamics chapter runs on it).

One call trains ``E`` independent members at once: every parameter tensor carries a leading ensemble
axis, and one vectorised update moves all members. Each member has its own step size (a step-size
*rule* maps the current state to an ``(E,)`` tensor, so Lemma 4.7's adaptive ``η_t`` plugs in beside a
constant). A member whose loss, gradient or parameters become non-finite is marked diverged at that
iteration and frozen, while the others continue; nothing raises. The divergence bookkeeping stays on
the device (no host sync per step). History is recorded at chosen iterations into preallocated tensors.

On CUDA the step (loss-and-gradient, divergence bookkeeping, step-size rule, update) can be captured once
in a CUDA graph and replayed, which removes the per-kernel launch cost that dominates small ensembles;
history is recorded outside the graph. See the ``capture`` argument of :func:`run`.

For small networks trained for many steps (a step is a few dozen tiny kernels, and the cost is per-operation
overhead, not FLOPs) the steps between two records can instead run as one compiled ``torch.while_loop``
(inductor with its C++ wrapper on the CPU, compiled once per run and batch shape): see the ``compile`` argument of
:func:`run` (``COMPANION_COMPILE=1`` turns it on for every long run). Without a working compiler it falls back to
the eager loop with a warning.

The engine is model-agnostic: it takes ``loss_and_grad(params) -> (loss (E,), grads)`` where ``grads``
matches ``params`` (e.g. :func:`companion.deepnet.loss_and_gradient`).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor
from tqdm.auto import tqdm

from . import validation
from .model import LossAndGrad, Params  # the model protocol's types (companion.model)

__all__ = [
    "StepRule",
    "Observer",
    "run",
    "GDResult",
    "constant",
    "shared_data",
    "grad_norm_sq",
    "param_norm",
    "finite_rows",
    "log_spaced",
]

# A step-size rule: (params, loss (E,), grads, t) -> step sizes (E,)
StepRule = Callable[[Params, Tensor, Sequence[Tensor], int], Tensor]
# An observer: (params, loss (E,), grads) -> tensor with leading axis E, recorded at chosen iterations
Observer = Callable[[Params, Tensor, Sequence[Tensor]], Tensor]


def constant(eta: float | Tensor) -> StepRule:
    """A constant step size: a scalar for all members, or an ``(E,)`` tensor of per-member steps.

    A rule with per-member state carries ``restrict(members)``, the rule of a subset of the members, which
    :func:`run` calls when its stop rule takes members out of the batch (this one does).

    The rule is marked ``capturable`` (it ignores ``t`` and makes no host conversion), so :func:`run` may
    capture it in a CUDA graph. A per-member tensor is converted to the loss's device and dtype once.

    Parameters
    ----------
    eta : float or Tensor, (E,)
        The step size, positive: one for all members or one per member.

    Returns
    -------
    callable
        The step rule ``(params, loss, grads, t) -> Tensor (E,)``, with ``description``, ``capturable`` and
        ``restrict``.

    Raises
    ------
    ValueError
        When a step size is not positive (or, for a float, not finite), or a per-member tensor is not 1-d; when called,
        when ``eta`` has not one entry per member.
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
            converted[key] = eta.to(loss, copy=True)  # a copy: never an alias of the caller's tensor
        return converted[key]

    rule.description = f"constant({eta if not isinstance(eta, Tensor) else 'per-member'})"  # type: ignore[attr-defined]
    rule.capturable = True  # type: ignore[attr-defined]  # independent of t, no host sync: CUDA-graph safe
    rule.compilable = True  # type: ignore[attr-defined]  # and torch.compile safe
    # the rule of a subset of the members (gd.run's stop rule shrinks the batch)
    rule.restrict = (lambda members: rule) if value is not None else (lambda members: constant(eta[members.to(eta.device)]))  # type: ignore[attr-defined]
    return rule


def grad_norm_sq(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖∇𝓛‖²`` per member, shape ``(E,)``.

    Parameters
    ----------
    params : list of Tensor, each (E, ...)
        The parameters (unused).
    loss : Tensor, (E,)
        The loss (unused).
    grads : sequence of Tensor, each (E, ...)
        The gradient.

    Returns
    -------
    Tensor, (E,)
        ``‖∇𝓛‖²``.
    """
    return sum((g**2).flatten(1).sum(dim=1) for g in grads)


def param_norm(params: Params, loss: Tensor, grads: Sequence[Tensor]) -> Tensor:
    """Observer: ``‖W‖_F`` (all parameter tensors together) per member, shape ``(E,)``.

    Parameters
    ----------
    params : list of Tensor, each (E, ...)
        The parameters.
    loss : Tensor, (E,)
        The loss (unused).
    grads : sequence of Tensor, each (E, ...)
        The gradient (unused).

    Returns
    -------
    Tensor, (E,)
        ``‖W‖_F``.
    """
    return torch.sqrt(sum((p**2).flatten(1).sum(dim=1) for p in params))


@dataclass
class GDResult:
    """What :func:`run` returns.

    ``params``: final parameters, each ``(E, …)`` (diverged members frozen at their last finite iterate, stopped
    members at their stopping state); ``iterations``: the recorded iterations, ``(R,)``; ``history[name]``:
    ``(R, E, …)`` per observer (``'loss'`` and ``'eta'`` always present; entries after a member diverged are NaN;
    after a member stopped, its values at the stopping state, and a NaN step size); ``diverged``: ``(E,)`` bool;
    ``diverged_at``: ``(E,)`` iteration at which it was flagged, −1 if never; ``stopped_at``: ``(E,)`` iteration at
    which the stop rule took it out of the batch, −1 if never; ``snapshots``: ``{t: [tensor (E, …), …]}``, the
    parameters before step ``t`` for every ``t`` of ``snapshot_at``.
    """

    params: Params
    iterations: Tensor
    history: dict[str, Tensor]
    diverged: Tensor
    diverged_at: Tensor
    stopped_at: Tensor = None  # type: ignore[assignment]
    snapshots: dict[int, Params] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.stopped_at is None:
            self.stopped_at = torch.full_like(self.diverged_at, -1)

    @property
    def steps_run(self) -> Tensor:
        """``(E,)``: the steps each member took in the batch (its stopping iteration, else all of them)."""
        return torch.where(self.stopped_at >= 0, self.stopped_at, int(self.meta.get("steps", -1)))


def shared_data(loss_and_grad: LossAndGrad) -> LossAndGrad:
    """Mark a closure whose data are the same for every member, so that :func:`run` may take members out of the
    batch (``stop=``): its restriction to a subset of members is the closure itself.

    The models' ``make_loss_and_grad`` closures carry their own ``restrict(members)``, which also slices
    per-member data; this marks a hand-written one.

    Parameters
    ----------
    loss_and_grad : callable
        A closure ``params -> (loss (E,), grads)`` whose data all members share.

    Returns
    -------
    callable
        The same closure, with ``restrict(members)`` returning itself.
    """
    loss_and_grad.restrict = lambda members: loss_and_grad  # type: ignore[attr-defined]
    return loss_and_grad


def finite_rows(x: Tensor) -> Tensor:
    """``(E,)`` bool: whether every entry of member ``e`` (row ``x[e]``) is finite (the engine's divergence test).

    One multiply and one row sum: ``0·x`` is ``±0`` for finite ``x`` and NaN for ``±inf``/NaN, so the row sum
    is 0 exactly when the row is finite (it cannot overflow). A few times cheaper than
    ``isfinite(x).all(1)``, which makes four passes. :ref:`ch-setup` (the engine).

    Parameters
    ----------
    x : Tensor, (E, ...)
        One row per member.

    Returns
    -------
    Tensor of bool, (E,)
        Whether each row is finite.
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


COMPILE_MIN_STEPS = 20_000  # compile=None with COMPANION_COMPILE=1: shorter runs stay eager (compiling costs more than
# it saves: tens of seconds on two cores against about half a millisecond per step)


def run(
    loss_and_grad: LossAndGrad,
    params: Sequence[Tensor],
    steps: int,
    step_size: StepRule | float | Tensor,
    *,
    record_at: Sequence[int] | Tensor | None = None,
    observers: Mapping[str, Observer] | None = None,
    stop: Observer | None = None,
    check_every: int = 100,
    snapshot_at: Sequence[int] = (),
    progress: bool | None = None,
    desc: str = "GD",
    capture: bool | None = None,
    compile: bool | None = None,  # noqa: A002  (the name users know from torch.compile)
) -> GDResult:
    """Full-batch gradient descent ``θ_{t+1} = θ_t − η_t ∇𝓛(θ_t)`` on an ensemble, for ``steps`` steps.

    The engine of every dynamics chapter (:ref:`ch-setup` introduces it). One call trains ``E`` members at once.

    Parameters
    ----------
    loss_and_grad
        ``params -> (loss (E,), grads)``, ``grads`` matching ``params``: a model's ``make_loss_and_grad``
        (:func:`companion.deepnet.make_loss_and_grad`, :func:`companion.relunet.make_loss_and_grad`,
        :func:`companion.population.make_loss_and_grad`).
    params
        Tensors ``(E, …)`` with a leading ensemble axis (copied; the inputs are not modified).
    steps
        Number of steps.
    step_size
        A :data:`StepRule`, a float, or an ``(E,)`` tensor (constant per member).
    record_at
        Iterations in ``[0, steps]`` at which to record (default: 0 and ``steps``); the state recorded at ``t`` is
        the one *before* step ``t`` (``t = steps`` is the final state).
    observers
        Extra quantities to record, ``name -> f(params, loss, grads)`` (a tensor with leading axis ``E``);
        ``loss`` and ``eta`` are always recorded.
    stop
        A stop rule ``f(params, loss, grads) -> (E,) bool``, evaluated every ``check_every`` steps: a member for
        which it is true leaves the batch (its outcome is decided; the rest run on a smaller batch) and keeps its
        state, which later records and snapshots repeat. Needs a closure that knows how to restrict itself to a
        subset of its members (``loss_and_grad.restrict(index)``, ``index`` the positions of the members kept;
        the models' closures do, :func:`shared_data` marks a hand-written one); a step-size rule with per-member
        state is restricted the same way (:func:`constant` is).
    check_every
        Steps between two evaluations of ``stop``.
    snapshot_at
        Iterations at which to keep the parameters (``result.snapshots``).
    progress, desc
        A ``tqdm`` bar (default: on for long runs unless ``COMPANION_PROGRESS=0``) and its label.
    capture
        On CUDA, capture one step (the update, then loss-and-gradient, divergence bookkeeping and the rule at the
        new point) in a CUDA graph and replay it; recording, observers, snapshots and the stop rule run outside the
        graph, between replays (a batch made smaller by the stop rule is captured anew). ``None`` (default)
        captures when the parameters are on CUDA and the rule is marked ``capturable`` (:func:`constant` is),
        ``False`` never, ``True`` always (an error on the CPU or with an unmarked rule). The closure must then make
        no host conversion after its first call; if the capture fails, ``None`` continues with the eager loop from
        the same state (``meta['capture_error']`` says why) and ``True`` raises ``RuntimeError``. The graph replays
        the eager loop's kernels: the results equal the eager loop's. ``meta['captured']`` says which path ran.
    compile
        ``True``: run the steps between two records as one ``torch.while_loop`` (each step the update, then
        loss-and-gradient, divergence bookkeeping and the rule at the new point), compiled with ``torch.compile``
        (``fullgraph``, inductor's C++ wrapper) once per run and batch shape; recording, observers, snapshots, the
        stop rule and the last step run eagerly, as in the eager loop. The rule must be marked ``capturable`` (it
        ignores ``t`` and keeps no state: :func:`constant`) or ``compilable`` (it depends on ``t`` only through
        ``t == 0``, which starts it afresh: the loop calls it with ``t = 1``), else ``ValueError``; a rule with running
        state also provides ``loop_carry()`` (its state as ``(E, k)`` columns), ``loop_step(params, loss, grads,
        carry) -> (eta, carry)`` (the same step as a pure function) and ``loop_load(carry, loss)``, as
        :class:`companion.descent.Tracker` does. The closure must trace as one graph (no host conversion after its
        first call, which runs eagerly before the loop is compiled). Inductor fuses the elementwise work, so the
        iterates equal the eager loop's up to float64 rounding (not bit for bit). When compiling fails (no C++
        compiler, an unsupported operation, a closure that breaks the graph), the run continues with the eager loop
        from the same state and warns (``meta['compile_error']`` says why). ``meta['compiled']`` says which path ran,
        ``meta['compile_s']`` and ``meta['compile_cpu_s']`` the wall and CPU seconds its first calls took (compiling,
        mostly). Ignored (eager loop) on CUDA when the step is captured. Pays for runs of thousands of steps on small
        networks: compiling costs seconds to a minute (about 20 s of one core for paper A's net), per step it saves
        most of the per-operation overhead (benchmarks/README.md, section 4). ``None`` (default): compile when the
        environment variable ``COMPANION_COMPILE=1`` is set, the rule is marked, the run has at least
        ``COMPILE_MIN_STEPS`` steps and the step is not captured; else the eager loop. ``False``: never.

    Returns
    -------
    GDResult
        Final parameters, history ``(R, E, …)``, divergence and stopping iterations ``(E,)``, snapshots.

    Raises
    ------
    ValueError
        When ``steps`` or ``check_every`` is not a positive int; ``params`` is not a non-empty list of finite floating
        tensors with one leading ensemble size on one device; ``stop`` is given for a closure without ``restrict``;
        a per-member ``step_size`` is not a finite 1-d tensor; ``record_at`` or ``snapshot_at`` leaves ``[0, steps]``;
        or ``loss_and_grad`` returns a loss that is not ``(E,)``.
    RuntimeError
        When ``capture=True`` was asked for and the step cannot be captured in a CUDA graph.

    Notes
    -----
    A member whose loss, gradient or parameters become non-finite is flagged diverged at that iteration and frozen
    at its last finite iterate, while the others continue; nothing raises. The bookkeeping stays on the device: no
    host synchronisation per step (the stop rule and the records synchronise at their iterations only).

    Examples
    --------
    Two members of paper A's network (:ref:`ch-rate`) with Lemma 4.7's adaptive step:

    >>> from companion import deepnet, descent, device, gd
    >>> g = device.generator(0)
    >>> X = deepnet.ball_data(8, 3, generator=g, device="cpu")
    >>> W = deepnet.init_params([3, 4, 1], 2, generator=g, device="cpu")
    >>> f = deepnet.make_loss_and_grad(X, X[:, 0], "tanh")
    >>> step = descent.adaptive_step(L=2, d_max=deepnet.d_max(W))
    >>> res = gd.run(f, W, 100, step, record_at=[0, 50, 100], progress=False)
    >>> res.history["loss"].shape
    torch.Size([3, 2])
    >>> bool((res.history["loss"][-1] < res.history["loss"][0]).all())
    True
    """
    validation.positive_int("steps", steps)
    validation.positive_int("check_every", check_every)
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
    if stop is not None and not callable(getattr(loss_and_grad, "restrict", None)):
        raise ValueError(
            "stop= takes members out of the batch: the closure needs restrict(members) (the models' "
            "make_loss_and_grad closures have it; mark a closure with shared data with gd.shared_data)"
        )
    if isinstance(step_size, Tensor):
        validation.tensor("step_size", step_size, ndim=1)
        step_size = step_size.to(dev)  # one copy, not one per step
    rule = step_size if callable(step_size) else constant(step_size)
    if record_at is None:
        record_at = [0, steps]
    rec = torch.as_tensor(record_at, dtype=torch.long).cpu().flatten().unique(sorted=True)
    if rec.numel() == 0 or rec.min() < 0 or rec.max() > steps:
        raise ValueError(f"record_at must lie in [0, {steps}]")
    snaps_t = sorted({int(t) for t in snapshot_at})
    if snaps_t and (snaps_t[0] < 0 or snaps_t[-1] > steps):
        raise ValueError(f"snapshot_at must lie in [0, {steps}]")
    slot = {int(t): i for i, t in enumerate(rec.tolist())}
    observers = dict(observers or {})
    captured = _capture_wanted(capture, dev, rule)
    if compile is None:
        compile = (
            os.environ.get("COMPANION_COMPILE", "0") == "1"
            and steps >= COMPILE_MIN_STEPS
            and bool(getattr(rule, "capturable", False) or getattr(rule, "compilable", False))
        )
    compiled = bool(compile) and not captured
    if compiled and not (getattr(rule, "capturable", False) or getattr(rule, "compilable", False)):
        raise ValueError(
            "compile=True calls the step-size rule with t = 1 inside the compiled step: mark a rule that depends "
            "on t only through t == 0 with rule.compilable = True (gd.constant and descent.Tracker are marked)"
        )
    run_ = _Run(loss_and_grad, params, rule, observers, rec, slot, dev)
    bar = tqdm(total=steps, desc=desc, disable=not _progress_enabled(progress, steps * E), leave=False)
    meta = {"steps": steps, "rule": getattr(rule, "description", repr(rule)), "captured": captured, "compiled": compiled}
    checks = range(check_every, steps, check_every) if stop is not None else range(0)
    boundaries = sorted({steps, *snaps_t, *checks} - {0})
    snapshots: dict[int, Params] = {}
    with torch.no_grad():
        state = run_.evaluate(0, steps == 0)
        t = 0
        for t1 in [0, *boundaries]:
            if t1 > t:
                if meta["captured"]:
                    try:
                        state = run_.captured_segment(t, t1, state, steps, bar)
                    except _CaptureFailed as exc:
                        if capture:  # asked for explicitly: say why it cannot be done
                            raise RuntimeError(f"gd.run could not capture the step in a CUDA graph: {exc.__cause__!r}") from exc
                        meta["captured"] = False  # automatic: continue eagerly from the same state
                        meta["capture_error"] = repr(exc.__cause__)
                if meta["compiled"]:
                    try:
                        state = run_.compiled_segment(t, t1, state, steps, bar)
                    except _CompileFailed as exc:
                        meta["compiled"] = False  # continue eagerly from the same state
                        meta["compile_error"] = repr(exc.__cause__)
                        warnings.warn(
                            f"gd.run: torch.compile failed ({exc.__cause__!r:.300}); continuing with the eager loop",
                            RuntimeWarning,
                            stacklevel=2,
                        )
                        state = run_.eager_segment(exc.t, t1, exc.state, steps, bar)
                elif not meta["captured"]:
                    state = run_.eager_segment(t, t1, state, steps, bar)
                t = t1
            if t in slot:
                run_.record(slot[t], *state)
            if t in snaps_t:
                snapshots[t] = run_.full_params()
            if t in checks and run_.members.numel():
                state = run_.leave(stop(run_.params, state[0], state[1]), t, state)
                if not run_.members.numel():
                    for later in [b for b in boundaries if b > t]:
                        if later in snaps_t:
                            snapshots[later] = run_.full_params()
                    break
    bar.close()
    run_.release()
    run_.finish()
    if compiled:
        meta["compile_s"], meta["compile_cpu_s"] = run_.compile_s, run_.compile_cpu_s
    return GDResult(
        params=run_.full_params(),
        iterations=rec.to(dev),
        history=run_.history,
        diverged=run_.diverged_at >= 0,
        diverged_at=run_.diverged_at,
        stopped_at=run_.stopped_at,
        snapshots=snapshots,
        meta=meta,
    )


class _Run:
    """The state of one :func:`run`: the members still in the batch (``members``, indices into the ensemble), their
    parameters, the full-size outputs, and the steps (eager, or captured in a CUDA graph)."""

    def __init__(self, loss_and_grad, params, rule, observers, rec, slot, dev):
        E = params[0].shape[0]
        self.E, self.rule, self.observers, self.rec, self.slot, self.dev = E, rule, observers, rec, slot, dev
        self.closure = loss_and_grad
        self.params = params
        self.final = [p.clone() for p in params]  # the states of the members that left the batch
        self.members = torch.arange(E, device=dev)
        self.history: dict[str, Tensor] = {}
        self.alive = torch.ones(E, dtype=torch.bool, device=dev)
        self.diverged_at = torch.full((E,), -1, dtype=torch.long, device=dev)
        self.batch_diverged_at = self.diverged_at  # the batch's rows (the same tensor until the batch shrinks)
        self.stopped_at = torch.full((E,), -1, dtype=torch.long, device=dev)
        self.views = [(E,) + (1,) * (p.ndim - 1) for p in params]
        self.graph = None  # (replay, buffers) of the current batch
        self.step_fn = None  # the compiled loop of the current batch (compile=True)
        self.compile_s = self.compile_cpu_s = 0.0  # wall and CPU seconds of the compiled steps' first calls

    # ------------------------------------------------------------------------------------ one step
    def evaluate(self, t: int | Tensor, last: bool, rule_t: int | None = None) -> tuple[Tensor, Sequence[Tensor], Tensor]:
        """Loss and gradient at the current point, members with a non-finite loss or gradient flagged at ``t``;
        the rule is called with ``rule_t`` if given (the compiled step), else with ``t`` (0 inside a graph)."""
        loss, grads = self.closure(self.params)
        E = self.members.numel()
        if loss.shape != (E,):
            raise ValueError(f"loss_and_grad must return a loss of shape ({E},), got {tuple(loss.shape)}")
        finite = torch.isfinite(loss)
        if last or not isinstance(t, int) or t in self.slot:
            # a non-finite gradient elsewhere makes θ − η g non-finite, which update() flags at the same t and
            # freezes at the same iterate; only a recorded state needs it flagged before the record
            finite &= _finite_all(grads)
        self.flag(self.alive.gt(finite), t)  # alive & ~finite in one kernel
        self.alive.logical_and_(finite)
        if rule_t is None:
            rule_t = t if isinstance(t, int) else 0
        eta = torch.full_like(loss, float("nan")) if last else self.rule(self.params, loss, grads, rule_t)
        return loss, grads, eta

    def flag(self, mask: Tensor, t: int | Tensor) -> None:
        if isinstance(t, int):
            self.batch_diverged_at.masked_fill_(mask, t)  # on device: no host sync
        else:  # t on the device (inside a graph)
            torch.where(mask, t, self.batch_diverged_at, out=self.batch_diverged_at)

    def update(self, grads: Sequence[Tensor], eta: Tensor, t: int | Tensor) -> None:
        # θ − η g in one fused pass per tensor; a step that produces non-finite parameters freezes the
        # member at its last finite iterate (flagged at this iteration)
        news = [torch.addcmul(p, eta.view(shape), g, value=-1) for p, g, shape in zip(self.params, grads, self.views)]
        ok = torch.isfinite(eta)
        ok &= _finite_all(news)
        self.flag(self.alive.gt(ok), t)  # alive & ~ok in one kernel
        self.alive.logical_and_(ok)
        for p, new, shape in zip(self.params, news, self.views):
            if new.dtype == p.dtype:
                torch.where(self.alive.view(shape), new, p, out=p)  # in place, one pass
            else:  # η of a wider dtype than θ
                p.copy_(torch.where(self.alive.view(shape), new, p))

    def eager_segment(self, t0: int, t1: int, state, steps: int, bar):
        loss, grads, eta = state
        for t in range(t0, t1):
            self.update(grads, eta, t)
            bar.update(1)
            loss, grads, eta = self.evaluate(t + 1, t + 1 == steps)
            if t + 1 < t1 and t + 1 in self.slot:
                self.record(self.slot[t + 1], loss, grads, eta)
        return loss, grads, eta

    def captured_segment(self, t0: int, t1: int, state, steps: int, bar):
        """Steps ``t0 … t1 − 1`` by replaying one captured step; records between replays. Raises
        :class:`_CaptureFailed` when the capture fails (nothing has been replayed then)."""
        if self.graph is None:
            self.graph = self._capture(state)
        replay, (buf_loss, buf_grads, buf_eta, t_dev) = self.graph
        t_dev.fill_(t0)
        buf_loss.copy_(state[0])
        for b, g in zip(buf_grads, state[1]):
            b.copy_(g)
        buf_eta.copy_(state[2])
        for t in range(t0, t1):
            replay()
            bar.update(1)
            if t + 1 < t1 and t + 1 in self.slot:
                self.record(self.slot[t + 1], buf_loss, buf_grads, buf_eta)
        return buf_loss, buf_grads, torch.full_like(buf_eta, float("nan")) if t1 == steps else buf_eta

    def _capture(self, state):
        loss, grads, eta = state
        buf_loss, buf_grads, buf_eta = loss.clone(), [g.clone() for g in grads], eta.clone()
        t_dev = torch.zeros((), dtype=torch.long, device=self.dev)

        def body() -> None:
            self.update(buf_grads, buf_eta, t_dev)
            t_dev.add_(1)
            loss, grads, eta = self.evaluate(t_dev, False)
            buf_loss.copy_(loss)
            for b, g in zip(buf_grads, grads):
                b.copy_(g)
            buf_eta.copy_(eta)

        saved = [p.clone() for p in self.params], self.alive.clone(), self.batch_diverged_at.clone()
        try:
            _warm_up(lambda: self.evaluate(0, False), self.dev)  # lazy initialisations, one-off checks
            replay = _CAPTURE(body, self.dev)
        except Exception as exc:  # a capture only records kernels: restore the state it started from
            if self.dev.type == "cuda":
                torch.cuda.synchronize(self.dev)
            for p, q in zip(self.params, saved[0]):
                p.copy_(q)
            self.alive.copy_(saved[1])
            self.batch_diverged_at.copy_(saved[2])
            raise _CaptureFailed(state) from exc
        return replay, (buf_loss, buf_grads, buf_eta, t_dev)

    def compiled_segment(self, t0: int, t1: int, state, steps: int, bar):
        """Steps ``t0 … t1 − 1`` by calls of the compiled loop (:meth:`_looped`), one call per stretch between two
        records; the last step of the run eagerly. Raises :class:`_CompileFailed` when the first call of a new
        compiled loop fails (nothing has been applied then: the loop is functional)."""
        loss, grads, eta = state
        last = t1 - 1 if t1 == steps else t1  # the run's last step evaluates no rule: eager
        t = t0
        for s in sorted({s for s in self.slot if t0 < s < last} | {last}):
            if s > t:
                loss, grads, eta = self._looped(t, s, loss, grads, eta)
                bar.update(s - t)
                t = s
            if s < t1 and s in self.slot:
                self.record(self.slot[s], loss, grads, eta)
        if last < t1:
            return self.eager_segment(last, t1, (loss, grads, eta), steps, bar)
        return loss, grads, eta

    def _looped(self, t0: int, t1: int, loss: Tensor, grads: Sequence[Tensor], eta: Tensor):
        """Steps ``t0 … t1 − 1`` in one call of ``torch.while_loop`` (compiled once per batch shape, so a stretch of
        any length is one call): the parameters and gradients travel as flat ``(E, P)`` rows, a rule with running
        state as its :meth:`loop_carry` columns; the results are written back into the run's tensors."""
        E = self.members.numel()
        shapes = [tuple(p.shape[1:]) for p in self.params]
        sizes = [math.prod(sh) for sh in shapes]
        stateful = callable(getattr(self.rule, "loop_step", None))

        def unflat(flat: Tensor) -> list[Tensor]:
            return [x.reshape((E,) + sh) for x, sh in zip(flat.split(sizes, dim=1), shapes)]

        def flat(ts: Sequence[Tensor]) -> Tensor:
            return torch.cat([x.reshape(E, -1) for x in ts], 1)

        first = self.step_fn is None
        start, start_cpu = time.perf_counter(), time.process_time()
        carry = self.rule.loop_carry() if stateful else loss.new_zeros((E, 0))
        try:
            if first:
                # one eager call first, so that a closure's (or stateless rule's) one-off checks and conversions,
                # made on its first call, happen outside the loop (e.g. the closure of a batch the stop rule shrank)
                w_loss, w_grads = self.closure(self.params)
                if not stateful:
                    self.rule(self.params, w_loss, w_grads, 1)
                segment = self._loop(stateful, flat, unflat)
                self.step_fn, self.step_code = _COMPILE(segment), segment.__code__
            # fresh inputs: none may alias another or a tensor the body reads (a constant rule returns its own step)
            carried = (
                flat(self.params),
                flat(grads),
                loss.clone(),
                eta.clone(),
                self.alive.clone(),
                self.batch_diverged_at.clone(),
            )
            dev_t, dev_n = (torch.tensor(v, dtype=torch.long, device=self.dev) for v in (t0, t1))
            out = self.step_fn(dev_t, dev_n, *carried, carry)
        except Exception as exc:  # nothing has been written: the loop is functional
            self.release()
            raise _CompileFailed((loss, grads, eta), t0) from exc
        if first:
            self.compile_s += time.perf_counter() - start
            self.compile_cpu_s += time.process_time() - start_cpu
        _, _, theta, g, loss, eta, alive, div, carry = out
        for p, q in zip(self.params, unflat(theta)):
            p.copy_(q)
        self.alive.copy_(alive)
        self.batch_diverged_at.copy_(div)
        if stateful:
            self.rule.loop_load(carry, loss)
        return loss, unflat(g), eta

    def _loop(self, stateful: bool, flat, unflat):
        """``segment(t, n, θ, g, loss, η, alive, diverged_at, carry)``: steps ``t … n − 1`` by ``torch.while_loop``,
        each the eager loop's :meth:`update` then :meth:`evaluate` out of place (every tensor's finiteness tested),
        the rule called with ``t = 1`` or, with running state, as :meth:`loop_step` on its carried columns."""

        def body(t, n, theta, g, loss, eta, alive, div, carry):
            new = torch.addcmul(theta, eta[:, None], g, value=-1)
            ok = torch.isfinite(eta) & finite_rows(new)
            div = torch.where(alive & ~ok, t, div)
            alive = alive & ok
            theta = torch.where(alive[:, None], new, theta).to(theta.dtype)
            t = t + 1
            params = unflat(theta)
            loss, grads = self.closure(params)
            g = flat(grads)
            finite = torch.isfinite(loss) & finite_rows(g)
            div = torch.where(alive & ~finite, t, div)
            alive = alive & finite
            if stateful:
                eta, carry = self.rule.loop_step(params, loss, grads, carry)
            else:
                eta, carry = self.rule(params, loss, grads, 1).clone(), carry.clone()
            return t, n.clone(), theta, g, loss, eta, alive, div, carry  # outputs never alias inputs

        def segment(*carried):
            return torch.while_loop(lambda t, n, *rest: t < n, body, carried)

        return segment

    def release(self) -> None:
        """Drop the compiled loop (and the compiler's cache entries for it, which hold this run's closures)."""
        if self.step_fn is not None:
            self.step_fn = None
            _RELEASE(self.step_code)

    # ------------------------------------------------------------------------------------ bookkeeping
    def record(self, i: int, loss: Tensor, grads: Sequence[Tensor], eta: Tensor, members: Tensor | None = None) -> None:
        """Write the values of the batch's members at record slot ``i`` (``members``: only these rows)."""
        values = {"loss": loss, "eta": eta, **{k: f(self.params, loss, grads) for k, f in self.observers.items()}}
        alive = self.alive
        cols = self.members
        for k, v in values.items():
            v = v.detach()
            if k not in self.history:
                dtype = v.dtype if v.is_floating_point() else torch.float64
                self.history[k] = torch.full((self.rec.numel(), self.E, *v.shape[1:]), float("nan"), dtype=dtype, device=self.dev)
            out = torch.where(alive.view(-1, *([1] * (v.ndim - 1))), v.to(self.history[k].dtype), torch.nan)
            if members is not None:
                self.history[k][i, cols[members]] = out[members]
            elif cols.numel() == self.E:  # the whole ensemble is in the batch
                self.history[k][i] = out
            else:
                self.history[k][i, cols] = out

    def finish(self) -> None:
        """Write the batch's divergence iterations into the full-size tensor."""
        if self.batch_diverged_at is not self.diverged_at:
            self.diverged_at[self.members] = self.batch_diverged_at

    def full_params(self) -> Params:
        """The parameters of every member: those in the batch now, the others at the state they left it in."""
        out = [f.clone() for f in self.final]
        for o, p in zip(out, self.params):
            o[self.members] = p
        return out

    def leave(self, done: Tensor, t: int, state):
        """Take the members for which ``done`` holds out of the batch at iteration ``t``."""
        done = done.bool() & self.alive  # a diverged member is frozen anyway; it stays as it is
        if not bool(done.any()):
            return state
        loss, grads, eta = state
        nan_eta = torch.full_like(eta, float("nan"))
        for k in [k for k in self.slot if k > t]:  # later records repeat the stopping state
            self.record(self.slot[k], loss, grads, nan_eta, members=done)
        gone = self.members[done]
        for f, p in zip(self.final, self.params):
            f[gone] = p[done]
        self.stopped_at[gone] = t
        self.finish()
        keep = ~done
        self.members = self.members[keep]
        self.params = [p[keep].contiguous() for p in self.params]
        self.alive = self.alive[keep]
        self.batch_diverged_at = self.batch_diverged_at[keep]
        self.views = [(self.members.numel(),) + v[1:] for v in self.views]
        kept = keep.nonzero().squeeze(1)  # positions in the batch the closure and the rule were made for
        self.closure = self.closure.restrict(kept)
        if callable(getattr(self.rule, "restrict", None)):  # a rule with per-member state (a step per member)
            self.rule = self.rule.restrict(kept)
        self.graph = None  # a smaller batch is captured anew
        self.release()  # and compiled anew
        return loss[keep], [g[keep] for g in grads], eta[keep]


class _CaptureFailed(Exception):
    """The capture raised (e.g. the closure converts a tensor to a Python number); ``state`` is the evaluation
    from which the eager loop continues."""

    def __init__(self, state):
        super().__init__("capture failed")
        self.state = state


class _CompileFailed(Exception):
    """Compiling the step failed; ``state`` and ``t``: the evaluation and iteration from which the eager loop
    continues."""

    def __init__(self, state, t: int):
        super().__init__("compile failed")
        self.state, self.t = state, t


def _torch_compile(fn: Callable) -> Callable:
    """``fn`` compiled by ``torch.compile`` (inductor, shapes fixed: one compilation per batch shape; the whole of
    ``fn`` in one graph, as ``torch.while_loop`` needs; inductor's C++ wrapper, which runs the loop's iterations
    without returning to Python; its fused CPU kernels on one thread: the loop is for steps of a few thousand
    numbers, where a parallel region per kernel costs more than the work — at L = 2 of :ref:`ch-rate` on two threads,
    116 µs a step against 26 µs on one; library calls such as a large matmul keep torch's threads)."""
    return torch.compile(fn, dynamic=False, fullgraph=True, options={"cpp_wrapper": True, "cpp.threads": 1})


def _release_code(code) -> None:
    """Forget the compiled entries of ``code`` (each run compiles its own step; dynamo would otherwise keep them,
    and stop compiling after its recompile limit)."""
    reset = getattr(getattr(torch, "_dynamo", None), "reset_code", None)
    if reset is not None:
        reset(code)


_COMPILE = _torch_compile  # tests substitute an eager stand-in (``lambda fn: fn``) or a failing one
_RELEASE = _release_code


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
    """About ``num`` iterations in ``[0, steps]``, log-spaced, always including 0 and ``steps``.

    Parameters
    ----------
    steps : int
        The last iteration.
    num : int
        About how many iterations.

    Returns
    -------
    Tensor of int64, (N,)
        The iterations, increasing and distinct, from 0 to ``steps`` (``N ≤ num + 2``).

    Raises
    ------
    ValueError
        When ``steps`` is not a positive int.
    """
    validation.positive_int("steps", steps)
    pts = torch.logspace(0, torch.log10(torch.tensor(float(steps))), num).round().long()
    return torch.cat([torch.tensor([0]), pts, torch.tensor([steps])]).unique()
