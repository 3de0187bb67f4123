"""Paper A's assumptions on the activation and the data, checked where its lemmas are used.

* :func:`check_assumptions` — refuses (``ValueError``) an activation or data outside Assumptions 3.1–3.3: a
  non-smooth σ (ReLU), a constant above 1, data with ``‖x_i‖ > c_x √d``. Every lemma-level function of
  :mod:`companion.smoothness`, :mod:`companion.descent` and :mod:`companion.search` calls it.
* :func:`blockwise_activation` — several such activations in one ensemble, one per block of members, so that one
  engine run or one search covers them all.

The assumptions are stated in :ref:`ch-setup`; :ref:`ch-smoothness`, :ref:`ch-descent` and :ref:`ch-rate` rely on
them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import activations, deepnet, validation

__all__ = ["check_assumptions", "blockwise_activation"]


def check_assumptions(act, X: Tensor | None = None, c_x: float = 1.0) -> activations.Activation:
    """Raise ``ValueError`` unless paper A's lemmas apply to the activation and, if given, to the data.

    Paper A, Assumptions 3.1–3.3 (:ref:`ch-setup`; used by every bound of :ref:`ch-smoothness`, :ref:`ch-descent`
    and :ref:`ch-rate`): σ smooth (3.1) with every constant ``c_0, …, c_3 ≤ 1`` (3.3), and ``‖x_i‖ ≤ c_x √d`` with
    ``0 < c_x ≤ 1`` (3.2–3.3).

    Parameters
    ----------
    act
        An activation name or :class:`companion.activations.Activation`.
    X
        Data ``(n, d)`` or ``(E, n, d)``, or ``None`` to check the activation only.
    c_x
        The constant of Assumption 3.2, in ``(0, 1]``.

    Returns
    -------
    Activation
        The activation, resolved by :func:`companion.activations.get`.

    Raises
    ------
    ValueError
        When σ violates Assumption 3.1 or 3.3 (a constant exceeds 1), ``c_x`` is not in ``(0, 1]``, or an input
        has ``‖x_i‖ > c_x √d`` (Assumption 3.2).
    """
    sigma = activations.get(act).require_smooth()
    if max(sigma.constants().values()) > 1:
        raise ValueError(f"activation {sigma.name!r} violates Assumption 3.3 (a constant exceeds 1)")
    if not 0 < float(c_x) <= 1:
        raise ValueError(f"Assumption 3.3 needs 0 < c_x <= 1, got {c_x!r}")
    if X is not None:
        deepnet.check_assumption_3_2(X, c_x)
    return sigma


def blockwise_activation(acts: Sequence, block: int) -> activations.Activation:
    """One activation per block of ``block`` consecutive members, so that one ensemble (one engine run, one search)
    holds several activations.

    Paper A, Assumption 3.1 (:ref:`ch-descent` runs GD with it; :ref:`ch-smoothness`'s search uses it through
    :func:`companion.search.proof_probes`). Member ``e`` (the leading axis of every tensor the activation sees,
    ``(E, …)`` with ``E = len(acts) · block``) uses ``acts[e // block]``. Each activation must satisfy paper A's
    assumptions (:func:`check_assumptions`).

    Parameters
    ----------
    acts
        Distinct activations (names or :class:`companion.activations.Activation`), at least one.
    block
        Members per activation, a positive integer.

    Returns
    -------
    Activation
        A single activation whose functions act blockwise on ``(len(acts) · block, …)`` and whose constants are the
        largest of the blocks' (``acts[0]`` itself for one activation).

    Raises
    ------
    ValueError
        When ``acts`` is not a non-empty list of distinct activations, or ``block`` is not a positive int.
    """
    validation.positive_int("block", block)
    acts = [check_assumptions(act) for act in acts]
    if not acts or len({act.name for act in acts}) != len(acts):
        raise ValueError(f"acts must be a non-empty list of distinct activations, got {[a.name for a in acts]!r}")
    if len(acts) == 1:
        return acts[0]

    def split(name):
        def f(z):
            return torch.cat([getattr(act, name)(z[i * block : (i + 1) * block]) for i, act in enumerate(acts)], 0)

        return f

    consts = [act.constants() for act in acts]
    top = {k: max(c[k] for c in consts) for k in consts[0]}
    d2 = split("d2") if all(act.d2 is not None for act in acts) else None
    return activations.Activation(
        "+".join(act.name for act in acts), split("fn"), split("d1"), d2, top["c0"], top["c1"], top["c2"], top["c3"], True
    )
