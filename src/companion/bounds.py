"""Paper A's bounds exactly as stated: Lemmas 4.3–4.7 and the constants of Theorem 4.8 (Chapters 2–4).

Every right-hand side is a polynomial in the norms ``a = ‖W1‖``, ``b = ‖W2‖``, ``r = ‖W2 − W1‖`` (Frobenius
norms of the block-diagonal ``W``, :func:`companion.deepnet.norm`) with constants in ``L``, ``d_max`` and ``c_J``.
The functions take those norms as tensors with a leading ensemble axis ``(E,)`` (any broadcastable shape works)
and return one value per member. Sums are evaluated in log space (``logsumexp`` of ``j log a + k log b``),
so nothing overflows even where a power would; ``log_*`` variants return the logarithm itself.

Conventions fixed from the paper's text (Appendix A; see Chapter 2 for the discussion):

* ``d_max = max{d_0, …, d_L}`` *includes* the input dimension ``d_0 = d`` (Section 3, and Lemma A.2's
  ``c_x d^{1/2} ≤ d_max^{1/2}``), as :func:`companion.deepnet.d_max` computes it.
* The double sums of Lemmas 4.4/4.5 run over ``{(j, k): j, k ≥ 0, j + k ≤ 2L − 2}``; Lemma 4.3's over
  ``j + k ≤ L − 1``. Both index sets are symmetric, so the two orders of summation written in the paper
  (``Σ_j ‖W1‖^j Σ_k ‖W2‖^k`` and its exchange at the end of A.4) are the same polynomial.
* ``c_J = 2`` for the squared loss (:data:`companion.deepnet.C_J`).

The lemma-level functions (:func:`lemma_4_3`, :func:`lemma_4_4`, :func:`lemma_4_5`, :func:`lemma_4_6`)
evaluate both sides on actual networks, and refuse (``ValueError``) where the lemmas do not apply: a
non-smooth activation (ReLU) or data violating Assumption 3.2 (``‖x_i‖ ≤ √d``).

Lemma 4.7's adaptive step is a :data:`companion.gd.StepRule` (:func:`adaptive_step`), with the quantities
Theorem 4.8's proof tracks recorded through :func:`observers`.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from . import activations, deepnet, gd, validation
from .device import rand, randn

C_J = deepnet.C_J


# ----------------------------------------------------------------------------------------------- checks
def _check_L(L: int) -> int:
    if isinstance(L, bool) or not isinstance(L, int) or L < 2:
        raise ValueError(f"paper A's bounds need an integer depth L >= 2, got {L!r}")
    return L


def _check_dmax(d_max: int) -> int:
    if isinstance(d_max, bool) or not isinstance(d_max, int) or d_max < 1:
        raise ValueError(f"d_max must be a positive integer, got {d_max!r}")
    return d_max


def _check_cJ(c_J: float) -> float:
    c = float(c_J)
    if not (c >= 1 and math.isfinite(c)):
        raise ValueError(f"Assumption 3.4 takes c_J >= 1 (finite), got {c_J!r}")
    return c


def _norm(name: str, x) -> Tensor:
    x = torch.as_tensor(x, dtype=torch.float64) if not isinstance(x, Tensor) else x
    validation.tensor(name, x)
    if bool((x < 0).any()):
        raise ValueError(f"{name} is a norm and must be >= 0")
    return x


def _same_device_norms(**named) -> dict[str, Tensor]:
    """Norm arguments as tensors on one device: Python numbers follow the first tensor; tensors on two
    devices raise ``ValueError`` naming both."""
    tensors = {k: v for k, v in named.items() if isinstance(v, Tensor)}
    if len(tensors) > 1:
        first, t0 = next(iter(tensors.items()))
        for k, t in tensors.items():
            if t.device != t0.device:
                raise ValueError(f"{k} is on {t.device} but {first} is on {t0.device}")
    ref = next(iter(tensors.values()), None)
    out = {}
    for k, v in named.items():
        if not isinstance(v, Tensor):
            v = torch.as_tensor(v, dtype=torch.float64 if ref is None else ref.dtype, device=None if ref is None else ref.device)
        out[k] = _norm(k, v)
    return out


def _check_devices(params1, params2=None, X=None, y=None) -> None:
    """Parameters, data and targets on one device with one dtype (``ValueError`` naming both otherwise)."""
    named = {}
    if isinstance(params1, (list, tuple)) and params1 and isinstance(params1[0], Tensor):
        named["W1"] = params1[0]
    if isinstance(params2, (list, tuple)) and params2 and isinstance(params2[0], Tensor):
        named["W2"] = params2[0]
    if isinstance(X, Tensor):
        named["X"] = X
    if isinstance(y, Tensor):
        named["y"] = y
    if len(named) > 1:
        validation.same_device(**named)


def check_assumptions(act, X: Tensor | None = None, c_x: float = 1.0):
    """Raise ``ValueError`` unless paper A's lemmas apply: σ smooth (Assumption 3.1) with constants ≤ 1
    (3.3), and, if data are given, ``‖x_i‖ ≤ c_x √d`` with ``c_x ≤ 1`` (3.2–3.3). Returns the activation.

    Paper A, Assumptions 3.1–3.3 (Chapter 1; used by every bound of Chapters 2–4).
    """
    sigma = activations.get(act).require_smooth()
    if max(sigma.constants().values()) > 1:
        raise ValueError(f"activation {sigma.name!r} violates Assumption 3.3 (a constant exceeds 1)")
    if not 0 < float(c_x) <= 1:
        raise ValueError(f"Assumption 3.3 needs 0 < c_x <= 1, got {c_x!r}")
    if X is not None:
        deepnet.check_assumption_3_2(X, c_x)
    return sigma


# ------------------------------------------------------------------------------------ polynomial sums
def _log(x: Tensor) -> Tensor:
    return torch.log(x)  # log 0 = -inf is handled by _logpow


def _logpow(logx: Tensor, k: int) -> Tensor:
    """``k log x`` with the convention ``0 · log 0 = 0`` (so ``x^0 = 1`` even at ``x = 0``)."""
    return torch.zeros_like(logx) if k == 0 else k * logx


def log_double_sum(a, b, degree: int) -> Tensor:
    """``log Σ_{j,k ≥ 0, j+k ≤ degree} a^j b^k`` elementwise over broadcast ``a``, ``b`` (any shape).

    The polynomial of Lemma 4.3 (``degree = L − 1``) and of Lemmas 4.4/4.5 (``degree = 2L − 2``).
    """
    a, b = _same_device_norms(a=a, b=b).values()
    la, lb = torch.broadcast_tensors(_log(a), _log(b))
    terms = [_logpow(la, j) + _logpow(lb, k) for j in range(degree + 1) for k in range(degree + 1 - j)]
    return torch.logsumexp(torch.stack(terms), dim=0)


def log_power_sum(a, degree: int, offset: int = 0, weights: Sequence[float] | None = None) -> Tensor:
    """``log Σ_{k=0}^{degree} w_k a^{k + offset}`` (``w_k = 1`` by default), elementwise."""
    a = _norm("a", a)
    la = _log(a)
    w = [1.0] * (degree + 1) if weights is None else list(weights)
    terms = [math.log(w[k]) + _logpow(la, k + offset) for k in range(degree + 1)]
    return torch.logsumexp(torch.stack(terms), dim=0)


# --------------------------------------------------------------------------------- the right-hand sides
def log_lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """log of Lemma 4.3's bound ``d_max^{1/2} ‖W2−W1‖ Σ_{k=0}^{L−1} Σ_{j=0}^{L−k−1} ‖W1‖^j ‖W2‖^k``.

    Paper A, Lemma 4.3 (Chapter 2). Inputs ``(E,)`` norms; output ``(E,)``.
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return 0.5 * math.log(d_max) + _log(r) + log_double_sum(norm_w1, norm_w2, L - 1)


def lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """Lemma 4.3's right-hand side, ``|F(x;W2) − F(x;W1)| ≤`` this, shape ``(E,)``. Paper A, Lemma 4.3 (Chapter 2)."""
    return torch.exp(log_lemma_4_3_rhs(norm_w1, norm_w2, norm_diff, L, d_max))


def log_lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """log of Lemma 4.4's bound ``4 d_max L³ ‖W2−W1‖ Σ_{j=0}^{2L−2} ‖W1‖^j Σ_{k=0}^{2L−j−2} ‖W2‖^k``.

    Paper A, Lemma 4.4 (Chapter 2). Inputs ``(E,)`` norms; output ``(E,)``.
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return math.log(4 * d_max * L**3) + _log(r) + log_double_sum(norm_w1, norm_w2, 2 * L - 2)


def lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L: int, d_max: int) -> Tensor:
    """Lemma 4.4's right-hand side, ``‖∇_W F(x;W2) − ∇_W F(x;W1)‖ ≤`` this. Paper A, Lemma 4.4 (Chapter 2)."""
    return torch.exp(log_lemma_4_4_rhs(norm_w1, norm_w2, norm_diff, L, d_max))


def log_lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L: int, d_max: int, c_J: float = C_J) -> Tensor:
    """log of Lemma 4.5's bound
    ``8 c_J d_max L³ ‖W2−W1‖ (1 + 𝓛(W1)^{1/2}) Σ_{j=0}^{2L−2} ‖W1‖^j Σ_{i=0}^{2L−j−2} ‖W2‖^i``.

    Paper A, Lemma 4.5, double polynomial smoothness (Chapter 2). Inputs ``(E,)``; output ``(E,)``.
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    norm_w1, norm_w2, r, loss = _same_device_norms(
        norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff, loss_w1=loss_w1
    ).values()
    return (
        math.log(8 * c_J * d_max * L**3) + _log(r) + torch.log1p(torch.sqrt(loss)) + log_double_sum(norm_w1, norm_w2, 2 * L - 2)
    )


def lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L: int, d_max: int, c_J: float = C_J) -> Tensor:
    """Lemma 4.5's right-hand side, ``‖∇𝓛(W2) − ∇𝓛(W1)‖ ≤`` this. Paper A, Lemma 4.5 (Chapter 2)."""
    return torch.exp(log_lemma_4_5_rhs(norm_w1, norm_w2, norm_diff, loss_w1, L, d_max, c_J))


def log_local_smoothness_bound(norm_w, loss, L: int, d_max: int, c_J: float = C_J) -> Tensor:
    """log of Lemma 4.5 divided by ``‖W2 − W1‖`` in the limit ``W2 → W1 = W``: a bound on ``‖∇²𝓛(W)‖_op``,
    ``8 c_J d_max L³ (1 + 𝓛(W)^{1/2}) Σ_{j+i ≤ 2L−2} ‖W‖^{j+i}``.

    Paper A, Lemma 4.5 (Chapter 2, the Hessian along rays). Inputs ``(E,)``; output ``(E,)``.
    """
    return log_lemma_4_5_rhs(norm_w, norm_w, torch.ones_like(_norm("norm_w", norm_w)), loss, L, d_max, c_J)


def lemma_4_6_C(L: int, d_max: int, c_J: float = C_J) -> float:
    """``C = 2^{2L+2} c_J d_max L⁴``. Paper A, Lemma 4.6 (Chapter 3)."""
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    return 2.0 ** (2 * L + 2) * c_J * d_max * L**4


def log_lemma_4_6_remainder(norm_w1, norm_diff, loss_w1, L: int, d_max: int, c_J: float = C_J) -> Tensor:
    """log of Lemma 4.6's higher-order term
    ``C (1 + 𝓛(W1)^{1/2}) (Σ_{i=0}^{2L−2} ‖W1‖^i) Σ_{k=0}^{2L−2} ‖W2−W1‖^{k+2}/(k+2)``.

    Paper A, Lemma 4.6, the descent lemma (Chapter 3). Inputs ``(E,)``; output ``(E,)``.
    """
    C = lemma_4_6_C(L, d_max, c_J)
    norm_w1, norm_diff, loss = _same_device_norms(norm_w1=norm_w1, norm_diff=norm_diff, loss_w1=loss_w1).values()
    weights = [1.0 / (k + 2) for k in range(2 * L - 1)]
    return (
        math.log(C)
        + torch.log1p(torch.sqrt(loss))
        + log_power_sum(norm_w1, 2 * L - 2)
        + log_power_sum(norm_diff, 2 * L - 2, offset=2, weights=weights)
    )


def lemma_4_6_rhs(inner, norm_w1, norm_diff, loss_w1, L: int, d_max: int, c_J: float = C_J) -> Tensor:
    """Lemma 4.6's right-hand side ``⟨∇𝓛(W1), W2−W1⟩ + remainder``: ``𝓛(W2) − 𝓛(W1) ≤`` this, shape ``(E,)``.

    Paper A, Lemma 4.6 (Chapter 3). ``inner`` is ``⟨∇𝓛(W1), W2 − W1⟩`` per member.
    """
    inner = validation.tensor("inner", torch.as_tensor(inner, dtype=torch.float64) if not isinstance(inner, Tensor) else inner)
    return inner + torch.exp(log_lemma_4_6_remainder(norm_w1, norm_diff, loss_w1, L, d_max, c_J))


def gradient_norm_bound(norm_w, L: int, d_max: int) -> Tensor:
    """Eq. (14) of Appendix A: ``‖∇_W F(x;W)‖ ≤ d_max^{1/2} L Σ_{k=0}^{L−1} ‖W‖^k``, shape ``(E,)``.

    Paper A, proof of Lemma 4.5 (Chapter 2).
    """
    L, d_max = _check_L(L), _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + math.log(L) + log_power_sum(norm_w, L - 1))


def _check_ell(ell: int, L: int | None = None, lowest: int = 1) -> int:
    if isinstance(ell, bool) or not isinstance(ell, int) or ell < lowest or (L is not None and ell > L):
        top = "L" if L is None else str(L)
        raise ValueError(f"layer index ell must be an integer in [{lowest}, {top}], got {ell!r}")
    return ell


def log_exponent_sum(a, b, exponents: Sequence[tuple[int, int]]) -> Tensor:
    """``log Σ_{(j, k)} a^j b^k`` over a list of exponent pairs, repeated pairs counted as often as they occur
    (elementwise over broadcast ``a``, ``b``). The polynomials of Lemmas A.1–A.6 in their stated index form."""
    a, b = _same_device_norms(a=a, b=b).values()
    if len(exponents) == 0:
        raise ValueError("need at least one exponent pair")
    la, lb = torch.broadcast_tensors(_log(a), _log(b))
    counts = Counter((int(j), int(k)) for j, k in exponents)
    terms = [math.log(c) + _logpow(la, j) + _logpow(lb, k) for (j, k), c in sorted(counts.items())]
    return torch.logsumexp(torch.stack(terms), dim=0)


def lemma_a1_rhs(norm_w, ell: int, d_max: int) -> Tensor:
    """Lemma A.1: ``‖z_ℓ(W)‖ ≤ d_max^{1/2} Σ_{i=1}^{ℓ} ‖W‖^i`` for one input with ``‖x‖ ≤ √d``; ``(E,)`` → ``(E,)``.

    Paper A, Lemma A.1, the pre-activations (Chapter 2).
    """
    _check_ell(ell)
    d_max = _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + log_power_sum(norm_w, ell - 1, offset=1))


def lemma_a2_rhs(norm_w1, norm_w2, norm_diff, ell: int, d_max: int) -> Tensor:
    """Lemma A.2: ``‖z_ℓ(W2) − z_ℓ(W1)‖ ≤ d_max^{1/2} ‖W2−W1‖ Σ_{k=0}^{ℓ−1} Σ_{j=0}^{ℓ−k−1} ‖W1‖^j ‖W2‖^k``,
    shape ``(E,)``. At ``ℓ = L`` it is Lemma 4.3's polynomial.

    Paper A, Lemma A.2, the change of the pre-activations (Chapter 2).
    """
    _check_ell(ell)
    d_max = _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return torch.exp(0.5 * math.log(d_max) + _log(r) + log_double_sum(norm_w1, norm_w2, ell - 1))


def lemma_a3_rhs(norm_w, ell: int, d_max: int) -> Tensor:
    """Lemma A.3: ``‖h_ℓ(W)‖ ≤ d_max^{1/2} Σ_{k=0}^{ℓ} ‖W‖^k`` (``ℓ ≥ 0``, ``h_0 = x``), shape ``(E,)``.

    Paper A, Lemma A.3, the activations (Chapter 2).
    """
    _check_ell(ell, lowest=0)
    d_max = _check_dmax(d_max)
    return torch.exp(0.5 * math.log(d_max) + log_power_sum(norm_w, ell))


def lemma_a4_rhs(norm_w1, norm_w2, norm_diff, ell: int, d_max: int) -> Tensor:
    """Lemma A.4: ``‖h_ℓ(W2) − h_ℓ(W1)‖ ≤`` Lemma A.2's right-hand side for ``ℓ ≥ 1`` (σ is ``c_2``-Lipschitz with
    ``c_2 ≤ 1``) and ``= 0`` for ``ℓ = 0``; shape ``(E,)``.

    Paper A, Lemma A.4, the change of the activations (Chapter 2).
    """
    _check_ell(ell, lowest=0)
    if ell == 0:
        norm_w1, _, _ = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
        return torch.zeros_like(norm_w1)
    return lemma_a2_rhs(norm_w1, norm_w2, norm_diff, ell, d_max)


def lemma_a5_rhs(norm_w, ell: int, L: int) -> Tensor:
    """Lemma A.5: ``‖δ_ℓ(W)‖ ≤ ‖W‖^{L−ℓ}`` for ``ℓ = 1..L``, shape ``(E,)``.

    Paper A, Lemma A.5, the backward vectors of Lemma 4.2 (Chapter 2).
    """
    L = _check_L(L)
    _check_ell(ell, L)
    (norm_w,) = _same_device_norms(norm_w=norm_w).values()
    return torch.exp(_logpow(_log(norm_w), L - ell))


def lemma_a6_exponents(ell: int, L: int) -> list[tuple[int, int]]:
    """The exponent pairs ``(j, i)`` of ``‖W1‖^j ‖W2‖^i`` in Lemma A.6's bracket, with repetition.

    ``ℓ = L``: Lemma A.2's ``{j + i ≤ L − 1}``. ``ℓ < L``: ``Σ_{k=ℓ}^{L} Σ_{i=k−ℓ}^{2k−1−ℓ} Σ_{j=L−k}^{L−i+k−ℓ−1}``
    plus ``Σ_{k=0}^{L−ℓ−1}`` with ``(j, i) = (L−k−ℓ−1, k)``. Paper A, Lemma A.6 (Chapter 2).
    """
    L = _check_L(L)
    _check_ell(ell, L)
    if ell == L:
        return [(j, k) for k in range(L) for j in range(L - k)]
    out = [(j, i) for k in range(ell, L + 1) for i in range(k - ell, 2 * k - ell) for j in range(L - k, L - i + k - ell)]
    return out + [(L - k - ell - 1, k) for k in range(L - ell)]


def lemma_a6_rhs(norm_w1, norm_w2, norm_diff, ell: int, L: int, d_max: int) -> Tensor:
    """Lemma A.6: ``‖δ_ℓ(W2) − δ_ℓ(W1)‖ ≤ d_max^{1/2} ‖W2−W1‖ [ … ]`` with the bracket of
    :func:`lemma_a6_exponents` (at ``ℓ = L`` the bound of Lemma A.2 at ``ℓ = L``); shape ``(E,)``.

    Paper A, Lemma A.6, the change of the backward vectors (Chapter 2).
    """
    d_max = _check_dmax(d_max)
    norm_w1, norm_w2, r = _same_device_norms(norm_w1=norm_w1, norm_w2=norm_w2, norm_diff=norm_diff).values()
    return torch.exp(0.5 * math.log(d_max) + _log(r) + log_exponent_sum(norm_w1, norm_w2, lemma_a6_exponents(ell, L)))


def lemma_4_1_rhs(output_change, grad_norm_w2, residual_w1, grad_change, c_J: float = C_J) -> Tensor:
    """Lemma 4.1's right-hand side for the squared loss,
    ``(c_J/n) Σ_i |F(x_i;W2) − F(x_i;W1)| ‖∇_W F(x_i;W2)‖ + (2/n) Σ_i |F(x_i;W1) − y_i| ‖∇_W F(x_i;W2) − ∇_W F(x_i;W1)‖``
    (``|J_i'(u)| = 2|u − y_i|``; the paper writes ``2/n`` for both, ``c_J = 2``). Inputs ``(E, n)``; output ``(E,)``.

    Paper A, Lemma 4.1 (Chapter 2).
    """
    c_J = _check_cJ(c_J)
    t = _same_device_norms(
        output_change=output_change, grad_norm_w2=grad_norm_w2, residual_w1=residual_w1, grad_change=grad_change
    )
    shapes = {tuple(v.shape) for v in t.values()}
    if len(shapes) != 1 or t["output_change"].ndim != 2:
        raise ValueError(f"the four per-sample quantities must share one shape (E, n), got {sorted(shapes)}")
    return (c_J * t["output_change"] * t["grad_norm_w2"] + 2.0 * t["residual_w1"] * t["grad_change"]).mean(-1)


# ---------------------------------------------------------------------------------- Lemma 4.7: the step
def rho(L: int, d_max: int, c_J: float = C_J) -> float:
    """``ρ = 2^{2L+3} c_J d_max^{3/2} L⁵ = 2 d_max^{1/2} L C``. Paper A, Lemma 4.7 (Chapter 3)."""
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    return 2.0 ** (2 * L + 3) * c_J * d_max**1.5 * L**5


def eta(norm_w, loss, L: int, d_max: int, c_J: float = C_J, kappa=1.0) -> Tensor:
    """Lemma 4.7's step ``η_t = κ / (ρ (1 + 𝓛(W_t)^{1/2}) Σ_{i=0}^{2L−2} ‖W_t‖^i)`` (``κ = 1``: the paper's).

    Paper A, Lemma 4.7 (Chapter 3). ``norm_w``, ``loss``: ``(E,)``; ``kappa``: a float or ``(E,)``; output ``(E,)``.
    """
    loss = _norm("loss", loss)
    log_den = math.log(rho(L, d_max, c_J)) + torch.log1p(torch.sqrt(loss)) + log_power_sum(norm_w, 2 * L - 2)
    k = torch.as_tensor(kappa, dtype=log_den.dtype, device=log_den.device)
    if bool((k <= 0).any()) or not bool(torch.isfinite(k).all()):
        raise ValueError(f"kappa must be positive and finite, got {kappa!r}")
    return k * torch.exp(-log_den)


def adaptive_step(L: int, d_max: int, kappa: float | Tensor = 1.0, c_J: float = C_J) -> gd.StepRule:
    """A :data:`companion.gd.StepRule` giving each member ``κ·η_t`` of Lemma 4.7, computed from its own
    ``‖W_t‖`` (all parameter tensors together) and ``𝓛(W_t)``. ``kappa``: float or ``(E,)`` per member.

    Paper A, Lemma 4.7 (Chapter 3; Chapter 4 runs Theorem 4.8 with it).
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    if isinstance(kappa, Tensor):
        validation.tensor("kappa", kappa, ndim=1)
    if bool((torch.as_tensor(kappa) <= 0).any()):
        raise ValueError(f"kappa must be positive, got {kappa!r}")

    def rule(params, loss, grads, t):
        # a non-finite loss (diverged member) gets a NaN step; the engine flags and freezes it
        safe = torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss)).clamp_min(0)
        out = eta(gd.param_norm(params, loss, grads), safe, L, d_max, c_J, kappa.to(loss) if isinstance(kappa, Tensor) else kappa)
        return torch.where(torch.isfinite(loss), out, torch.full_like(out, float("nan")))

    rule.description = f"Lemma 4.7 eta_t (L={L}, d_max={d_max}, kappa={'per-member' if isinstance(kappa, Tensor) else kappa})"  # type: ignore[attr-defined]
    # the rule of a subset of the members, for gd.run's stop rule (a per-member kappa is sliced)
    rule.restrict = (  # type: ignore[attr-defined]
        (lambda members: adaptive_step(L, d_max, kappa[members.to(kappa.device)], c_J))
        if isinstance(kappa, Tensor)
        else (lambda members: rule)
    )
    return rule


def observers() -> dict:
    """What Theorem 4.8's proof tracks, as :func:`companion.gd.run` observers: ``grad_norm_sq`` (‖∇𝓛‖²) and
    ``param_norm`` (‖W_t‖); the engine itself records ``loss`` (𝓛) and ``eta`` (η_t).

    Paper A, Theorem 4.8 (Chapter 4).
    """
    return {"grad_norm_sq": gd.grad_norm_sq, "param_norm": gd.param_norm}


def ray_degree(s, lam, correction: int) -> Tensor:
    """Per-ray growth exponent of ``lam`` along ``s`` with a known correction removed: the least-squares fit of
    ``log lam = p log s + c + γ s^{−correction}`` for every ray (column), returning the ``p``, ``(E,)``.

    ``s``: ``(R,)`` positive; ``lam``: ``(R, E)`` positive, one ray per column, ``R ≥ 4``. For a linear network the
    Hessian along ``W = sW_0`` is exactly ``s^{2L−2} A − s^{L−2} B``, so its norm is
    ``s^{2L−2} ‖A‖ (1 + γ s^{−L} + O(s^{−2L}))`` and ``correction = L`` leaves an ``O(s^{−2L})`` error in ``p``.
    Paper A, Lemma 4.5's degree ``2L − 2`` (Chapter 2).
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


# -------------------------------------------------------------------------- Theorem 4.8: the constants
@dataclass(frozen=True)
class RateConstants:
    """The constants of Theorem 4.8's proof (Appendix A.8) for one member, with ``N = 2L − 2``.

    ``A = N (ρ(1 + 𝓛0^{1/2})(2L−1))^{(N−2)/(2N)} (2L𝓛0)^{1/2}``, ``B = β = ‖W0‖^N + Σ_{k=2}^N C(N,k)(2L𝓛0)^{k/2}``,
    ``α*`` the smallest ``α`` with ``A((1+β)^{(N−2)/(2N)} + α^{(N−2)/(2N)}) ≤ α``. The proof's conclusions:
    ``‖W_T‖^N ≤ α* T^{(L−1)/L} + β`` and ``η_t ≥ 1/D̄_t``, ``D̄_t = ρ(1+𝓛0^{1/2})(2L−1)(1 + α* t^{(L−1)/L} + β)``.
    """

    L: int
    rho: float
    A: float
    beta: float
    alpha: float
    loss0: float

    def norm_power_bound(self, T) -> Tensor:
        """``α* T^{(L−1)/L} + β``: the proof's bound on ``‖W_T‖^{2L−2}``, for iterations ``T`` (any shape)."""
        T = torch.as_tensor(T, dtype=torch.float64)
        return self.alpha * T ** ((self.L - 1) / self.L) + self.beta

    def eta_lower_bound(self, t) -> Tensor:
        """``1/D̄_t``, the proof's lower bound on ``η_t`` at iterations ``t`` (any shape)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        return 1.0 / (self.rho * (1 + math.sqrt(self.loss0)) * (2 * self.L - 1) * (1 + self.norm_power_bound(t)))

    def eta_sum_lower_bound(self, T: int) -> Tensor:
        """``Σ_{t<T} 1/D̄_t`` for ``T = 1..T`` (shape ``(T,)``): the proof's lower bound on ``Σ_{t<T} η_t``."""
        return torch.cumsum(self.eta_lower_bound(torch.arange(T, dtype=torch.float64)), 0)


def rate_constants(L: int, rho_value: float, loss0: float, norm_w0: float) -> RateConstants:
    """Theorem 4.8's constants ``A, β, α*`` (Appendix A.8) for one member. ``rho_value`` is the ``ρ`` of the
    step actually used (``ρ/κ`` for the rescaled step ``κ η_t``; the proof needs ``ρ ≥ 1``).

    Paper A, Theorem 4.8 (Chapter 4).
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


# ---------------------------------------------------------------- the lemmas on actual networks (LHS, RHS)
@dataclass
class Comparison:
    """Both sides of one lemma on an ensemble. ``lhs``: ``(E,)`` or ``(E, n)`` (per sample for Lemmas 4.3/4.4);
    ``rhs``: ``(E,)`` (broadcasts against ``lhs``); ``ratio = lhs / rhs`` (≤ 1 where the lemma holds)."""

    lhs: Tensor
    rhs: Tensor

    @property
    def ratio(self) -> Tensor:
        """``lhs / rhs`` broadcast to ``lhs``'s shape; ``0/0`` (both sides exactly zero) counts as 0: the
        inequality holds there."""
        rhs = self.rhs.view(*self.rhs.shape, *([1] * (self.lhs.ndim - self.rhs.ndim)))
        out = self.lhs / rhs
        return torch.where((self.lhs == 0) & (rhs == 0), torch.zeros_like(out), out)


def _pair(params1, params2):
    p1, p2 = deepnet.check_params(params1), deepnet.check_params(params2)
    if [w.shape for w in p1] != [w.shape for w in p2]:
        raise ValueError("W1 and W2 must have the same layer shapes")
    _check_L(len(p1))
    diff = [b - a for a, b in zip(p1, p2)]
    return p1, p2, deepnet.norm(p1), deepnet.norm(p2), deepnet.norm(diff), diff


def lemma_4_3(params1, params2, X: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.3 for every member and sample: ``lhs = |F(x_i;W2) − F(x_i;W1)|`` ``(E, n)``,
    ``rhs`` ``(E,)``. Raises ``ValueError`` for a non-smooth σ or data outside ``‖x‖ ≤ √d``.

    Paper A, Lemma 4.3 (Chapter 2).
    """
    _check_devices(params1, params2, X, None)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    lhs = (deepnet.forward(p2, X, act) - deepnet.forward(p1, X, act)).abs()
    return Comparison(lhs, lemma_4_3_rhs(a, b, r, len(p1), deepnet.d_max(p1)))


def lemma_4_4(params1, params2, X: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.4: ``lhs = ‖∇_W F(x_i;W2) − ∇_W F(x_i;W1)‖`` ``(E, n)``, ``rhs`` ``(E,)``.

    Paper A, Lemma 4.4 (Chapter 2). Gradients by Lemma 4.2's recursion (:func:`companion.deepnet.output_gradient`).
    """
    _check_devices(params1, params2, X, None)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    g1, g2 = deepnet.output_gradient(p1, X, act), deepnet.output_gradient(p2, X, act)
    lhs = torch.sqrt(sum(((u - v) ** 2).flatten(2).sum(-1) for u, v in zip(g1, g2)))
    return Comparison(lhs, lemma_4_4_rhs(a, b, r, len(p1), deepnet.d_max(p1)))


def lemma_4_5(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.5: ``lhs = ‖∇𝓛(W2) − ∇𝓛(W1)‖`` ``(E,)``, ``rhs`` ``(E,)``.

    Paper A, Lemma 4.5 (Chapter 2).
    """
    _check_devices(params1, params2, X, y)
    check_assumptions(act, X)
    p1, p2, a, b, r, _ = _pair(params1, params2)
    l1, g1 = deepnet.loss_and_gradient(p1, X, y, act)
    _, g2 = deepnet.loss_and_gradient(p2, X, y, act)
    lhs = torch.sqrt(sum(((u - v) ** 2).flatten(1).sum(-1) for u, v in zip(g1, g2)))
    return Comparison(lhs, lemma_4_5_rhs(a, b, r, l1, len(p1), deepnet.d_max(p1)))


def lemma_4_6(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Lemma 4.6 in its equivalent remainder form: ``lhs = 𝓛(W2) − 𝓛(W1) − ⟨∇𝓛(W1), W2−W1⟩`` (the Taylor
    remainder, may be negative) and ``rhs`` = the lemma's polynomial term (:func:`log_lemma_4_6_remainder`),
    both ``(E,)``; the lemma says ``lhs ≤ rhs`` (so ``ratio ≤ 1``).

    Paper A, Lemma 4.6 (Chapter 3).
    """
    _check_devices(params1, params2, X, y)
    check_assumptions(act, X)
    p1, p2, a, b, r, diff = _pair(params1, params2)
    l1, g1 = deepnet.loss_and_gradient(p1, X, y, act)
    l2 = deepnet.loss(p2, X, y, act)
    inner = sum((g * d).flatten(1).sum(-1) for g, d in zip(g1, diff))
    return Comparison(l2 - l1 - inner, torch.exp(log_lemma_4_6_remainder(a, r, l1, len(p1), deepnet.d_max(p1))))


def _grad_norms(grads: Sequence[Tensor], lead: int) -> Tensor:
    """``‖(g_1, …, g_L)‖`` over all layers, keeping the first ``lead`` axes."""
    return torch.sqrt(sum((g**2).flatten(lead).sum(-1) for g in grads))


def lemma_4_1(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Both sides of Lemma 4.1: ``lhs = ‖∇𝓛(W2) − ∇𝓛(W1)‖`` and ``rhs`` = :func:`lemma_4_1_rhs` of the per-sample
    output changes, gradient norms and residuals, both ``(E,)``. The lemma is the triangle inequality applied to
    ``∇𝓛 = (1/n) Σ_i J_i'(F_i) ∇_W F_i``, so it holds for every activation and any data; it is checked on the
    lemmas' domain all the same.

    Paper A, Lemma 4.1 (Chapter 2).
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
    """Both sides of eq. (14): ``lhs = ‖∇_W F(x_i; W)‖`` ``(E, n)`` and ``rhs`` = :func:`gradient_norm_bound` ``(E,)``.

    Paper A, eq. (14) in the proof of Lemma 4.5 (Chapter 2; along GD trajectories in Chapters 3–4).
    """
    _check_devices(params, None, X)
    check_assumptions(act, X)
    p = deepnet.check_params(params)
    _check_L(len(p))
    lhs = _grad_norms(deepnet.output_gradient(p, X, act), 2)
    return Comparison(lhs, gradient_norm_bound(deepnet.norm(p), len(p), deepnet.d_max(p)))


APPENDIX_A = ("A.1", "A.2", "A.3", "A.4", "A.5", "A.6")


def appendix_a(params1, params2, X: Tensor, act) -> dict[str, Comparison]:
    """Both sides of Lemmas A.1–A.6 for every member, input and layer, as ``{"A.1": Comparison, …}``.

    Each ``lhs`` is ``(E', n, K)`` and each ``rhs`` ``(E', 1, K)`` over the layers ``K`` the lemma speaks of:
    ``ℓ = 1..L`` for A.1, A.2, A.4, A.5, A.6 and ``ℓ = 0..L`` for A.3 (``h_0 = x``; A.4 at ``ℓ = 0`` says
    ``0 = 0`` and is left out). The one-parameter lemmas A.1, A.3, A.5 are evaluated at ``W1`` and at ``W2``
    (``E' = 2E``, ``W1`` first); the two-parameter lemmas A.2, A.4, A.6 on the pairs (``E' = E``).
    Vectors per input: ``z_ℓ, h_ℓ, δ_ℓ ∈ R^{d_ℓ}`` of Lemma 4.2 (:func:`companion.deepnet.forward_all`,
    :func:`companion.deepnet.backward_deltas`). Raises ``ValueError`` where the lemmas do not apply.

    Paper A, Lemmas A.1–A.6 (Chapter 2).
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


# ------------------------------------------------------------------------------ sampling and the probe
def random_pairs(
    widths: Sequence[int],
    ensemble: int,
    norm_range=(0.1, 20.0),
    diff_range=(1e-3, 10.0),
    *,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> tuple[list[Tensor], list[Tensor]]:
    """``ensemble`` random pairs ``(W1, W2)`` of networks with ``widths = [d_0, …, d_L]``: ``‖W1‖`` log-uniform in
    ``norm_range`` and ``‖W2 − W1‖`` log-uniform in ``diff_range``; directions Gaussian with a random log-uniform
    weight per layer in ``[0.1, 10]`` (so that both balanced and one-layer-dominated pairs occur).
    Returns ``(params1, params2)``, lists of ``(E, d_ℓ, d_{ℓ-1})``. Chapters 2 and 3.
    """
    validation.positive_int("ensemble", ensemble)
    for lo, hi, name in ((*norm_range, "norm_range"), (*diff_range, "diff_range")):
        if not 0 < lo <= hi:
            raise ValueError(f"{name} must satisfy 0 < lo <= hi, got {(lo, hi)}")
    base = deepnet.init_params(widths, ensemble, 1.0, generator=generator, device=device, dtype=dtype)
    dev, dt = base[0].device, base[0].dtype

    def direction():
        raw = deepnet.init_params(widths, ensemble, 1.0, generator=generator, device=dev, dtype=dt)
        logw = rand((len(raw), ensemble), generator=generator, device=dev, dtype=dt) * 2 * math.log(10) - math.log(10)
        raw = [w * torch.exp(lw).view(-1, 1, 1) for w, lw in zip(raw, logw)]
        n = deepnet.norm(raw).view(-1, 1, 1)
        return [w / n for w in raw]

    def log_uniform(lo, hi):
        u = rand((ensemble,), generator=generator, device=dev, dtype=dt)
        return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))).view(-1, 1, 1)

    del base
    a, r = log_uniform(*norm_range), log_uniform(*diff_range)
    d1, d2 = direction(), direction()
    p1 = [a * w for w in d1]
    p2 = [w + r * v for w, v in zip(p1, d2)]
    return p1, p2


LEMMAS = ("4.3", "4.4", "4.5")


def _adversarial_search(widths, act, members, steps, n, lr, objective, generator, device, dtype) -> Tensor:
    """Adam on ``(W1, W2 − W1, x_i inside the ball, y_i)`` maximising ``objective(w1, w2, X, y) -> (members,)``
    (a log ratio) from ``members`` random starts at once; returns the best ratio seen per start."""
    check_assumptions(act)
    validation.positive_int("starts", members)
    validation.positive_int("steps", steps)
    validation.positive_int("n", n)
    p1, p2 = random_pairs(widths, members, (0.3, 5.0), (1e-2, 1.0), generator=generator, device=device, dtype=dtype)
    dev, dt = p1[0].device, p1[0].dtype
    d = widths[0]
    w1 = [w.clone().requires_grad_(True) for w in p1]
    dirs = [(b - a).clone().requires_grad_(True) for a, b in zip(p1, p2)]
    log_r = torch.log(deepnet.norm([b - a for a, b in zip(p1, p2)])).clone().requires_grad_(True)
    v = randn((members, n, d), generator=generator, device=dev, dtype=dt).requires_grad_(True)
    y = randn((members, n), generator=generator, device=dev, dtype=dt).requires_grad_(True)
    opt = torch.optim.Adam([*w1, *dirs, log_r, v, y], lr=lr)
    best = torch.zeros(members, dtype=dt, device=dev)
    for _ in range(steps):
        opt.zero_grad()
        X = math.sqrt(d) * v / torch.sqrt(1 + (v**2).sum(-1, keepdim=True))
        dn = deepnet.norm(dirs).view(-1, 1, 1)
        w2 = [a + torch.exp(log_r).view(-1, 1, 1) * u / dn for a, u in zip(w1, dirs)]
        obj = objective(w1, w2, X, y)
        obj = torch.where(torch.isfinite(obj), obj, torch.full_like(obj, -700.0))
        best = torch.maximum(best, torch.exp(obj.detach()))
        (-obj.sum()).backward()
        for p in opt.param_groups[0]["params"]:  # a member at a non-differentiable point (e.g. a zero norm)
            if p.grad is not None:  # gets no update there; the others are unaffected
                p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        opt.step()
    return best


def _log_ratio(c: Comparison) -> Tensor:
    """``log(lhs/rhs)`` maximised over every axis after the first (samples, layers)."""
    rhs = c.rhs.view(*c.rhs.shape, *([1] * (c.lhs.ndim - c.rhs.ndim)))
    out = torch.log(c.lhs + 1e-300) - torch.log(rhs)
    return out.flatten(1).amax(1) if out.ndim > 1 else out


def tightness_probe(
    lemma: str,
    widths: Sequence[int],
    act,
    *,
    starts: int = 64,
    steps: int = 300,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> Tensor:
    """Adversarial search for the worst case of Lemma 4.3, 4.4 or 4.5: maximise ``log(LHS/RHS)`` by Adam over
    ``(W1, W2 − W1, data x_i with ‖x_i‖ < √d, targets y_i)`` from ``starts`` random starts at once.

    Every iterate is a valid instance (the data are parametrised inside the ball), so the running maximum of
    the ratio over iterates is a lower bound on the lemma's worst case. ``n`` samples (Lemmas 4.3/4.4 use the
    first sample). Returns the best ratio found per start, ``(starts,)``. Paper A, Lemmas 4.3–4.5 (Chapter 2).
    """
    if lemma not in LEMMAS:
        raise ValueError(f"lemma must be one of {LEMMAS}, got {lemma!r}")

    def objective(w1, w2, X, y):
        if lemma == "4.3":
            c = lemma_4_3(w1, w2, X[:, :1], act)
            return torch.log(c.lhs[:, 0] + 1e-300) - torch.log(c.rhs)
        if lemma == "4.4":
            c = lemma_4_4(w1, w2, X[:, :1], act)
            return torch.log(c.lhs[:, 0] + 1e-300) - torch.log(c.rhs)
        c = lemma_4_5(w1, w2, X, y, act)
        return torch.log(c.lhs + 1e-300) - torch.log(c.rhs)

    return _adversarial_search(widths, act, starts, steps, n, lr, objective, generator, device, dtype)


PROOF_STEPS = ("4.1", "14", *APPENDIX_A)
STATEMENTS = (*LEMMAS, *PROOF_STEPS)


# The right-hand sides of every statement as rows of monomials ``c · a^i b^j r^k`` (``a = ‖W1‖``, ``b = ‖W2‖``,
# ``r = ‖W2 − W1‖``), so that the adversarial search evaluates all of them with one product and one logsumexp.
# Keys: a statement, or ``statement:a`` / ``statement:b`` for a one-parameter statement at ``W1`` / ``W2``; each
# value is a list of rows (layers), each row a list of ``(log c, i, j, k)``. Lemma 4.5's loss factor and Lemma
# 4.1 (not a polynomial in the norms) are added by the caller.
def _poly(log_c: float, pairs, on: str = "ab", r_power: int = 0) -> list[tuple[float, int, int, int]]:
    """Monomials ``c · x^p y^q r^k`` from exponent pairs ``(p, q)`` (repeats counted) of the variables ``on``."""
    out = []
    for (p, q), count in sorted(Counter((int(p), int(q)) for p, q in pairs).items()):
        e = {"a": 0, "b": 0}
        e[on[0]] += p
        if len(on) > 1:
            e[on[1]] += q
        out.append((log_c + math.log(count), e["a"], e["b"], r_power))
    return out


def _rhs_rows(L: int, dm: int) -> dict[str, list[list[tuple[float, int, int, int]]]]:
    half = 0.5 * math.log(dm)
    tri = lambda deg: [(j, k) for j in range(deg + 1) for k in range(deg + 1 - j)]  # j + k <= deg
    power = lambda lo, hi: [(i, 0) for i in range(lo, hi + 1)]  # Σ_{i=lo}^{hi} x^i
    rows: dict[str, list] = {
        "4.3": [_poly(half, tri(L - 1), r_power=1)],
        "4.4": [_poly(math.log(4 * dm * L**3), tri(2 * L - 2), r_power=1)],
        "4.5": [_poly(math.log(8 * C_J * dm * L**3), tri(2 * L - 2), r_power=1)],
        "A.2": [_poly(half, tri(ell - 1), r_power=1) for ell in range(1, L + 1)],
        "A.6": [_poly(half, lemma_a6_exponents(ell, L), r_power=1) for ell in range(1, L + 1)],
    }
    rows["A.4"] = rows["A.2"]
    for w in "ab":
        rows[f"14:{w}"] = [_poly(half + math.log(L), power(0, L - 1), on=w)]
        rows[f"A.1:{w}"] = [_poly(half, power(1, ell), on=w) for ell in range(1, L + 1)]
        rows[f"A.3:{w}"] = [_poly(half, power(0, ell), on=w) for ell in range(L + 1)]
        rows[f"A.5:{w}"] = [_poly(0.0, [(L - ell, 0)], on=w) for ell in range(1, L + 1)]
    return rows


_RHS_KEYS = {
    "4.3": ("4.3",),
    "4.4": ("4.4",),
    "4.5": ("4.5",),
    "4.1": (),
    "14": ("14:a", "14:b"),
    "A.1": ("A.1:a", "A.1:b"),
    "A.2": ("A.2",),
    "A.3": ("A.3:a", "A.3:b"),
    "A.4": ("A.4",),
    "A.5": ("A.5:a", "A.5:b"),
    "A.6": ("A.6",),
}


@functools.lru_cache(maxsize=64)
def _rhs_table(L: int, dm: int, keys: tuple[str, ...]) -> tuple[Tensor, Tensor, Tensor, list[tuple[str, int, int]]]:
    """The monomials of the rows of ``keys``, flat: ``(exponents (T, 3), log coefficients (T,), one-hot row
    membership (T, R), [(key, first row, rows)])``."""
    table = _rhs_rows(L, dm)
    rows, spans = [], []
    for key in keys:
        spans.append((key, len(rows), len(table[key])))
        rows.extend(table[key])
    flat = [(c, p, q, k, i) for i, row in enumerate(rows) for c, p, q, k in row]
    exps = torch.tensor([m[1:4] for m in flat], dtype=torch.float64)
    logc = torch.tensor([m[0] for m in flat], dtype=torch.float64)
    member = torch.zeros(len(flat), len(rows), dtype=torch.float64)
    member[torch.arange(len(flat)), torch.tensor([m[4] for m in flat])] = 1.0
    return exps, logc, member, spans


def _log_rhs(a: Tensor, b: Tensor, r: Tensor, L: int, dm: int, keys: tuple[str, ...]) -> dict[str, Tensor]:
    """``log`` of the rows of ``keys`` per member, ``{key: (E, rows)}``: every monomial's log from one product,
    each row's ``logsumexp`` shifted by its largest term (``0 · log 0 = 0``, so ``x^0 = 1`` even at ``x = 0``)."""
    exps, logc, member, spans = _rhs_table(L, dm, keys)
    exps, logc, member = exps.to(a), logc.to(a), member.to(a)
    logs = torch.log(torch.stack([a, b, r], -1))  # (E, 3)
    if bool(torch.isfinite(logs).all()):
        terms = logs @ exps.T + logc  # (E, T)
    else:  # a zero norm
        terms = torch.where(exps == 0, torch.zeros_like(exps), exps * logs.unsqueeze(1)).sum(-1) + logc
    row = member.argmax(1).expand_as(terms)
    shift = torch.full((terms.shape[0], member.shape[1]), -math.inf, dtype=terms.dtype, device=terms.device)
    shift = shift.scatter_reduce(1, row, terms.detach(), "amax")  # (E, R), finite: every row has a monomial
    out = shift + torch.log(torch.exp(terms - shift.gather(1, row)) @ member)
    return {key: out[:, i : i + k] for key, i, k in spans}


def proof_log_ratios(params1, params2, X: Tensor, y: Tensor, act, statements: Sequence[str] = STATEMENTS) -> dict[str, Tensor]:
    """``log(LHS/RHS)`` of the statements of :data:`STATEMENTS` asked for (all by default) per member, largest over
    inputs and layers (and, for the one-parameter statements, over ``W1`` and ``W2``): ``{"4.3": (E,), …}``.

    The same values as :func:`lemma_4_3`, :func:`lemma_4_4`, :func:`lemma_4_5`, :func:`lemma_4_1`,
    :func:`equation_14` and :func:`appendix_a`, from one forward and one backward pass per parameter, every
    right-hand side from one table of monomials, and without their per-call checks (the inner loop of
    :func:`proof_probe`; the arguments are checked once here). ``X``: ``(E, n, d)`` or ``(n, d)``; ``y``:
    ``(E, n)`` or ``(n,)``. Paper A, Lemmas 4.3–4.5, Lemma 4.1, eq. (14), Lemmas A.1–A.6 (Chapter 2).
    """
    _check_devices(params1, params2, X, y)
    sigma = check_assumptions(act)
    statements = tuple(statements)
    unknown = [k for k in statements if k not in STATEMENTS]
    if unknown or not statements:
        raise ValueError(f"statements must be a non-empty selection of {STATEMENTS}, got {statements!r}")
    p1, p2 = list(params1), list(params2)
    L, dm = len(p1), max(deepnet.widths_of(p1))
    a, b = deepnet.norm(p1), deepnet.norm(p2)
    r = deepnet.norm([v - u for u, v in zip(p1, p2)])
    rhs = _log_rhs(a, b, r, L, dm, tuple(key for k in statements for key in _RHS_KEYS[k]))
    outs = []
    for p in (p1, p2):
        zs, hs = deepnet.forward_all(p, X, sigma)
        outs.append((zs, hs, deepnet.backward_deltas(p, zs, sigma)))
    (z1, h1, d1), (z2, h2, d2) = outs
    f1, f2 = h1[-1][..., 0], h2[-1][..., 0]
    vnorm = lambda vs: torch.stack([v.norm(dim=-1) for v in vs], -1)  # (E, n, K)
    vdiff = lambda us, vs: vnorm([v - u for u, v in zip(us, vs)])
    lr = lambda lhs, log_rhs: (torch.log(lhs + 1e-300) - log_rhs.unsqueeze(1)).flatten(1).amax(1)  # (E, n, K), (E, K)
    per_w = lambda key, v1, v2: torch.maximum(lr(v1, rhs[key + ":a"]), lr(v2, rhs[key + ":b"]))
    out: dict[str, Tensor] = {}
    if {"4.1", "4.4", "4.5", "14"} & set(statements):
        grads = [[dl.unsqueeze(-1) * hl.unsqueeze(-2) for dl, hl in zip(d, h[:-1])] for d, h in ((d1, h1), (d2, h2))]
        gnorm = [_grad_norms(g, 2) for g in grads]  # (E, n) each
        gchange = _grad_norms([v - u for u, v in zip(*grads)], 2)
        n = f1.shape[-1]
        G = [
            [(2.0 / n) * ((f - y).unsqueeze(-1).unsqueeze(-1) * gl).sum(1) for gl in g]
            for f, g in ((f1, grads[0]), (f2, grads[1]))
        ]
        lhs41 = torch.log(_grad_norms([v - u for u, v in zip(*G)], 1) + 1e-300)
        if "4.4" in statements:
            out["4.4"] = lr(gchange.unsqueeze(-1), rhs["4.4"])
        if "4.5" in statements:
            out["4.5"] = lhs41 - rhs["4.5"][:, 0] - torch.log1p(torch.sqrt(((f1 - y) ** 2).mean(-1)))
        if "4.1" in statements:
            out["4.1"] = lhs41 - torch.log(lemma_4_1_rhs((f2 - f1).abs(), gnorm[1], (f1 - y).abs(), gchange))
        if "14" in statements:
            out["14"] = per_w("14", gnorm[0].unsqueeze(-1), gnorm[1].unsqueeze(-1))
    if "4.3" in statements:
        out["4.3"] = lr((f2 - f1).abs().unsqueeze(-1), rhs["4.3"])
    if "A.1" in statements:
        out["A.1"] = per_w("A.1", vnorm(z1), vnorm(z2))
    if "A.2" in statements:
        out["A.2"] = lr(vdiff(z1, z2), rhs["A.2"])
    if "A.3" in statements:
        out["A.3"] = per_w("A.3", vnorm(h1), vnorm(h2))
    if "A.4" in statements:
        out["A.4"] = lr(vdiff(h1[1:], h2[1:]), rhs["A.4"])
    if "A.5" in statements:
        out["A.5"] = per_w("A.5", vnorm(d1), vnorm(d2))
    if "A.6" in statements:
        out["A.6"] = lr(vdiff(d1, d2), rhs["A.6"])
    return {k: out[k] for k in statements}


def blockwise_activation(acts: Sequence, block: int) -> activations.Activation:
    """One activation per block of ``block`` consecutive members: member ``e`` (leading axis of every tensor the
    activation sees, ``(E, …)`` with ``E = len(acts) · block``) uses ``acts[e // block]``. Returns a single
    :class:`companion.activations.Activation` with the largest of the blocks' constants, so that one ensemble
    (one engine run, one search) holds several activations. Each must satisfy paper A's assumptions.

    Paper A, Assumption 3.1 (Chapters 2–3).
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


def proof_probes(
    widths: Sequence[int],
    acts: Sequence,
    *,
    statements: Sequence[str] = PROOF_STEPS,
    starts: int = 16,
    steps: int = 200,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> dict[str, dict[str, Tensor]]:
    """:func:`proof_probe` for several activations in one ensemble of ``len(acts) · len(statements) · starts``
    members (one Adam run; each member keeps its own activation and statement). Returns
    ``{activation name: {statement: (starts,)}}``, the best ratio ``LHS/RHS`` seen per start.

    Paper A, Lemmas 4.1, 4.3–4.5, eq. (14), Lemmas A.1–A.6 (Chapter 2).
    """
    validation.positive_int("starts", starts)
    statements = tuple(statements)
    unknown = [k for k in statements if k not in STATEMENTS]
    if unknown or not statements:
        raise ValueError(f"statements must be a non-empty selection of {STATEMENTS}, got {statements!r}")
    sigmas = [check_assumptions(act) for act in acts]
    block = len(statements) * starts
    sigma = blockwise_activation(sigmas, block)

    def objective(w1, w2, X, y):
        ratios = proof_log_ratios(w1, w2, X, y, sigma, statements)
        table = torch.stack([ratios[k] for k in statements])  # (K, E)
        E = table.shape[1]
        which = (torch.arange(E, device=table.device) % block) // starts
        return table.gather(0, which.unsqueeze(0)).squeeze(0)

    best = _adversarial_search(widths, sigma, len(sigmas) * block, steps, n, lr, objective, generator, device, dtype)
    return {
        sg.name: {k: best[i * block + j * starts : i * block + (j + 1) * starts] for j, k in enumerate(statements)}
        for i, sg in enumerate(sigmas)
    }


def proof_probe(
    widths: Sequence[int],
    act,
    *,
    statements: Sequence[str] = PROOF_STEPS,
    starts: int = 16,
    steps: int = 200,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> dict[str, Tensor]:
    """Adversarial search for the worst case of several statements at once (by default Lemma 4.1, eq. (14) and
    Lemmas A.1–A.6, the steps inside the proof of Lemma 4.5; any of :data:`STATEMENTS`, Lemmas 4.3–4.5 included):
    ``starts`` members per statement in one ensemble of ``len(statements) · starts``, each member maximising the
    log ratio of its own statement (largest over inputs and layers, :func:`proof_log_ratios`) by Adam over
    ``(W1, W2 − W1, x_i with ‖x_i‖ < √d, y_i)``, as :func:`tightness_probe` does.

    Returns ``{statement: (starts,)}``: the best ratio ``LHS/RHS`` seen per start (a lower bound on the
    statement's worst case; the statement says it is at most 1). Paper A, Lemmas 4.1, 4.3–4.5, eq. (14),
    Lemmas A.1–A.6 (Chapter 2).
    """
    sigma = check_assumptions(act)
    kw = dict(statements=statements, starts=starts, steps=steps, n=n, lr=lr, generator=generator, device=device, dtype=dtype)
    return proof_probes(widths, [sigma], **kw)[sigma.name]


# ------------------------------------------------------------------------ fast paths for long GD runs
def make_loss_and_grad(params_like: Sequence[Tensor], X: Tensor, y: Tensor, act):
    """``loss_and_grad`` for :func:`companion.gd.run` on paper A's network, validated once here and then lean
    (no per-call checks: long runs of Chapter 4 are Python-overhead bound). Same values as
    :func:`companion.deepnet.loss_and_gradient` (Lemma 4.2's recursion). Raises ``ValueError`` where the lemmas
    do not apply (non-smooth σ, data outside ``‖x‖ ≤ √d``). Paper A, Lemma 4.2 (Chapters 3–4).
    """
    check_assumptions(act, X)
    return deepnet.make_loss_and_grad(X, y, act, params_like=params_like)


class Tracker:
    """Lemma 4.7's step ``κ·η_t`` as a :data:`companion.gd.StepRule` that also keeps, per member and at every
    step, what Theorem 4.8's proof tracks (without recording every step):

    * ``min_g2`` — ``min_{s ≤ t} ‖∇𝓛(W_s)‖²``; ``sum_eta`` — ``Σ_{s ≤ t} η_s``; ``sum_eta_g2`` — ``Σ_{s ≤ t} η_s ‖∇𝓛(W_s)‖²``;
    * ``worst_excess`` — ``max_s [𝓛(W_{s+1}) − 𝓛(W_s) + (η_s/2L)‖∇𝓛(W_s)‖²]``, the largest violation of Lemma 4.7's
      one-step descent (``≤ 0`` where it holds), and ``violations`` — how many steps exceed the float64 rounding
      band ``tol·𝓛(W_s)``; ``ambiguous`` — steps whose two sides differ by less than that band.

    ``η_s`` is the step actually taken (``κ`` times the paper's). Use :meth:`observers` with ``gd.run`` (values at
    recorded iteration ``t`` include step ``t``). Paper A, Lemma 4.7 and Theorem 4.8 (Chapters 3–4).
    """

    def __init__(self, L: int, d_max: int, kappa: float | Tensor = 1.0, c_J: float = C_J, tol: float = 1e-13):
        self.L, self.d_max, self.c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
        k = torch.as_tensor(kappa, dtype=torch.float64)
        if k.ndim > 1 or bool((k <= 0).any()) or not bool(torch.isfinite(k).all()):
            raise ValueError(f"kappa must be a positive float or a 1-D tensor of them, got {kappa!r}")
        self.kappa, self.tol = kappa, float(tol)
        self.log_rho = math.log(rho(L, d_max, c_J))
        self._state: dict[str, Tensor] | None = None
        self._powers: Tensor | None = None
        self.description = f"Lemma 4.7 eta_t x kappa (L={L}, d_max={d_max})"

    def __call__(self, params, loss, grads, t):
        E = loss.shape[0]
        flat_g = torch.cat([g.reshape(E, -1) for g in grads], 1)
        g2 = torch.linalg.vecdot(flat_g, flat_g)
        flat_w = torch.cat([w.reshape(E, -1) for w in params], 1)
        a = torch.linalg.vector_norm(flat_w, dim=1)
        if self._powers is None or self._powers.device != a.device or self._powers.dtype != a.dtype:
            self._powers = torch.arange(2 * self.L - 1, device=a.device, dtype=a.dtype)
            k = self.kappa.to(a) if isinstance(self.kappa, Tensor) else torch.as_tensor(self.kappa).to(a)
            self._scale = k * math.exp(-self.log_rho)  # κ/ρ per member
        total = torch.pow(a.unsqueeze(1), self._powers).sum(1)  # Σ_{i=0}^{2L-2} ‖W‖^i
        eta_t = self._scale / ((1 + torch.sqrt(loss.clamp_min(0))) * total)
        s = self._state
        if s is None or t == 0:
            inf = torch.full_like(loss, float("inf"))
            s = self._state = {
                "min_g2": inf,
                "sum_eta": torch.zeros_like(loss),
                "sum_eta_g2": torch.zeros_like(loss),
                "worst_excess": torch.full_like(loss, -float("inf")),
                "violations": torch.zeros_like(loss),
                "ambiguous": torch.zeros_like(loss),
                "loss0": loss.clone(),
            }
        else:
            self._check_step(loss)
        s["min_g2"] = torch.minimum(s["min_g2"], g2)
        s["sum_eta"] = s["sum_eta"] + eta_t
        s["sum_eta_g2"] = s["sum_eta_g2"] + eta_t * g2
        s["prev_loss"], s["prev_eta"], s["prev_g2"] = loss, eta_t, g2
        return eta_t

    def _check_step(self, loss: Tensor) -> None:
        """Lemma 4.7's inequality for the step from the previous state to the one with loss ``loss``."""
        s = self._state
        excess = torch.addcmul(loss - s["prev_loss"], s["prev_eta"], s["prev_g2"], value=1.0 / (2 * self.L))
        excess.nan_to_num_(nan=-math.inf, posinf=-math.inf)  # a non-finite step counts as neither (the engine flags it)
        band = self.tol * s["prev_loss"]
        s["worst_excess"] = torch.maximum(s["worst_excess"], excess)
        s["violations"] += excess > band
        s["ambiguous"] += excess.abs() <= band

    def _sync(self, loss: Tensor) -> None:
        # gd.run calls the rule, then the observers, with the same loss tensor at t < steps; at t = steps the rule
        # is not called, so a loss the tracker has not seen is the final state: check the last step once.
        s = self._state
        if s is not None and loss is not s["prev_loss"] and loss is not s.get("final_loss"):
            self._check_step(loss)
            s["final_loss"] = loss

    def observers(self) -> dict:
        """Observers for ``gd.run``: ``grad_norm_sq``, ``param_norm`` and the running quantities above. Record the
        final iteration (``gd.log_spaced`` does) so that the last step's descent is checked too."""

        def running(key):
            def obs(params, loss, grads):
                self._sync(loss)
                return self._state[key].clone()

            return obs

        return {
            **observers(),
            **{k: running(k) for k in ("min_g2", "sum_eta", "sum_eta_g2", "worst_excess", "violations", "ambiguous")},
        }

    @property
    def state(self) -> dict[str, Tensor]:
        """The running quantities after the last step (each ``(E,)``)."""
        if self._state is None:
            raise ValueError("the tracker has not been run yet")
        return self._state
