"""Paper A's smoothness lemmas exactly as stated: Lemmas 4.1, 4.3–4.5, eq. (14) and Lemmas A.1–A.6.

Two layers, for each statement:

* its **right-hand side** (``lemma_4_3_rhs``, …, ``lemma_a6_rhs``, :func:`gradient_norm_bound`): a polynomial in the
  norms ``a = ‖W1‖``, ``b = ‖W2‖``, ``r = ‖W2 − W1‖`` (Frobenius norms of the block-diagonal ``W``,
  :func:`companion.deepnet.norm`) with constants in ``L``, ``d_max`` and ``c_J``, evaluated in log space by
  :mod:`companion.polysum` (the ``log_*`` variants return the logarithm itself). Norms are tensors with a leading
  ensemble axis ``(E,)`` (any broadcastable shape works); the output has one value per member.
* **both sides on actual networks** (:func:`lemma_4_3`, :func:`lemma_4_4`, :func:`lemma_4_5`, :func:`lemma_4_1`,
  :func:`equation_14`, :func:`appendix_a`), as a :class:`Comparison` whose ratio is at most 1 where the statement
  holds. They refuse (``ValueError``) where the lemmas do not apply: a non-smooth activation (ReLU) or data violating
  Assumption 3.2 (``‖x_i‖ ≤ √d``), :func:`companion.assumptions.check_assumptions`.

Conventions fixed from the paper's text (Appendix A; :ref:`ch-smoothness` discusses them):

* ``d_max = max{d_0, …, d_L}`` *includes* the input dimension ``d_0 = d`` (Section 3, and Lemma A.2's
  ``c_x d^{1/2} ≤ d_max^{1/2}``), as :func:`companion.deepnet.d_max` computes it.
* The double sums of Lemmas 4.4/4.5 run over ``{(j, k): j, k ≥ 0, j + k ≤ 2L − 2}``; Lemma 4.3's over
  ``j + k ≤ L − 1``. Both index sets are symmetric, so the two orders of summation written in the paper
  (``Σ_j ‖W1‖^j Σ_k ‖W2‖^k`` and its exchange at the end of A.4) are the same polynomial.
* ``c_J = 2`` for the squared loss (:data:`companion.deepnet.C_J`).

The names of the statements are :data:`LEMMAS`, :data:`PROOF_STEPS` and :data:`STATEMENTS`;
:func:`companion.ratios.proof_log_ratios` evaluates all of them in one pass and :mod:`companion.search` looks for
their worst cases. Used by :ref:`ch-smoothness` (every statement), :ref:`ch-descent` and :ref:`ch-rate` (eq. (14)
along GD trajectories).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from . import deepnet, validation
from ._paper_a import check_cJ as _check_cJ
from ._paper_a import check_devices as _check_devices
from ._paper_a import check_dmax as _check_dmax
from ._paper_a import check_ell as _check_ell
from ._paper_a import check_L as _check_L
from ._paper_a import grad_norms as _grad_norms
from ._paper_a import norm as _norm
from ._paper_a import pair as _pair
from ._paper_a import same_device_norms as _same_device_norms
from .assumptions import check_assumptions
from .polysum import log_double_sum, log_exponent_sum, log_power_sum

__all__ = [
    "LEMMAS",
    "APPENDIX_A",
    "PROOF_STEPS",
    "STATEMENTS",
    "log_lemma_4_3_rhs",
    "lemma_4_3_rhs",
    "log_lemma_4_4_rhs",
    "lemma_4_4_rhs",
    "log_lemma_4_5_rhs",
    "lemma_4_5_rhs",
    "log_local_smoothness_bound",
    "balanced_family",
    "ray_degree",
    "gradient_norm_bound",
    "lemma_a1_rhs",
    "lemma_a2_rhs",
    "lemma_a3_rhs",
    "lemma_a4_rhs",
    "lemma_a5_rhs",
    "lemma_a6_exponents",
    "lemma_a6_rhs",
    "lemma_4_1_rhs",
    "Comparison",
    "lemma_4_3",
    "lemma_4_4",
    "lemma_4_5",
    "lemma_4_1",
    "equation_14",
    "appendix_a",
]

LEMMAS = ("4.3", "4.4", "4.5")
"""Lemmas 4.3–4.5, the statements of :ref:`ch-smoothness`'s first claim rows."""

APPENDIX_A = ("A.1", "A.2", "A.3", "A.4", "A.5", "A.6")
"""Lemmas A.1–A.6, the bounds on the network's vectors inside the proof of Lemma 4.5."""

PROOF_STEPS = ("4.1", "14", *APPENDIX_A)
"""The steps inside the proof of Lemma 4.5: Lemma 4.1, eq. (14) and Lemmas A.1–A.6."""

STATEMENTS = (*LEMMAS, *PROOF_STEPS)
"""Every statement of :ref:`ch-smoothness`: :data:`LEMMAS` and :data:`PROOF_STEPS`."""


# --------------------------------------------------------------------------------- the right-hand sides
def log_lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """log of Lemma 4.3's bound ``d_max^{1/2} ‖W2−W1‖ Σ_{k=0}^{L−1} Σ_{j=0}^{L−k−1} ‖W1‖^j ‖W2‖^k``.

    Paper A, Lemma 4.3, the change of the output (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)`` (broadcastable; numbers follow the tensors).
    L
        The depth, ``≥ 2``.
    d_max
        The largest width ``max{d_0, …, d_L}``.

    Returns
    -------
    Tensor
        ``(E,)``, the logarithm of the bound.
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return 0.5 * math.log(d_max) + torch.log(r) + log_double_sum(norm_w1, norm_w2, L - 1)


def lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """Lemma 4.3's right-hand side: ``|F(x;W2) − F(x;W1)| ≤`` this for every input ``‖x‖ ≤ √d``.

    Paper A, Lemma 4.3 (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    L, d_max
        The depth (``≥ 2``) and the largest width.

    Returns
    -------
    Tensor
        ``(E,)``, ``exp`` of :func:`log_lemma_4_3_rhs`.
    """
    return torch.exp(log_lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L, d_max))


def log_lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """log of Lemma 4.4's bound ``4 d_max L³ ‖W2−W1‖ Σ_{j=0}^{2L−2} ‖W1‖^j Σ_{k=0}^{2L−j−2} ‖W2‖^k``.

    Paper A, Lemma 4.4, the change of the output's gradient (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    L, d_max
        The depth (``≥ 2``) and the largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the logarithm of the bound.
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return math.log(4 * d_max * L**3) + torch.log(r) + log_double_sum(norm_w1, norm_w2, 2 * L - 2)


def lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """Lemma 4.4's right-hand side: ``‖∇_W F(x;W2) − ∇_W F(x;W1)‖ ≤`` this for every input ``‖x‖ ≤ √d``.

    Paper A, Lemma 4.4 (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    L, d_max
        The depth (``≥ 2``) and the largest width.

    Returns
    -------
    Tensor
        ``(E,)``, ``exp`` of :func:`log_lemma_4_4_rhs`.
    """
    return torch.exp(log_lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L, d_max))


def log_lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L: int, d_max: int, c_J: float = deepnet.C_J) -> Tensor:
    """log of Lemma 4.5's bound
    ``8 c_J d_max L³ ‖W2−W1‖ (1 + 𝓛(W1)^{1/2}) Σ_{j=0}^{2L−2} ‖W1‖^j Σ_{i=0}^{2L−j−2} ‖W2‖^i``.

    Paper A, Lemma 4.5, double polynomial smoothness (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    loss_w1
        ``𝓛(W1) ≥ 0``, ``(E,)``.
    L, d_max
        The depth (``≥ 2``) and the largest width.
    c_J
        The loss constant of Assumption 3.4 (``2`` for the squared loss).

    Returns
    -------
    Tensor
        ``(E,)``, the logarithm of the bound.
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    norm_w1, norm_w2, r, loss = _same_device_norms(
        norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff, loss_w1=loss_w1
    ).values()
    return (
        math.log(8 * c_J * d_max * L**3)
        + torch.log(r)
        + torch.log1p(torch.sqrt(loss))
        + log_double_sum(norm_w1, norm_w2, 2 * L - 2)
    )


def lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L: int, d_max: int, c_J: float = deepnet.C_J) -> Tensor:
    """Lemma 4.5's right-hand side: ``‖∇𝓛(W2) − ∇𝓛(W1)‖ ≤`` this.

    Paper A, Lemma 4.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff, loss_w1
        ``‖W1‖``, ``‖W2‖``, ``‖W2 − W1‖`` and ``𝓛(W1)``, ``(E,)``.
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.

    Returns
    -------
    Tensor
        ``(E,)``, ``exp`` of :func:`log_lemma_4_5_rhs`.
    """
    return torch.exp(log_lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L, d_max, c_J))


def log_local_smoothness_bound(norm_w, loss, L: int, d_max: int, c_J: float = deepnet.C_J) -> Tensor:
    """log of Lemma 4.5 divided by ``‖W2 − W1‖`` in the limit ``W2 → W1 = W``: a bound on ``‖∇²𝓛(W)‖_op``,
    ``8 c_J d_max L³ (1 + 𝓛(W)^{1/2}) Σ_{j+i ≤ 2L−2} ‖W‖^{j+i}``.

    Paper A, Lemma 4.5 (:ref:`ch-smoothness`, the Hessian along rays).

    Parameters
    ----------
    norm_w, loss
        ``‖W‖`` and ``𝓛(W)``, ``(E,)``.
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.

    Returns
    -------
    Tensor
        ``(E,)``, the logarithm of the bound.
    """
    return log_lemma_4_5_rhs(norm_w, norm_w, torch.ones_like(_norm("norm_w", norm_w)), loss, L, d_max, c_J)


def gradient_norm_bound(norm_w, L: int, d_max: int) -> Tensor:
    """Eq. (14) of Appendix A: ``‖∇_W F(x;W)‖ ≤ d_max^{1/2} L Σ_{k=0}^{L−1} ‖W‖^k`` for every input ``‖x‖ ≤ √d``.

    Paper A, eq. (14) in the proof of Lemma 4.5 (:ref:`ch-smoothness`; along GD trajectories in :ref:`ch-descent`
    and :ref:`ch-rate`).

    Parameters
    ----------
    norm_w
        ``‖W‖``, ``(E,)`` (any shape).
    L, d_max
        The depth (``≥ 2``) and the largest width.

    Returns
    -------
    Tensor
        The bound, of ``norm_w``'s shape.
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + math.log(L) + log_power_sum(norm_w, L - 1))


def lemma_a1_rhs(norm_w, ell: int, d_max: int) -> Tensor:
    """Lemma A.1: ``‖z_ℓ(W)‖ ≤ d_max^{1/2} Σ_{i=1}^{ℓ} ‖W‖^i`` for one input with ``‖x‖ ≤ √d``.

    Paper A, Lemma A.1, the pre-activations (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w
        ``‖W‖``, ``(E,)``.
    ell
        The layer ``ℓ ≥ 1``.
    d_max
        The largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.
    """
    _check_ell(ell)
    d_max = _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + log_power_sum(norm_w, ell - 1, offset=1))


def lemma_a2_rhs(norm_w1, norm_w2, norm_diff, ell: int, d_max: int) -> Tensor:
    """Lemma A.2: ``‖z_ℓ(W2) − z_ℓ(W1)‖ ≤ d_max^{1/2} ‖W2−W1‖ Σ_{k=0}^{ℓ−1} Σ_{j=0}^{ℓ−k−1} ‖W1‖^j ‖W2‖^k``.
    At ``ℓ = L`` it is Lemma 4.3's polynomial.

    Paper A, Lemma A.2, the change of the pre-activations (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    ell
        The layer ``ℓ ≥ 1``.
    d_max
        The largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.
    """
    _check_ell(ell)
    d_max = _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return torch.exp(0.5 * math.log(d_max) + torch.log(r) + log_double_sum(norm_w1, norm_w2, ell - 1))


def lemma_a3_rhs(norm_w, ell: int, d_max: int) -> Tensor:
    """Lemma A.3: ``‖h_ℓ(W)‖ ≤ d_max^{1/2} Σ_{k=0}^{ℓ} ‖W‖^k`` (``ℓ ≥ 0``, ``h_0 = x``).

    Paper A, Lemma A.3, the activations (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w
        ``‖W‖``, ``(E,)``.
    ell
        The layer ``ℓ ≥ 0``.
    d_max
        The largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.
    """
    _check_ell(ell, lowest=0)
    d_max = _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + log_power_sum(norm_w, ell))


def lemma_a4_rhs(norm_w1, norm_w2, norm_diff, ell: int, d_max: int) -> Tensor:
    """Lemma A.4: ``‖h_ℓ(W2) − h_ℓ(W1)‖ ≤`` Lemma A.2's right-hand side for ``ℓ ≥ 1`` (σ is ``c_2``-Lipschitz with
    ``c_2 ≤ 1``) and ``= 0`` for ``ℓ = 0``.

    Paper A, Lemma A.4, the change of the activations (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    ell
        The layer ``ℓ ≥ 0``.
    d_max
        The largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the bound (zeros at ``ℓ = 0``).
    """
    _check_ell(ell, lowest=0)
    if ell == 0:
        norm_w1, _, _ = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
        return torch.zeros_like(norm_w1)
    return lemma_a2_rhs(norm_w1, norm_w2, norm_diff, ell, d_max)


def lemma_a5_rhs(norm_w, ell: int, L: int) -> Tensor:
    """Lemma A.5: ``‖δ_ℓ(W)‖ ≤ ‖W‖^{L−ℓ}`` for ``ℓ = 1..L``.

    Paper A, Lemma A.5, the backward vectors of Lemma 4.2 (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w
        ``‖W‖``, ``(E,)``.
    ell
        The layer, ``1 ≤ ℓ ≤ L``.
    L
        The depth, ``≥ 2``.

    Returns
    -------
    Tensor
        ``(E,)``, the bound (``1`` at ``ℓ = L``, also where ``‖W‖ = 0``).
    """
    L = _check_L(L)
    _check_ell(ell, L)
    (norm_w,) = _same_device_norms(norm_w=norm_w).values()
    return torch.exp(log_power_sum(norm_w, 0, offset=L - ell))


def lemma_a6_exponents(ell: int, L: int) -> list[tuple[int, int]]:
    """The exponent pairs ``(j, i)`` of ``‖W1‖^j ‖W2‖^i`` in Lemma A.6's bracket, with repetition.

    Paper A, Lemma A.6 (:ref:`ch-smoothness`). ``ℓ = L``: Lemma A.2's ``{j + i ≤ L − 1}``. ``ℓ < L``:
    ``Σ_{k=ℓ}^{L} Σ_{i=k−ℓ}^{2k−1−ℓ} Σ_{j=L−k}^{L−i+k−ℓ−1}`` plus ``Σ_{k=0}^{L−ℓ−1}`` with ``(j, i) = (L−k−ℓ−1, k)``.

    Parameters
    ----------
    ell
        The layer, ``1 ≤ ℓ ≤ L``.
    L
        The depth, ``≥ 2``.

    Returns
    -------
    list of tuple of int
        The pairs ``(j, i)``, a pair listed as often as the printed sums produce it.
    """
    L = _check_L(L)
    _check_ell(ell, L)
    if ell == L:
        return [(j, k) for k in range(L) for j in range(L - k)]
    out = [(j, i) for k in range(ell, L + 1) for i in range(k - ell, 2 * k - ell) for j in range(L - k, L - i + k - ell)]
    return out + [(L - k - ell - 1, k) for k in range(L - ell)]


def lemma_a6_rhs(norm_w1, norm_w2, norm_diff, ell: int, L: int, d_max: int) -> Tensor:
    """Lemma A.6: ``‖δ_ℓ(W2) − δ_ℓ(W1)‖ ≤ d_max^{1/2} ‖W2−W1‖ [ … ]`` with the bracket of
    :func:`lemma_a6_exponents` (at ``ℓ = L`` the bound of Lemma A.2 at ``ℓ = L``).

    Paper A, Lemma A.6, the change of the backward vectors (:ref:`ch-smoothness`).

    Parameters
    ----------
    norm_w1, norm_w2, norm_diff
        ``‖W1‖``, ``‖W2‖`` and ``‖W2 − W1‖``, ``(E,)``.
    ell
        The layer, ``1 ≤ ℓ ≤ L``.
    L, d_max
        The depth (``≥ 2``) and the largest width.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.
    """
    d_max = _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return torch.exp(0.5 * math.log(d_max) + torch.log(r) + log_exponent_sum(norm_w1, norm_w2, lemma_a6_exponents(ell, L)))


def lemma_4_1_rhs(output_change, grad_norm_w2, residual_w1, grad_change, c_J: float = deepnet.C_J) -> Tensor:
    """Lemma 4.1's right-hand side for the squared loss,
    ``(c_J/n) Σ_i |F(x_i;W2) − F(x_i;W1)| ‖∇_W F(x_i;W2)‖ + (2/n) Σ_i |F(x_i;W1) − y_i| ‖∇_W F(x_i;W2) − ∇_W F(x_i;W1)‖``
    (``|J_i'(u)| = 2|u − y_i|``; the paper writes ``2/n`` for both, ``c_J = 2``).

    Paper A, Lemma 4.1 (:ref:`ch-smoothness`).

    Parameters
    ----------
    output_change
        ``|F(x_i;W2) − F(x_i;W1)|``, ``(E, n)``.
    grad_norm_w2
        ``‖∇_W F(x_i;W2)‖``, ``(E, n)``.
    residual_w1
        ``|F(x_i;W1) − y_i|``, ``(E, n)``.
    grad_change
        ``‖∇_W F(x_i;W2) − ∇_W F(x_i;W1)‖``, ``(E, n)``.
    c_J
        The loss constant of Assumption 3.4.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.

    Raises
    ------
    ValueError
        When the four per-sample quantities do not share one shape ``(E, n)``.
    """
    c_J = _check_cJ(c_J)
    t = _same_device_norms(
        output_change=output_change, grad_norm_w2=grad_norm_w2, residual_w1=residual_w1, grad_change=grad_change
    )
    shapes = {tuple(v.shape) for v in t.values()}
    if len(shapes) != 1 or t["output_change"].ndim != 2:
        raise ValueError(f"the four per-sample quantities must share one shape (E, n), got {sorted(shapes)}")
    return (c_J * t["output_change"] * t["grad_norm_w2"] + 2.0 * t["residual_w1"] * t["grad_change"]).mean(-1)


# ---------------------------------------------------------------- the lemmas on actual networks (LHS, RHS)
@dataclass
class Comparison:
    """Both sides of one statement on an ensemble; the statement says ``lhs ≤ rhs``.

    Paper A's lemmas as evaluated by :func:`lemma_4_3` … :func:`appendix_a` (:ref:`ch-smoothness`) and
    :func:`companion.descent.lemma_4_6` (:ref:`ch-descent`).

    Attributes
    ----------
    lhs
        ``(E,)``, or ``(E, n)`` per sample (Lemmas 4.3/4.4, eq. (14)), or ``(E, n, K)`` per sample and layer
        (Lemmas A.1–A.6).
    rhs
        ``(E,)`` or ``(E, 1, K)``, broadcasting against ``lhs``.
    """

    lhs: Tensor
    rhs: Tensor

    @property
    def ratio(self) -> Tensor:
        """``lhs / rhs`` broadcast to ``lhs``'s shape (``≤ 1`` where the statement holds); ``0/0`` (both sides exactly
        zero) counts as 0: the inequality holds there.

        Returns
        -------
        Tensor
            The ratio, of ``lhs``'s shape.
        """
        rhs = self.rhs.view(*self.rhs.shape, *([1] * (self.lhs.ndim - self.rhs.ndim)))
        out = self.lhs / rhs
        return torch.where((self.lhs == 0) & (rhs == 0), torch.zeros_like(out), out)


def lemma_4_3(params1, params2, X: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.3 for every member and sample: ``lhs = |F(x_i;W2) − F(x_i;W1)|``, ``rhs`` =
    :func:`lemma_4_3_rhs`. Raises ``ValueError`` for a non-smooth σ or data outside ``‖x‖ ≤ √d``.

    Paper A, Lemma 4.3 (:ref:`ch-smoothness`).

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E, n)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params1, params2, X, None)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    lhs = (deepnet.forward(p2, X, act) - deepnet.forward(p1, X, act)).abs()
    return Comparison(lhs, lemma_4_3_rhs(a, b, r, len(p1), deepnet.d_max(p1)))


def lemma_4_4(params1, params2, X: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.4: ``lhs = ‖∇_W F(x_i;W2) − ∇_W F(x_i;W1)‖``, ``rhs`` = :func:`lemma_4_4_rhs`.
    Gradients by Lemma 4.2's recursion (:func:`companion.deepnet.output_gradient`).

    Paper A, Lemma 4.4 (:ref:`ch-smoothness`).

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E, n)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params1, params2, X, None)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    g1, g2 = deepnet.output_gradient(p1, X, act), deepnet.output_gradient(p2, X, act)
    lhs = torch.sqrt(sum(((u - v) ** 2).flatten(2).sum(-1) for u, v in zip(g1, g2)))
    return Comparison(lhs, lemma_4_4_rhs(a, b, r, len(p1), deepnet.d_max(p1)))


def lemma_4_5(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.5: ``lhs = ‖∇𝓛(W2) − ∇𝓛(W1)‖``, ``rhs`` = :func:`lemma_4_5_rhs`.

    Paper A, Lemma 4.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E,)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params1, params2, X, y)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    l1, g1 = deepnet.loss_and_gradient(p1, X, y, act)
    _, g2 = deepnet.loss_and_gradient(p2, X, y, act)
    lhs = torch.sqrt(sum(((u - v) ** 2).flatten(1).sum(-1) for u, v in zip(g1, g2)))
    return Comparison(lhs, lemma_4_5_rhs(a, b, r, l1, len(p1), deepnet.d_max(p1)))


def lemma_4_1(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.1: ``lhs = ‖∇𝓛(W2) − ∇𝓛(W1)‖`` and ``rhs`` = :func:`lemma_4_1_rhs` of the per-sample
    output changes, gradient norms and residuals. The lemma is the triangle inequality applied to
    ``∇𝓛 = (1/n) Σ_i J_i'(F_i) ∇_W F_i``, so it holds for every activation and any data; it is checked on the
    lemmas' domain all the same.

    Paper A, Lemma 4.1 (:ref:`ch-smoothness`).

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E,)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params1, params2, X, y)
    check_assumptions(act, X)
    p1, p2, *_ = _pair(params1, params2)
    f1, f2 = deepnet.forward(p1, X, act), deepnet.forward(p2, X, act)
    g1, g2 = deepnet.output_gradient(p1, X, act), deepnet.output_gradient(p2, X, act)
    _, G1 = deepnet.loss_and_gradient(p1, X, y, act)
    _, G2 = deepnet.loss_and_gradient(p2, X, y, act)
    lhs = _grad_norms([b - a for a, b in zip(G1, G2)], 1)
    rhs = lemma_4_1_rhs((f2 - f1).abs(), _grad_norms(g2, 2), (f1 - y).abs(), _grad_norms([b - a for a, b in zip(g1, g2)], 2))
    return Comparison(lhs, rhs)


def equation_14(params, X: Tensor, act) -> Comparison:
    """Both sides of eq. (14): ``lhs = ‖∇_W F(x_i; W)‖`` and ``rhs`` = :func:`gradient_norm_bound`.

    Paper A, eq. (14) in the proof of Lemma 4.5 (:ref:`ch-smoothness`; along GD trajectories in :ref:`ch-descent`
    and :ref:`ch-rate`).

    Parameters
    ----------
    params
        ``W``, a list of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E, n)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params, None, X)
    check_assumptions(act, X)
    p = deepnet.check_params(params)
    _check_L(len(p))
    lhs = _grad_norms(deepnet.output_gradient(p, X, act), 2)
    return Comparison(lhs, gradient_norm_bound(deepnet.norm(p), len(p), deepnet.d_max(p)))


def appendix_a(params1, params2, X: Tensor, act) -> dict[str, Comparison]:
    """Both sides of Lemmas A.1–A.6 for every member, input and layer.

    Paper A, Lemmas A.1–A.6 (:ref:`ch-smoothness`). Vectors per input: ``z_ℓ, h_ℓ, δ_ℓ ∈ R^{d_ℓ}`` of Lemma 4.2
    (:func:`companion.deepnet.forward_all`, :func:`companion.deepnet.backward_deltas`). The layers ``K`` each lemma
    speaks of: ``ℓ = 1..L`` for A.1, A.2, A.4, A.5, A.6 and ``ℓ = 0..L`` for A.3 (``h_0 = x``; A.4 at ``ℓ = 0``
    says ``0 = 0`` and is left out). The one-parameter lemmas A.1, A.3, A.5 are evaluated at ``W1`` and at ``W2``
    (``E' = 2E``, ``W1`` first); the two-parameter lemmas A.2, A.4, A.6 on the pairs (``E' = E``). Raises
    ``ValueError`` where the lemmas do not apply.

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    dict of str to Comparison
        ``{"A.1": Comparison, …, "A.6": Comparison}``, each ``lhs`` ``(E', n, K)`` and each ``rhs`` ``(E', 1, K)``.
    """
    _check_devices(params1, params2, X)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    L, dm = len(p1), deepnet.d_max(p1)
    (z1, h1), (z2, h2) = deepnet.forward_all(p1, X, act), deepnet.forward_all(p2, X, act)
    d1, d2 = deepnet.backward_deltas(p1, z1, act), deepnet.backward_deltas(p2, z2, act)
    norm = lambda vs: torch.stack([v.norm(dim=-1) for v in vs], -1)  # (E, n, K)
    diff = lambda us, vs: norm([v - u for u, v in zip(us, vs)])
    both = lambda f, n1, n2: torch.cat([f(n1), f(n2)], 0)  # (2E, ...)
    layers = range(1, L + 1)
    stack = lambda fs: torch.stack(fs, -1).unsqueeze(1)  # (E, 1, K)
    return {
        "A.1": Comparison(both(norm, z1, z2), both(lambda n: stack([lemma_a1_rhs(n, l, dm) for l in layers]), a, b)),
        "A.2": Comparison(diff(z1, z2), stack([lemma_a2_rhs(a, b, r, l, dm) for l in layers])),
        "A.3": Comparison(both(norm, h1, h2), both(lambda n: stack([lemma_a3_rhs(n, l, dm) for l in range(L + 1)]), a, b)),
        "A.4": Comparison(diff(h1[1:], h2[1:]), stack([lemma_a4_rhs(a, b, r, l, dm) for l in layers])),
        "A.5": Comparison(both(norm, d1, d2), both(lambda n: stack([lemma_a5_rhs(n, l, L) for l in layers]), a, b)),
        "A.6": Comparison(diff(d1, d2), stack([lemma_a6_rhs(a, b, r, l, L, dm) for l in layers])),
    }


def ray_degree(s, lam, correction: int) -> Tensor:
    """Per-ray growth exponent of ``lam`` along ``s`` with a known correction removed: the least-squares fit of
    ``log lam = p log s + c + γ s^{−correction}`` for every ray (column), returning the ``p``.

    Paper A, Lemma 4.5's degree ``2L − 2`` along rays (:ref:`ch-smoothness`). For a linear network the Hessian along
    ``W = sW_0`` is exactly ``s^{2L−2} A − s^{L−2} B``, so its norm is ``s^{2L−2} ‖A‖ (1 + γ s^{−L} + O(s^{−2L}))`` and
    ``correction = L`` leaves an ``O(s^{−2L})`` error in ``p``.

    Parameters
    ----------
    s
        ``(R,)``, positive, ``R ≥ 4``.
    lam
        ``(R, E)``, positive, one ray per column.
    correction
        The power of the correction term, a positive integer.

    Returns
    -------
    Tensor
        ``(E,)``, float64 on the CPU: the exponent ``p`` of each ray.

    Raises
    ------
    ValueError
        When ``s`` or ``lam`` is not a finite tensor of its shape (``lam (R, E)`` with ``R = len(s) ≥ 4``), a value
        is not positive, or ``correction`` is not a positive int.
    """
    s = validation.tensor("s", torch.as_tensor(s, dtype=torch.float64), ndim=1)
    lam = validation.tensor("lam", torch.as_tensor(lam), ndim=2)
    if lam.shape[0] != s.shape[0] or s.shape[0] < 4:
        raise ValueError(f"lam must be (R, E) with R = len(s) >= 4, got s {tuple(s.shape)} and lam {tuple(lam.shape)}")
    if not (bool((s > 0).all()) and bool((lam > 0).all())):
        raise ValueError("ray_degree fits logarithms: s and lam must be positive")
    validation.positive_int("correction", correction)
    s = s.to(dtype=torch.float64, device="cpu")
    design = torch.stack([torch.log(s), torch.ones_like(s), s ** (-float(correction))], 1)  # (R, 3)
    scale = design.abs().amax(0)  # columns of comparable size for the solver
    coef = torch.linalg.lstsq(design / scale, torch.log(lam.to(dtype=torch.float64, device="cpu"))).solution
    return coef[0] / scale[0]


def balanced_family(params: Sequence[Tensor], s) -> list[Tensor]:
    """The balanced family ``W(s) = (s w_1, …, s w_{L−1}, s^{−(L−1)} w_L)`` of each member, for every ``s``.

    Paper A, Lemma 4.5's degree at bounded loss (:ref:`ch-smoothness`). The product of the layer scales is 1, so a
    linear network computes the same function at every ``s`` (its loss stays fixed), while
    ``‖W(s)‖ = s ‖(w_1, …, w_{L−1})‖ (1 + O(s^{−2L}))`` grows and the gradient of ``F`` in ``w_L`` grows like
    ``s^{L−1}``: the Gauss–Newton block of the last layer, hence ``‖∇²𝓛‖``, grows like ``‖W‖^{2L−2}``.

    Parameters
    ----------
    params
        ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    s
        Scales ``(S,)``, positive.

    Returns
    -------
    list of Tensor
        ``L`` tensors ``(E·S, d_ℓ, d_{ℓ−1})``, member-major (member ``e`` at scale ``s_k`` is row ``e·S + k``).

    Raises
    ------
    ValueError
        For fewer than two layers or a non-positive scale.

    Examples
    --------
    >>> import torch
    >>> W = [torch.ones(1, 2, 2), torch.ones(1, 1, 2)]
    >>> [w[:, 0, 0].tolist() for w in balanced_family(W, torch.tensor([2.0, 4.0]))]
    [[2.0, 4.0], [0.5, 0.25]]
    """
    if len(params) < 2:
        raise ValueError(f"the balanced family needs L >= 2 layers, got {len(params)}")
    s = torch.as_tensor(s, dtype=params[0].dtype, device=params[0].device).flatten()
    if s.numel() == 0 or not bool((s > 0).all()):
        raise ValueError("the scales s must be positive")
    L = len(params)
    scales = [s] * (L - 1) + [s ** (-(L - 1))]
    return [(c.view(1, -1, 1, 1) * w.unsqueeze(1)).reshape(-1, *w.shape[1:]) for c, w in zip(scales, params)]
