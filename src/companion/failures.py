"""When training paper B's two-layer network fails: the definition of failure, used by every experiment of
:ref:`ch-failures`, and the growth signs that predict it from the initialisation (Section 4's mechanism).

A run **fails** when its population loss after training exceeds ``τ‖a‖²`` (``τ =`` :data:`TAU`); at the start
the loss is ``½‖a‖²`` and a run stuck with two output weights of one sign sits near ``¼‖a‖²``. A run is
**decided** (and may leave its batch, :func:`stop_rule`) once its population loss is at most ``10⁻⁶‖a‖²``
(:data:`STOP`): it is then in the local refinement phase, where the loss only decreases.

Near the origin GD moves ``(v_i, w_iᵀĉ_i)`` by ``μ‖c_i‖ [[0, 1], [1, 0]]``, so the sign ``v_i`` ends the growth
phase with is the sign of the growing mode ``u_i = v_i(0) + w_i(0)ᵀĉ_i`` (:func:`companion.relunet.growth_sign`).
That linearisation neglects two terms, and :func:`growth_signs` states their size before any training as a
*near-tie allowance* per neuron:

* the neurons' interaction, second order in the weights: ``−∂_{v_i}½E[f²] = −Σ_j v_j E[ReLU(w_jᵀx)ReLU(w_iᵀx)]``,
  at most ``½‖w_i‖ Σ_j |v_j|‖w_j‖``; accumulated over the growth of neuron ``j`` up to its saturation
  ``‖a‖^{1/2}`` at rate ``g = ‖a‖/2`` it moves ``u_i`` by at most ``‖w_i(0)‖ Σ_{j≠i} ‖θ_j(0)‖ / ‖a‖^{1/2}``
  (``θ_j = (v_j, w_j)``), about ``σ²`` against ``u_i ~ σ``;
* on the empirical loss only, the change of ``c_i`` while ``w_i`` turns (its activation pattern changes):
  ``max_s |w_i(0)ᵀ(ĉ_s − ĉ_i(0))|`` over the directions ``ĉ_±`` that ``c`` takes at the end of the alignment
  (the fixed points ``w ∝ ±c(w)`` of :func:`companion.phases.growth_rate`); zero for the population, where
  ``c_i = a/2`` for every ``w_i``.

A neuron whose ``|u_i|`` is within the allowance (plus the floating-point rounding of ``u_i``) is a **near-tie**;
the mechanism predicts every other run exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from . import population, validation

__all__ = [
    "TAU",
    "STOP",
    "failed",
    "stop_rule",
    "GrowthSigns",
    "growth_signs",
    "signs_agree",
    "exceptions",
    "outcome_blind_predictor",
]

TAU = 1e-2  #: failure: final population loss above ``TAU ‖a‖²``
STOP = 1e-6  #: decided: population loss at most ``STOP ‖a‖²``


def _numpy(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def failed(loss, a, tau: float = TAU) -> np.ndarray:
    """Failure, defined once (Section 4; :ref:`ch-failures`): the final population loss exceeds ``τ‖a‖²``.

    Parameters
    ----------
    loss : Tensor or array, shape ``(E,)`` or any shape
        Final population losses (:func:`companion.population.loss`).
    a : Tensor or array, shape ``(d,)``
        The target direction.
    tau : float
        The threshold (default :data:`TAU`); :ref:`ch-failures` shows that any ``τ`` in ``[10⁻⁵, 10⁻¹]`` gives
        the same verdicts.

    Returns
    -------
    numpy.ndarray of bool, the shape of ``loss``
        ``True`` where the run failed; a NaN loss (a diverged run) counts as failed.

    Raises
    ------
    ValueError
        If ``tau`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> failed(np.array([0.25, 1e-9, np.nan]), np.array([1.0, 0.0])).tolist()
    [True, False, True]
    """
    if not tau > 0:
        raise ValueError(f"tau must be positive, got {tau!r}")
    norm_a2 = float(np.sum(_numpy(a).astype(float) ** 2))
    return ~(_numpy(loss) <= tau * norm_a2)


def stop_rule(a: Tensor, stop: float = STOP) -> Callable:
    """The rule that takes a decided run out of its batch (``stop=`` of :func:`companion.gd.run`; :ref:`ch-failures`):
    population loss at most ``stop ‖a‖²``.

    Parameters
    ----------
    a : Tensor, shape ``(d,)``
        The target direction.
    stop : float
        The level (default :data:`STOP`), far below every failure threshold considered.

    Returns
    -------
    callable
        ``f(params, loss, grads) -> (E,) bool`` with ``params = [W (E, k, d), v (E, k)]``.

    Raises
    ------
    ValueError
        If ``stop`` is not positive.

    Examples
    --------
    >>> import torch
    >>> a = torch.tensor([1.0, 0.0])
    >>> rule = stop_rule(a)
    >>> rule([torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]]), torch.tensor([[1.0, -1.0]])], None, None).tolist()
    [True]
    """
    if not stop > 0:
        raise ValueError(f"stop must be positive, got {stop!r}")
    level = stop * float((a * a).sum())
    return lambda params, loss, grads: population.loss(params[0], params[1], a) <= level


@dataclass(frozen=True)
class GrowthSigns:
    """The growth signs of a batch of initialisations with their margins (:func:`growth_signs`).

    ``sign``: ``(E, k)`` of ±1, the sign ``v_i`` ends the growth phase with; ``margin``: ``(E, k)``, ``|u_i|``;
    ``allowance``: ``(E, k)``, the near-tie allowance (interaction + turning of ``c_i`` + rounding);
    ``near_tie``: ``(E, k)`` bool, ``margin ≤ allowance``; ``tied``: ``(E,)`` bool, a member with a near-tie in
    any neuron.
    """

    sign: np.ndarray
    margin: np.ndarray
    allowance: np.ndarray

    @property
    def near_tie(self) -> np.ndarray:
        return self.margin <= self.allowance

    @property
    def tied(self) -> np.ndarray:
        return self.near_tie.any(-1)


def _coupling(W: Tensor, a: Tensor, X: Tensor) -> Tensor:
    """``c(w) = (1/n) Σ_j 1{wᵀx_j > 0} x_j x_jᵀ a`` for every neuron: ``W (E, k, d)`` → ``(E, k, d)``."""
    E, k, d = W.shape
    mask = (X @ W.reshape(E * k, d).T > 0).to(X.dtype)  # (n, E·k)
    return ((mask * (X @ a).unsqueeze(1)).T @ X / X.shape[0]).view(E, k, d)


def _aligned_couplings(X: Tensor, a: Tensor, iters: int = 50) -> Tensor:
    """The unit directions ``ĉ_±`` of ``c`` at the fixed points ``w ∝ ±c(w)``: ``(2, d)``."""
    out = []
    for s in (1.0, -1.0):
        w = s * a
        for _ in range(iters):
            c = _coupling(w.view(1, 1, -1), a, X).view(-1)
            w = s * c / c.norm()
        out.append(c / c.norm())
    return torch.stack(out)


def growth_signs(W: Tensor, v: Tensor, a: Tensor, X: Tensor | None = None) -> GrowthSigns:
    """Growth signs with their near-tie allowance, from the initialisation alone (Section 4's mechanism;
    :ref:`ch-failures`).

    Parameters
    ----------
    W : Tensor, shape ``(E, k, d)``
        Initial input weights.
    v : Tensor, shape ``(E, k)``
        Initial output weights.
    a : Tensor, shape ``(d,)``
        The target direction.
    X : Tensor, shape ``(n, d)``, optional
        The data of the empirical loss; ``None`` for the population loss (``c_i = a/2``).

    Returns
    -------
    GrowthSigns
        ``sign = sign(u_i)`` with ``u_i = v_i + w_iᵀĉ_i`` (the same as :func:`companion.relunet.growth_sign`),
        ``margin = |u_i|`` and ``allowance`` the sum of the interaction bound
        ``‖w_i‖ Σ_{j≠i} ‖(v_j, w_j)‖ / ‖a‖^{1/2}``, the turning bound ``max_s |w_iᵀ(ĉ_s − ĉ_i)|`` (empirical loss
        only) and ``8 ε (|v_i| + ‖w_i‖)`` for the rounding of ``u_i`` (``ε`` of the dtype), each ``(E, k)``.

    Raises
    ------
    ValueError
        On tensors of the wrong rank or on different devices.

    Examples
    --------
    >>> import torch
    >>> a = torch.tensor([1.0, 0.0], dtype=torch.float64)
    >>> W = torch.tensor([[[0.0, 1e-8], [-2e-8, 0.0]]], dtype=torch.float64)
    >>> v = torch.tensor([[1e-8, 1e-8]], dtype=torch.float64)
    >>> gs = growth_signs(W, v, a)
    >>> gs.sign.tolist(), gs.near_tie.tolist()
    ([[1.0, -1.0]], [[False, False]])
    """
    validation.same_device(W=W, v=v, a=a, **({} if X is None else {"X": X}))
    validation.tensor("W", W, ndim=3)
    validation.tensor("v", v, ndim=2)
    validation.tensor("a", a, ndim=1)
    if W.shape[:2] != v.shape or W.shape[2] != a.shape[0]:
        raise ValueError(f"W (E, k, d), v (E, k) and a (d,) do not fit: {tuple(W.shape)}, {tuple(v.shape)}, {tuple(a.shape)}")
    w_norm = W.norm(dim=-1)
    theta_norm = torch.sqrt(w_norm**2 + v**2)
    others = theta_norm.sum(-1, keepdim=True) - theta_norm
    allowance = w_norm * others / a.norm().sqrt()
    if X is None:
        chat = (a / a.norm()).expand_as(W)
    else:
        validation.tensor("X", X, ndim=2)
        c = _coupling(W, a, X)
        chat = c / c.norm(dim=-1, keepdim=True)
        ends = _aligned_couplings(X, a)  # (2, d)
        turn = torch.einsum("ekd,sd->eks", W, ends) - (W * chat).sum(-1, keepdim=True)
        allowance = allowance + turn.abs().amax(-1)
    u = v + (W * chat).sum(-1)
    allowance = allowance + 8 * torch.finfo(W.dtype).eps * (v.abs() + w_norm)
    return GrowthSigns(sign=_numpy(torch.sign(u)), margin=_numpy(u.abs()), allowance=_numpy(allowance))


def signs_agree(sign) -> np.ndarray:
    """Whether all ``k`` signs of a member agree (two neurons of one sign represent only half of ``aᵀx``;
    :ref:`ch-failures`): ``(E, k)`` of ±1 → ``(E,)`` bool.

    Parameters
    ----------
    sign : Tensor or array, shape ``(E, k)``
        The signs of the output weights of each member's ``k`` neurons (any values: their signs are compared).

    Returns
    -------
    numpy.ndarray of bool, shape ``(E,)``
        Whether all of a member's entries are positive, or all negative (a zero agrees with neither).

    Raises
    ------
    ValueError
        If ``sign`` is not two-dimensional.

    Examples
    --------
    >>> import numpy as np
    >>> signs_agree(np.array([[1, 1], [1, -1], [-1, -1]])).tolist()
    [True, False, True]
    """
    sign = _numpy(sign)
    if sign.ndim != 2:
        raise ValueError(f"sign must be (E, k), got shape {sign.shape}")
    return (sign > 0).all(-1) | (sign < 0).all(-1)


def exceptions(predicted, fail, tied=None) -> dict:
    """Exceptions of a failure predictor (:ref:`ch-failures`'s exact rule): runs where ``predicted`` (the
    signs agree) differs from ``fail``, counted among the decided runs and among the near-ties.

    Parameters
    ----------
    predicted, fail : array of bool, shape ``(E,)``
    tied : array of bool, shape ``(E,)``, optional
        Members with a near-tie (the field ``tied`` of the growth signs); ``None``: none.

    Returns
    -------
    dict
        ``decided`` and ``tied`` (member counts), ``mismatches`` (among the decided runs) and
        ``tied_mismatches`` (among the near-ties).

    Raises
    ------
    ValueError
        If ``predicted``, ``fail`` and ``tied`` do not have one shape.

    Examples
    --------
    >>> import numpy as np
    >>> exceptions(np.array([True, False, True]), np.array([True, True, False]), np.array([False, True, False]))
    {'decided': 2, 'tied': 1, 'mismatches': 1, 'tied_mismatches': 1}
    """
    predicted, fail = _numpy(predicted).astype(bool), _numpy(fail).astype(bool)
    tied = np.zeros_like(fail) if tied is None else _numpy(tied).astype(bool)
    if not predicted.shape == fail.shape == tied.shape:
        raise ValueError(f"predicted, fail and tied must have one shape, got {predicted.shape}, {fail.shape}, {tied.shape}")
    miss = predicted != fail
    return {
        "decided": int((~tied).sum()),
        "tied": int(tied.sum()),
        "mismatches": int((miss & ~tied).sum()),
        "tied_mismatches": int((miss & tied).sum()),
    }


def outcome_blind_predictor(fail) -> np.ndarray:
    """A predictor independent of the outcome by construction: within the failed runs, and within the others, the
    first half (by member index, rounded up) is marked ``True``. Its 2 × 2 table against ``fail`` has equal rows up to
    one count per column, so an association test on it finds nothing; it is the computed negative control of
    :ref:`ch-failures`'s Fisher test of Section 4's sign rule (the test must reject it).

    Parameters
    ----------
    fail : array of bool, shape ``(E,)``
        Whether each run failed.

    Returns
    -------
    numpy.ndarray of bool, shape ``(E,)``
        The predictor.

    Raises
    ------
    ValueError
        If ``fail`` is not one-dimensional.

    Examples
    --------
    >>> import numpy as np
    >>> outcome_blind_predictor(np.array([True, False, True, True, False])).tolist()
    [True, True, True, False, False]
    """
    fail = _numpy(fail).astype(bool)
    if fail.ndim != 1:
        raise ValueError(f"fail must be (E,), got shape {fail.shape}")
    predictor = np.zeros_like(fail)
    for group in (fail, ~fail):
        members = np.flatnonzero(group)
        predictor[members[: (members.size + 1) // 2]] = True
    return predictor
