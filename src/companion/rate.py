"""The constants of paper A's Theorem 4.8 (Appendix A.8) and the bounds its proof derives from them.

GD with Lemma 4.7's step (:mod:`companion.descent`) gives ``min_{t<T} ‖∇𝓛(W_t)‖² ≤ 2L 𝓛(W_0) / Σ_{t<T} η_t``; the
proof bounds ``‖W_T‖^{2L−2}`` by ``α* T^{(L−1)/L} + β`` and so ``Σ_{t<T} η_t`` from below. :func:`rate_constants`
computes ``A``, ``β`` and ``α*`` for one member and returns them as :class:`RateConstants`, whose methods evaluate
the proof's bounds at given iterations. Used by :ref:`ch-rate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from . import validation
from ._paper_a import check_L as _check_L

__all__ = ["RateConstants", "rate_constants"]


@dataclass(frozen=True)
class RateConstants:
    """The constants of Theorem 4.8's proof (Appendix A.8) for one member, with ``N = 2L − 2``.

    Paper A, Theorem 4.8 (:ref:`ch-rate`). ``A = N (ρ(1 + 𝓛0^{1/2})(2L−1))^{(N−2)/(2N)} (2L𝓛0)^{1/2}``,
    ``B = β = ‖W0‖^N + Σ_{k=2}^N C(N,k)(2L𝓛0)^{k/2}``, ``α*`` the smallest ``α`` with
    ``A((1+β)^{(N−2)/(2N)} + α^{(N−2)/(2N)}) ≤ α``. The proof's conclusions: ``‖W_T‖^N ≤ α* T^{(L−1)/L} + β`` and
    ``η_t ≥ 1/D̄_t``, ``D̄_t = ρ(1+𝓛0^{1/2})(2L−1)(1 + α* t^{(L−1)/L} + β)``.

    Attributes
    ----------
    L
        The depth.
    rho
        The ``ρ`` of the step taken (``ρ/κ`` for the step ``κ η_t``).
    A, beta, alpha
        ``A``, ``β`` and ``α*``.
    loss0
        ``𝓛(W_0)``.
    """

    L: int
    rho: float
    A: float
    beta: float
    alpha: float
    loss0: float

    def norm_power_bound(self, T) -> Tensor:
        """``α* T^{(L−1)/L} + β``: the proof's bound on ``‖W_T‖^{2L−2}``.

        Parameters
        ----------
        T
            Iterations, any shape.

        Returns
        -------
        Tensor
            The bound, of ``T``'s shape (float64).
        """
        T = torch.as_tensor(T, dtype=torch.float64)
        return self.alpha * T ** ((self.L - 1) / self.L) + self.beta

    def eta_lower_bound(self, t) -> Tensor:
        """``1/D̄_t``, the proof's lower bound on ``η_t``.

        Parameters
        ----------
        t
            Iterations, any shape.

        Returns
        -------
        Tensor
            The bound, of ``t``'s shape (float64).
        """
        t = torch.as_tensor(t, dtype=torch.float64)
        return 1.0 / (self.rho * (1 + math.sqrt(self.loss0)) * (2 * self.L - 1) * (1 + self.norm_power_bound(t)))

    def eta_sum_lower_bound(self, T: int) -> Tensor:
        """``Σ_{t<T'} 1/D̄_t`` for ``T' = 1..T``: the proof's lower bound on ``Σ_{t<T'} η_t``.

        Parameters
        ----------
        T
            The number of iterations.

        Returns
        -------
        Tensor
            ``(T,)``, float64.
        """
        return torch.cumsum(self.eta_lower_bound(torch.arange(T, dtype=torch.float64)), 0)


def rate_constants(L: int, rho_value: float, loss0: float, norm_w0: float) -> RateConstants:
    """Theorem 4.8's constants ``A, β, α*`` (Appendix A.8) for one member.

    Paper A, Theorem 4.8 (:ref:`ch-rate`). ``α*`` is found by bisection on ``α − A((1+β)^p + α^p)``,
    ``p = (N−2)/(2N)`` (``α* = 2A`` at ``N = 2``).

    Parameters
    ----------
    L
        The depth, ``≥ 2``.
    rho_value
        The ``ρ`` of the step actually used (``ρ/κ`` for the rescaled step ``κ η_t``; the proof needs ``ρ ≥ 1``).
    loss0
        ``𝓛(W_0) ≥ 0``.
    norm_w0
        ``‖W_0‖ ≥ 0``.

    Returns
    -------
    RateConstants
        The constants, with the proof's bounds as methods.

    Raises
    ------
    ValueError
        When ``rho_value < 1``, or ``loss0`` or ``norm_w0`` is negative or not finite.
    """
    L = _check_L(L)
    if not rho_value >= 1:
        raise ValueError(f"the proof of Theorem 4.8 uses rho >= 1 (so that eta_t <= 1); got {rho_value}")
    loss0, norm_w0 = validation.nonnegative("loss0", loss0), validation.nonnegative("norm_w0", norm_w0)
    N = 2 * L - 2
    A = N * (rho_value * (1 + math.sqrt(loss0)) * (2 * L - 1)) ** ((N - 2) / (2 * N)) * math.sqrt(2 * L * loss0)
    beta = norm_w0**N + sum(math.comb(N, k) * (2 * L * loss0) ** (k / 2) for k in range(2, N + 1))
    p = (N - 2) / (2 * N)
    if p == 0:  # N = 2: A (1 + 1) <= alpha
        alpha = 2 * A
    else:  # smallest alpha with g(alpha) = alpha - A((1+beta)^p + alpha^p) >= 0; g is increasing past its minimum
        g = lambda a: a - A * ((1 + beta) ** p + a**p)
        hi = max(1.0, 2 * A * (1 + beta) ** p)
        while g(hi) < 0:
            hi *= 2
        lo = 0.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if g(mid) < 0 else (lo, mid)
        alpha = hi
    return RateConstants(L=L, rho=rho_value, A=A, beta=beta, alpha=alpha, loss0=loss0)
