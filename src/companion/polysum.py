"""Log-space sums of monomials in norms: the polynomials of paper A's bounds.

Every right-hand side of paper A's Lemmas 4.3–4.7 and A.1–A.6 is a polynomial with positive coefficients in norms
such as ``a = ‖W1‖`` and ``b = ‖W2‖``. The functions here return its logarithm, a ``logsumexp`` of
``j log a + k log b`` (plus the log of each coefficient), so that nothing overflows even where a power would, with
the convention ``0 · log 0 = 0`` (``x^0 = 1`` even at ``x = 0``):

* :func:`log_double_sum` — ``Σ_{j+k ≤ degree} a^j b^k`` (Lemma 4.3 at ``degree = L − 1``, Lemmas 4.4–4.5 at
  ``2L − 2``);
* :func:`log_power_sum` — a weighted sum of powers of one norm (Lemmas 4.6–4.7, eq. (14), Lemmas A.1, A.3, A.5);
* :func:`log_exponent_sum` — a sum over a list of exponent pairs, repeats counted (Lemma A.6).

Inputs are norms (tensors ``≥ 0``, or Python numbers, on one device), elementwise over any broadcast shape; the
output has the broadcast shape. :mod:`companion.smoothness` and :mod:`companion.descent` build on them; the chapters
that use them are :ref:`ch-smoothness`, :ref:`ch-descent` and :ref:`ch-rate`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from ._paper_a import norm as _norm
from ._paper_a import same_device_norms as _same_device_norms

__all__ = ["log_double_sum", "log_power_sum", "log_exponent_sum"]


def _logpow(logx: Tensor, k: int) -> Tensor:
    """``k log x`` with the convention ``0 · log 0 = 0`` (so ``x^0 = 1`` even at ``x = 0``)."""
    return torch.zeros_like(logx) if k == 0 else k * logx


def log_double_sum(a, b, degree: int) -> Tensor:
    """``log Σ_{j,k ≥ 0, j+k ≤ degree} a^j b^k``, elementwise.

    The polynomial of paper A's Lemma 4.3 (``degree = L − 1``) and Lemmas 4.4–4.5 (``degree = 2L − 2``),
    :ref:`ch-smoothness`.

    Parameters
    ----------
    a, b
        Norms, tensors ``≥ 0`` of broadcastable shapes (or numbers).
    degree
        The largest total degree ``j + k``, ``≥ 0``.

    Returns
    -------
    Tensor
        The logarithm of the sum, of the broadcast shape of ``a`` and ``b``.
    """
    a, b = _same_device_norms(a=a, b=b).values()
    la, lb = torch.broadcast_tensors(torch.log(a), torch.log(b))
    terms = [_logpow(la, j) + _logpow(lb, k) for j in range(degree + 1) for k in range(degree + 1 - j)]
    return torch.logsumexp(torch.stack(terms), dim=0)


def log_power_sum(a, degree: int, offset: int = 0, weights: Sequence[float] | None = None) -> Tensor:
    """``log Σ_{k=0}^{degree} w_k a^{k + offset}`` (``w_k = 1`` by default), elementwise.

    The single sums of paper A's Lemma 4.6 (``Σ_{i ≤ 2L−2} ‖W1‖^i`` and ``Σ_k ‖W2 − W1‖^{k+2}/(k+2)``, :ref:`ch-descent`),
    Lemma 4.7's step (:ref:`ch-descent`), eq. (14) and Lemmas A.1, A.3, A.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    a
        A norm, a tensor ``≥ 0`` of any shape (or a number).
    degree
        The number of terms less one, ``≥ 0``.
    offset
        The power of the first term.
    weights
        ``degree + 1`` positive weights ``w_k``; ``None`` for all ones.

    Returns
    -------
    Tensor
        The logarithm of the sum, of ``a``'s shape.
    """
    a = _norm("a", a)
    la = torch.log(a)
    w = [1.0] * (degree + 1) if weights is None else list(weights)
    terms = [math.log(w[k]) + _logpow(la, k + offset) for k in range(degree + 1)]
    return torch.logsumexp(torch.stack(terms), dim=0)


def log_exponent_sum(a, b, exponents: Sequence[tuple[int, int]]) -> Tensor:
    """``log Σ_{(j, k)} a^j b^k`` over a list of exponent pairs, a pair listed twice counted twice, elementwise.

    The polynomials of paper A's Lemmas A.1–A.6 in their stated index form (Lemma A.6's bracket,
    :func:`companion.smoothness.lemma_a6_exponents`), :ref:`ch-smoothness`.

    Parameters
    ----------
    a, b
        Norms, tensors ``≥ 0`` of broadcastable shapes (or numbers).
    exponents
        The pairs ``(j, k)``, at least one.

    Returns
    -------
    Tensor
        The logarithm of the sum, of the broadcast shape of ``a`` and ``b``.

    Raises
    ------
    ValueError
        When ``exponents`` is empty.
    """
    a, b = _same_device_norms(a=a, b=b).values()
    if len(exponents) == 0:
        raise ValueError("need at least one exponent pair")
    la, lb = torch.broadcast_tensors(torch.log(a), torch.log(b))
    counts = Counter((int(j), int(k)) for j, k in exponents)
    terms = [math.log(c) + _logpow(la, j) + _logpow(lb, k) for (j, k), c in sorted(counts.items())]
    return torch.logsumexp(torch.stack(terms), dim=0)
