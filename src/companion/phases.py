"""The three phases of paper B's Theorem 2 on recorded trajectories: phase boundaries, the invariants of
Lemmas 3-7 with the constants of Appendix C.1-C.5, the linearised growth rate that sets the burn-in, and the
mechanism behind the failure probability of Theorem 2's initialisation (:ref:`ch-three-phases` and :ref:`ch-failures`).

Every function takes the history of :func:`companion.gd.run` with the observers of
:func:`companion.relunet.make_observers` as numpy arrays: ``theta``, ``v``, ``w_norm``, ``imbalance`` of shape
``(R, E, k)`` and ``error`` of shape ``(R, E)`` at the recorded iterations ``(R,)``. The sign convention is the
book's: the network is ``vᵀ ReLU(Wx)`` with ``v = [+|v_1|, −|v_2|]``, so the paper's ``v_i`` is ``|v_i|`` here and
its ``aᵀw_2`` (with ``w_2`` aligned to ``−a``) is ``sign(v_i) aᵀw_i``.

The constants of Appendix C (the lemmas are stated there with these values):

* Lemma 3 (C.1): ``|b_i(τ+1) − b_i(τ)| ≤ c_6 μ² (‖w_i‖² + v_i²) ‖diag(v)W − W*‖²`` with ``c_6 = 6``;
* Lemma 4 (C.2): ``c_4 = π/20``, ``γ = 1/4``, ``c_2 = 2``: if both angles are at most ``c_4``, the norms at most
  ``c_2 ‖a‖`` and ``|b_i| ≤ γ‖a‖``, the angles stay at most ``c_4`` one step later;
* Lemma 5 (C.3): ``c_4 ≤ π/10``, ``γ ≤ 1/2``, ``c_2 = 2``: under the same hypotheses the output weights stay
  in ``(β‖a‖, c_2‖a‖]``;
* Lemma 6 (C.4, phase 1): ``c_4 ≤ π/4``, ``c_9 = 64 / tan c_4``; up to ``T_1``: ``v_i(τ) ≥ v_i(0)/2`` and
  ``v_i(τ), ‖w_i(τ)‖ ≤ 2(1 + μ)^τ v_i(0)``; at ``T_1`` both angles are at most ``c_4``;
* Lemma 7 (C.5, phase 2): ``c_4 ≤ π/10``, ``c_7 = 1/4``, ``c_11 = 1/50``: while the output weights grow to
  ``c_7‖a‖``, ``0 < v_i ≤ 2‖a‖``, the angles stay at most ``c_4`` and ``|b_i| ≤ c_11‖a‖``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from . import validation

__all__ = [
    "C6",
    "C4_LEMMA4",
    "GAMMA_LEMMA4",
    "C4_LEMMA5",
    "GAMMA_LEMMA5",
    "C2",
    "C4_LEMMA6",
    "C7",
    "C11",
    "first_hit",
    "Invariance",
    "invariance",
    "imbalance_drift",
    "phase1_invariants",
    "initial_event",
    "C4_HAT_LEMMA6",
    "projection_event",
    "projection_event_probability",
    "projection_margin",
    "growth_rate",
    "chi2_flip_probability",
    "chi2_failure_probability",
    "gauss_newton_spectrum",
    "burn_in_slope",
    "predicted_burn_in_slope",
    "slope_ratio",
    "paired_slopes",
    "refinement_rates",
    "failure_table",
    "mcnemar_exact",
    "linearised_errors",
    "linearised_rates",
    "planted_modes",
    "mode_rates",
]

C6 = 6.0  #: Lemma 3's drift constant (Appendix C.1)
C4_LEMMA4 = math.pi / 20  #: Lemma 4's angle constant (Appendix C.2)
GAMMA_LEMMA4 = 0.25  #: Lemma 4's imbalance constant (Appendix C.2)
C4_LEMMA5 = math.pi / 10  #: Lemma 5's (and Lemma 7's) angle constant (Appendix C.3, C.5)
GAMMA_LEMMA5 = 0.5  #: Lemma 5's imbalance constant (Appendix C.3)
C2 = 2.0  #: the norm cap ``c_2`` of Lemmas 4-7
C4_LEMMA6 = math.pi / 4  #: Lemma 6's angle constant (Appendix C.4)
C7 = 0.25  #: Lemma 7's growth target ``c_7`` (Appendix C.5)
C11 = 1 / 50  #: Lemma 7's imbalance bound ``c_11`` (Appendix C.5)


def _arr(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def first_hit(mask, iterations) -> np.ndarray:
    """First recorded iteration at which ``mask (R, E)`` holds, per member ``(E,)``; ``−1`` where it never does.

    The phase boundaries ``T_1`` and ``T_2`` of Theorem 2 (:ref:`ch-three-phases`).

    Parameters
    ----------
    mask : array_like of bool, (R, E)
        The condition at each recorded iteration and member.
    iterations : array_like of int, (R,)
        The recorded iterations.

    Returns
    -------
    ndarray of int, (E,)
        The first iteration at which the condition holds, ``−1`` where it never does.

    Raises
    ------
    ValueError
        When ``mask`` is not ``(R, E)`` with ``R = len(iterations)``.
    """
    mask, it = _arr(mask).astype(bool), _arr(iterations)
    if mask.ndim != 2 or mask.shape[0] != it.shape[0]:
        raise ValueError(f"mask must be (R, E) with R = len(iterations) = {it.shape[0]}, got {mask.shape}")
    hit = mask.any(0)
    return np.where(hit, it[mask.argmax(0)], -1)


@dataclass(frozen=True)
class Invariance:
    """Forward invariance of ``{value ≤ level}`` on an ensemble: entry iteration per member (``−1``: never
    entered), the largest value at or after entry, and the number of members that entered."""

    entry: np.ndarray
    worst_after: float
    entered: int
    members: int
    level: float

    @property
    def holds(self) -> bool:
        """Every member entered, and none left the set afterwards."""
        return self.entered == self.members and self.worst_after <= self.level


def invariance(values, level: float, iterations, *, until=None) -> Invariance:
    """Whether ``{values ≤ level}`` is forward invariant along each member's trajectory (Lemmas 4-5, :ref:`ch-three-phases`).

    ``values``: ``(R, E)`` (e.g. the larger of the two angles); ``iterations``: ``(R,)``; ``until``: optional
    ``(E,)`` last iteration to inspect per member (e.g. the end of phase 2 for Lemma 7). The worst value is
    taken over the recorded iterations from the member's first entry on.

    Parameters
    ----------
    values : array_like, (R, E)
        The recorded quantity.
    level : float
        The set's level.
    iterations : array_like of int, (R,)
        The recorded iterations.
    until : array_like of int, (E,), or None
        The last iteration inspected per member (default: all).

    Returns
    -------
    Invariance
        The entry iteration per member ``(E,)``, the worst value after entry, and how many members entered.

    Raises
    ------
    ValueError
        When ``values`` is not ``(R, E)`` with ``R = len(iterations)``.
    """
    y, it = _arr(values).astype(float), _arr(iterations)
    if y.ndim != 2 or y.shape[0] != it.shape[0]:
        raise ValueError(f"values must be (R, E) with R = len(iterations) = {it.shape[0]}, got {y.shape}")
    entry = first_hit(y <= level, it)
    window = (it[:, None] >= entry[None, :]) & (entry[None, :] >= 0)
    if until is not None:
        window &= it[:, None] <= _arr(until)[None, :]
    worst = float(np.where(window, y, -np.inf).max()) if window.any() else -math.inf
    return Invariance(entry, worst, int((entry >= 0).sum()), y.shape[1], float(level))


def imbalance_drift(h: dict, iterations, mu, *, error_min: float = 1e-6) -> dict:
    """Lemma 3 (Appendix C.1) on a recorded trajectory: the one-step drift of ``b_i = ‖w_i‖² − v_i²`` against
    the paper's bound ``c_6 μ² (‖w_i‖² + v_i²) ‖diag(v)W − W*‖²`` (``c_6 = 6``) and against the sharper
    ``(5/2) μ² v_i² ‖diag(v)W − W*‖²`` that Lemma 12's constant gives for the population gradient (:ref:`ch-three-phases`).

    ``h``: history with ``imbalance, v, w_norm (R, E, k)`` and ``error (R, E)``; consecutive recorded iterations
    ``t, t + 1`` give the drift. ``mu``: ``(E,)`` or a float. Only steps with ``error > error_min`` count (below,
    the drift is rounding noise). Returns ``{"paper": max ratio to the c_6 bound, "lemma12": max ratio to the
    5/2 bound, "pairs": number of (step, member) pairs used}``.

    Parameters
    ----------
    h : dict of str to array_like
        A history with ``"imbalance"``, ``"v"``, ``"w_norm"`` ``(R, E, k)`` and ``"error"`` ``(R, E)``.
    iterations : array_like of int, (R,)
        The recorded iterations.
    mu : float or array_like, (E,)
        The step size.
    error_min : float
        The smallest error of a step that counts.

    Returns
    -------
    dict
        ``"paper"`` and ``"lemma12"`` (float, the largest ratios to the two bounds) and ``"pairs"`` (int).
    """
    it = _arr(iterations)
    pair = np.flatnonzero(np.isin(it + 1, it))
    nxt = np.searchsorted(it, it[pair] + 1)
    b, v, wn, err = (_arr(h[k]) for k in ("imbalance", "v", "w_norm", "error"))
    mu = np.broadcast_to(_arr(mu).astype(float), (b.shape[1],))[None, :, None]
    db = np.abs(b[nxt] - b[pair])
    e2 = err[pair][..., None] ** 2
    ok = np.broadcast_to(err[pair][..., None] > error_min, db.shape)
    paper = db / (mu**2 * (wn[pair] ** 2 + v[pair] ** 2) * e2)
    sharp = db / (mu**2 * v[pair] ** 2 * e2)
    return {
        "paper": float(np.where(ok, paper, 0).max()),
        "lemma12": float(np.where(ok, sharp, 0).max()),
        "pairs": int(ok[..., 0].sum()),
    }


def phase1_invariants(h: dict, iterations, mu, T1) -> dict:
    """Lemma 6 (Appendix C.4) up to ``T_1``: the worst ratios of the induction hypotheses (21) and (23),
    ``min v_i(τ)/v_i(0)`` (the lemma: ``≥ 1/2``) and ``max max(v_i(τ), ‖w_i(τ)‖) / (2(1 + μ)^τ v_i(0))`` (the
    lemma: ``≤ 1``), together with the growth rate that actually occurs, ``max ln(max(v_i, ‖w_i‖)/v_i(0)) / τ``
    compared with ``ln(1 + μ)`` (``v_i`` means ``|v_i|``). ``T1``: ``(E,)`` end of phase 1 per member.

    Parameters
    ----------
    h : dict of str to array_like
        A history with ``"v"`` and ``"w_norm"`` ``(R, E, k)``, starting at iteration 0.
    iterations : array_like of int, (R,)
        The recorded iterations.
    mu : float or array_like, (E,)
        The step size.
    T1 : array_like of int, (E,)
        The end of phase 1 per member.

    Returns
    -------
    dict of str to float
        ``"lower"`` (``min v_i(τ)/v_i(0)``), ``"upper"`` (the worst ratio to (23)'s cap) and ``"rate_over_log1pmu"``
        (the growth rate over ``ln(1 + μ)``).

    Raises
    ------
    ValueError
        When the history does not start at iteration 0.
    """
    it = _arr(iterations)
    v, wn = np.abs(_arr(h["v"])), _arr(h["w_norm"])
    if it[0] != 0:
        raise ValueError("the history must start at iteration 0")
    v0 = v[0]
    mu = np.broadcast_to(_arr(mu).astype(float), (v.shape[1],))
    win = (it[:, None] <= _arr(T1)[None, :])[..., None]
    lower = float(np.where(win, v / v0, np.inf).min())
    cap = 2 * (1 + mu[None, :, None]) ** it[:, None, None] * v0
    big = np.maximum(v, wn)
    upper = float(np.where(win, big / cap, 0).max())
    tau = np.maximum(it, 1)[:, None, None]
    rate = np.where(win & (it[:, None, None] > 0), np.log(np.maximum(big / v0, 1)) / tau, 0)
    return {"lower": lower, "upper": upper, "rate_over_log1pmu": float((rate / np.log1p(mu)[None, :, None]).max())}


def initial_event(W0, v0, sigma) -> np.ndarray:
    """Appendix C.4's initial event, per member ``(E,)`` bool: ``|v_i(0)| ≥ ‖w_i(0)‖/2`` and
    ``σ/2 ≤ |v_i(0)| ≤ 2σ`` for both neurons (both ``‖w_i(0)‖²`` and ``v_i(0)²`` are ``σ²χ²_d/d``), which holds with
    probability ``1 − Ce^{−cd}`` (Lemma 6; :ref:`ch-three-phases`). ``W0 (E, k, d)``, ``v0 (E, k)``, ``sigma`` a
    float or ``(E,)``.

    Parameters
    ----------
    W0 : array_like, (E, k, d)
        The initial first-layer weights.
    v0 : array_like, (E, k)
        The initial output weights.
    sigma : float or array_like, (E,)
        The initial scale.

    Returns
    -------
    ndarray of bool, (E,)
        Whether the event holds for every neuron of the member.
    """
    W0, v0 = _arr(W0), np.abs(_arr(v0))
    sig = np.broadcast_to(_arr(sigma).astype(float), (v0.shape[0],))[:, None]
    wn = np.linalg.norm(W0, axis=-1)
    return ((v0 >= wn / 2) & (v0 >= sig / 2) & (v0 <= 2 * sig)).all(-1)


C4_HAT_LEMMA6 = 1 / 64  #: the largest ``ĉ_4`` of Lemma 6's (22) its proof admits: ``ĉ_4 ≤ 1/c_9 = tan(c_4)/64``, ``c_4 = π/4``


def projection_event(W0, v0, a, c4_hat: float = C4_HAT_LEMMA6) -> np.ndarray:
    """The third part of Lemma 6's initial event, per member ``(E,)`` bool: ``aᵀw_i(0) ≥ −ĉ_4 v_i(0)`` for both
    neurons (Appendix C.4; :ref:`ch-three-phases`), in the book's sign convention ``sign(v_i) aᵀw_i(0) ≥ −ĉ_4|v_i(0)|``.

    Parameters
    ----------
    W0 : Tensor or array, shape ``(E, k, d)``
    v0 : Tensor or array, shape ``(E, k)``
    a : Tensor or array, shape ``(d,)``
    c4_hat : float
        The constant ``ĉ_4`` (default :data:`C4_HAT_LEMMA6`, the largest the proof admits).

    Returns
    -------
    numpy.ndarray of bool, shape ``(E,)``

    Raises
    ------
    ValueError
        If ``c4_hat`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> W0 = np.array([[[-0.01, 1.0], [0.0, 1.0]], [[-0.1, 1.0], [0.0, 1.0]]])
    >>> projection_event(W0, np.array([[1.0, -1.0], [1.0, -1.0]]), np.array([1.0, 0.0])).tolist()
    [True, False]
    """
    if not c4_hat > 0:
        raise ValueError(f"c4_hat must be positive, got {c4_hat!r}")
    W0, v0, a = _arr(W0), _arr(v0), _arr(a)
    proj = np.sign(v0) * (W0 @ a)
    return (proj >= -c4_hat * np.abs(v0)).all(-1)


def projection_event_probability(d, c4_hat: float = C4_HAT_LEMMA6, k: int = 2) -> np.ndarray:
    """Probability of :func:`projection_event` under Theorem 2's initialisation (:ref:`ch-three-phases`): with
    ``aᵀw_i(0) = (σ/√d) Z`` and ``|v_i(0)| = (σ/√d) χ_d`` independent, one neuron satisfies it with probability
    ``E[Φ(ĉ_4 χ_d)]`` (``‖a‖ = 1``), and ``k`` independent neurons with its ``k``-th power; by quadrature.

    It tends to 1 only when ``ĉ_4 √d`` is large: at ``ĉ_4 = 1/64`` and ``d = 100``, ``Φ(0.156)² ≈ 0.32``.

    Parameters
    ----------
    d : int or sequence of int, shape ``(D,)``
        The input dimensions (a scalar is taken as one).
    c4_hat : float
        The constant ``ĉ_4`` (default :data:`C4_HAT_LEMMA6`).
    k : int
        The number of neurons.

    Returns
    -------
    numpy.ndarray of float, shape ``(D,)``
        ``E[Φ(ĉ_4 χ_d)]^k`` for each ``d``.

    Examples
    --------
    >>> round(float(projection_event_probability([100])[0]), 3)
    0.316
    """
    from scipy import integrate, stats

    d = np.atleast_1d(_arr(d)).astype(float)
    one = [integrate.quad(lambda r, m=m: stats.norm.cdf(c4_hat * r) * stats.chi.pdf(r, m), 0, np.inf, epsrel=1e-10)[0] for m in d]
    return np.array(one) ** k


def projection_margin(h: dict, iterations, v0, T1, c4_hat: float = C4_HAT_LEMMA6) -> np.ndarray:
    """Lemma 6's (22) along the alignment phase, per member ``(E,)``: the smallest
    ``(sign(v_i) aᵀw_i(t) + ĉ_4|v_i(0)|) / |v_i(0)|`` over the recorded ``t ≤ T_1`` and both neurons (Appendix C.4;
    :ref:`ch-three-phases`); (22) holds where it is ``≥ 0``. ``sign(v_i) aᵀw_i = ‖w_i‖ cos θ_i`` at ``‖a‖ = 1``, from the
    history's ``w_norm`` and ``theta`` ``(R, E, k)``; ``v0 (E, k)``, ``T1 (E,)``.

    Parameters
    ----------
    h : dict
        A history with ``"w_norm"`` (``‖w_i‖``) and ``"theta"`` (the angle ``θ_i`` of ``w_i`` to ``sign(v_i) a``),
        each ``(R, E, k)``.
    iterations : array, shape ``(R,)``
        The iterations at which the history is recorded.
    v0 : Tensor or array, shape ``(E, k)``
        The initial output weights.
    T1 : Tensor or array, shape ``(E,)``
        Each member's end of the alignment phase.
    c4_hat : float
        The constant ``ĉ_4`` (default :data:`C4_HAT_LEMMA6`).

    Returns
    -------
    numpy.ndarray of float, shape ``(E,)``
        The smallest ratio over the recorded ``t ≤ T_1`` and both neurons (``inf`` where none is recorded).
    """
    it = _arr(iterations)
    v0 = np.abs(_arr(v0))[None]
    proj = h["w_norm"] * np.cos(h["theta"])
    ratio = (proj + c4_hat * v0) / v0
    window = it[:, None, None] <= _arr(T1)[None, :, None]
    return np.where(window, ratio, np.inf).min((0, 2))


def growth_rate(X: Tensor, a: Tensor, *, iters: int = 50) -> Tensor:
    """The linearised growth rate of the small-weight phase on data ``X (n, d)``, per sign ``(2,)`` (``+a``
    then ``−a``): ``g = ‖c(w)‖`` at the fixed point ``w ∝ s·c(w)`` of ``c(w) = (1/n) Σ_j 1{wᵀx_j > 0} x_j x_jᵀ a``
    (paper B, Section 6.4's ``w_1 ← w_1 + μ(v_1 a/2 + ζ)``; :ref:`ch-three-phases`).

    Near the origin GD moves ``(|v_i|, ŵ·w_i)`` by the matrix ``[[1, μg], [μg, 1]]``, so the error grows by
    ``1 + μg`` per step and the burn-in grows by ``1/ln(1 + μg)`` per unit of ``ln(1/σ)``. For the population
    (``n → ∞``) ``c(a) = a/2`` and ``g = ‖a‖/2``; on ``n`` samples the fluctuation of ``c`` adds about
    ``d/(2n)`` to ``g²``, so GD on the empirical loss grows faster than the population's ``1 + μ/2``.

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample.
    a : Tensor, (d,)
        The target.
    iters : int
        The fixed-point iterations.

    Returns
    -------
    Tensor, (2,)
        ``g`` for the signs ``+a`` and ``−a``.

    Raises
    ------
    ValueError
        When ``X`` or ``a`` is not a finite tensor of its shape, or they lie on different devices or dtypes.
    """
    validation.same_device(X=X, a=a)
    validation.tensor("X", X, ndim=2)
    validation.tensor("a", a, ndim=1)
    out = []
    y = X @ a
    for s in (1.0, -1.0):
        w = s * a
        for _ in range(iters):
            c = ((X @ w > 0).to(X.dtype) * y) @ X / X.shape[0]
            w = s * c / c.norm()
        out.append(c.norm())
    return torch.stack(out)


def chi2_flip_probability(d) -> np.ndarray:
    """Probability that one output weight of Theorem 2's initialisation changes sign in the small-weight phase
    on the population loss: ``q(d) = P(Z > χ_d)`` with ``Z ~ N(0, 1)`` independent of ``χ_d``, by quadrature
    (:ref:`ch-failures`).

    With ``w_i ~ N(0, σ²/d I)`` and ``|v_i| = σχ_d/√d`` the growth sign is ``sign(v_i + w_iᵀâ)``
    (:func:`companion.relunet.growth_sign`, ``â = a/‖a‖``), and ``s_i w_iᵀâ ~ N(0, σ²/d)``, so a flip happens when
    ``Z > χ_d``. For large ``d``, ``q(d)`` behaves like ``2^{−d/2}`` up to a polynomial factor.

    Parameters
    ----------
    d : int or array_like, (D,)
        The input dimensions.

    Returns
    -------
    ndarray, (D,)
        ``q(d)`` for each dimension.
    """
    from scipy import integrate, stats

    d = np.atleast_1d(_arr(d)).astype(float)
    q = [integrate.quad(lambda r, k=k: stats.norm.sf(r) * stats.chi.pdf(r, k), 0, np.inf, epsabs=0, epsrel=1e-10)[0] for k in d]
    return np.array(q)


def chi2_failure_probability(d) -> np.ndarray:
    """Failure probability of Theorem 2's initialisation on the population loss, ``k = 2``: the two growth
    signs agree, i.e. exactly one of the two output weights flips, ``2q(1 − q)`` with
    ``q =`` :func:`chi2_flip_probability` (paper B's ``1 − Ce^{−cd}``; :ref:`ch-failures`). ``d``: ``(D,)`` → ``(D,)``.

    Parameters
    ----------
    d : int or array_like, (D,)
        The input dimensions.

    Returns
    -------
    ndarray, (D,)
        ``2q(1 − q)`` for each dimension.
    """
    q = chi2_flip_probability(d)
    return 2 * q * (1 - q)


def gauss_newton_spectrum(W: Tensor, v: Tensor, X: Tensor) -> Tensor:
    """Eigenvalues of the Gauss-Newton matrix ``JᵀJ/n`` of the empirical loss at ``(W, v)``, ascending,
    ``(E, k(d + 1))`` (the Hessian at an exact fit; Theorem 2's local refinement phase, :ref:`ch-three-phases`).

    ``J`` is the Jacobian of the outputs ``f(x_j) = Σ_i v_i ReLU(w_iᵀx_j)`` with respect to ``(W, v)``. The first
    ``k`` eigenvalues are zero (the rescalings ``(w_i, v_i) → (c w_i, v_i/c)``); near the planted solution GD
    contracts the error by ``1 − μλ`` per step along each other eigenvector, so the slowest linear rate is
    ``1 − μ λ_{k+1}``. ``W (E, k, d)``, ``v (E, k)``, ``X (n, d)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.
    X : Tensor, (n, d)
        The sample.

    Returns
    -------
    Tensor, (E, k(d + 1))
        The eigenvalues of ``JᵀJ/n`` of every member, ascending.

    Raises
    ------
    ValueError
        When a tensor is not finite of its shape, or they lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v, X=X)
    validation.tensor("W", W, ndim=3)
    validation.tensor("v", v, ndim=2)
    validation.tensor("X", X, ndim=2)
    E, k, d = W.shape
    n = X.shape[0]
    pre = torch.einsum("nd,ekd->enk", X, W)  # (E, n, k)
    Jw = (v[:, None, :, None] * (pre > 0).to(X.dtype)[..., None] * X[None, :, None, :]).reshape(E, n, k * d)
    J = torch.cat([Jw, torch.relu(pre)], -1)
    return torch.linalg.eigvalsh(J.transpose(1, 2) @ J / n)


def burn_in_slope(sigma, T, confidence: float = 0.99):
    """Least-squares fit ``T = α + β ln(1/σ)`` of the burn-in against the initial scale, with a Student-t interval
    on ``β`` (Theorem 2's ``T ≳ c′(1/μ) ln(‖a‖/σ)``; :ref:`ch-three-phases`). ``sigma``, ``T``: ``(E,)``. Returns the
    :class:`companion.stats.Estimate` of :func:`companion.stats.linear_slope` (its ``intercept`` is ``α``).

    Parameters
    ----------
    sigma : array_like, (E,)
        The initial scales.
    T : array_like, (E,)
        The burn-ins.
    confidence : float
        The interval's confidence.

    Returns
    -------
    Estimate
        The slope ``β`` with its interval and ``stderr``; ``intercept`` is ``α``.

    Raises
    ------
    ValueError
        When there are fewer than three burn-ins, the shapes differ, or all scales are equal.
    """
    from .stats import linear_slope

    x, y = np.log(1 / _arr(sigma).astype(float)).ravel(), _arr(T).astype(float).ravel()
    if x.shape != y.shape or x.size < 3 or np.ptp(x) == 0:
        raise ValueError("need at least three burn-ins at two or more initial scales")
    return linear_slope(x, y, confidence)


def predicted_burn_in_slope(g, mu: float) -> tuple[float, float]:
    """The burn-in slope ``dT/d ln(1/σ)`` that the linearised growth predicts, as the range
    ``[1/ln(1 + μ g_max), 1/ln(1 + μ g_min)]`` over the neurons' growth rates ``g`` (:func:`growth_rate`). The
    escape from the origin (every ``|v_i|`` above a small level) waits for the slower neuron, so its slope is the
    upper end; :ref:`ch-three-phases` tests it there, in the small-weight regime.

    Parameters
    ----------
    g : array_like
        The neurons' growth rates (:func:`growth_rate`).
    mu : float
        The step size.

    Returns
    -------
    low, high : float
        ``1/ln(1 + μ g_max)`` and ``1/ln(1 + μ g_min)``.
    """
    g = _arr(g).astype(float)
    return float(1 / np.log1p(mu * g.max())), float(1 / np.log1p(mu * g.min()))


def slope_ratio(num, den, confidence: float = 0.99):
    """Ratio of two fitted slopes with a delta-method normal interval (the burn-in ``∝ 1/μ`` of :ref:`ch-three-phases`), an
    :class:`companion.stats.Estimate` (with its ``stderr``). ``num``, ``den``: slope fits
    (:class:`companion.stats.Estimate` with a ``stderr``, e.g. from :func:`burn_in_slope`).

    Parameters
    ----------
    num, den : Estimate
        The two slope fits, each with a ``stderr``.
    confidence : float
        The interval's confidence.

    Returns
    -------
    Estimate
        ``num.value / den.value`` with a normal interval, method ``"delta method"`` and its ``stderr``.
    """
    from scipy import stats as st

    from .stats import Estimate

    r = num.value / den.value
    se = abs(r) * math.hypot(num.stderr / num.value, den.stderr / den.value)
    z = float(st.norm.ppf(0.5 + confidence / 2))
    return Estimate(float(r), float(r - z * se), float(r + z * se), confidence, "delta method", stderr=float(se))


def paired_slopes(sigma, T) -> np.ndarray:
    """Per-member least-squares slope of the escape time against ``ln(1/σ)`` for *paired* initialisations: member
    ``e`` starts at ``σ_s`` times one base draw for every scale ``s``, so its ``σ``-independent offset cancels and the
    slope is the reciprocal growth rate ``1/ln(1 + μg)`` up to the rounding of ``T`` to whole steps (Theorem 2's
    burn-in ``T ≳ c′(1/μ) ln(‖a‖/σ)``; :ref:`ch-three-phases`).

    Parameters
    ----------
    sigma : array_like, shape ``(S,)``
        The initial scales, at least two distinct.
    T : array_like, shape ``(S, E)``
        The escape time of member ``e`` started at scale ``σ_s``.

    Returns
    -------
    numpy.ndarray, shape ``(E,)``
        ``Σ_s (x_s − x̄)(T_se − T̄_e) / Σ_s (x_s − x̄)²`` with ``x = ln(1/σ)``.

    Raises
    ------
    ValueError
        If the shapes do not fit, fewer than two distinct scales are given, or a time is negative (never escaped).

    Examples
    --------
    >>> import numpy as np
    >>> paired_slopes([1e-2, 1e-4], np.log([[1e2, 1e2], [1e4, 1e4]]) * 20 + [[3], [3]]).round(6).tolist()
    [20.0, 20.0]
    """
    x = np.log(1 / _arr(sigma).astype(float)).ravel()
    T = _arr(T).astype(float)
    if T.ndim != 2 or T.shape[0] != x.size or np.ptp(x) == 0:
        raise ValueError(f"need T (S, E) for S = {x.size} distinct scales, got shape {T.shape}")
    if (T < 0).any():
        raise ValueError("a member never escaped (negative time): raise the step budget")
    xc = x - x.mean()
    return xc @ (T - T.mean(0)) / (xc @ xc)


def refinement_rates(iterations, error, *, low: float = 1e-12, high: float = 1e-7, confidence: float = 0.99):
    """Per-member contraction factor ``q`` of the error in the refinement phase, from
    :func:`companion.stats.semilog_slope` on the recorded iterations where ``low < error < high`` (Theorem 2's linear
    rate; :ref:`ch-three-phases`). ``iterations (R,)``, ``error (R, E)`` → ``(q, q_low, q_high, points)``, each ``(E,)``
    (``nan`` where the window holds fewer than three points).

    Parameters
    ----------
    iterations : array_like of int, (R,)
        The recorded iterations.
    error : array_like, (R, E)
        The recorded errors.
    low, high : float
        The window of errors fitted.
    confidence : float
        The intervals' confidence.

    Returns
    -------
    q, q_low, q_high : ndarray, (E,)
        The contraction factor per step and its interval (``nan`` with fewer than three points).
    points : ndarray of int, (E,)
        The number of iterations in the window.
    """
    from .stats import semilog_slope

    it, err = _arr(iterations).astype(float), _arr(error).astype(float)
    out = np.full((4, err.shape[1]), np.nan)
    for e in range(err.shape[1]):
        sel = (err[:, e] > low) & (err[:, e] < high)
        out[3, e] = sel.sum()
        if sel.sum() >= 3:
            f = semilog_slope(it[sel], err[sel, e], confidence)
            out[:3, e] = np.exp([f.value, f.low, f.high])
    return out[0], out[1], out[2], out[3].astype(int)


def failure_table(agree, fail) -> np.ndarray:
    """2 × 2 table of a sign predictor against the outcome: rows "signs agree" / "signs differ", columns "failed" /
    "succeeded" (Section 4's mechanism; :ref:`ch-failures`). ``agree``, ``fail``: ``(E,)`` bool.

    Parameters
    ----------
    agree : array_like of bool, (E,)
        Whether the predictor's signs agree.
    fail : array_like of bool, (E,)
        Whether the run failed.

    Returns
    -------
    ndarray of int, (2, 2)
        The counts, rows agree / differ, columns failed / succeeded.

    Raises
    ------
    ValueError
        When ``agree`` and ``fail`` differ in shape.
    """
    agree, fail = _arr(agree).astype(bool), _arr(fail).astype(bool)
    if agree.shape != fail.shape:
        raise ValueError(f"agree and fail must have the same shape, got {agree.shape} and {fail.shape}")
    return np.array([[np.sum(agree & fail), np.sum(agree & ~fail)], [np.sum(~agree & fail), np.sum(~agree & ~fail)]])


def mcnemar_exact(right_a, right_b) -> float:
    """One-sided exact McNemar test that predictor ``b`` is right more often than predictor ``a`` on the same runs:
    the binomial tail ``P(X ≥ n_b)`` with ``X ~ Bin(n_a + n_b, 1/2)`` over the discordant runs (``n_b``: only ``b``
    right; ``n_a``: only ``a`` right). ``right_a``, ``right_b``: ``(E,)`` bool. :ref:`ch-failures`'s growth signs against the
    initial signs.

    Parameters
    ----------
    right_a, right_b : array_like of bool, (E,)
        Whether each predictor was right on each run.

    Returns
    -------
    float
        The one-sided p-value (1 when no run is discordant).
    """
    from scipy import stats as st

    ra, rb = _arr(right_a).astype(bool), _arr(right_b).astype(bool)
    na, nb = int(np.sum(ra & ~rb)), int(np.sum(rb & ~ra))
    if na + nb == 0:
        return 1.0
    return float(st.binom.sf(nb - 1, na + nb, 0.5))


def linearised_errors(W_start: Tensor, v_start: Tensor, W_end: Tensor, v_end: Tensor, X: Tensor, a: Tensor, mu, offsets):
    """The planted error ``h = ‖diag(|v|)W − W*‖`` predicted by GD linearised at its limit (Theorem 2's local
    refinement phase, :ref:`ch-three-phases`).

    Near an exact fit the Hessian of the empirical loss is the Gauss-Newton matrix ``H = JᵀJ/n`` at the limit
    ``θ* = (W_end, v_end)``, and GD moves the deviation ``δ = θ − θ*`` by ``δ ← (I − μH) δ``. Started from
    ``δ_0 = θ_start − θ*``, after ``s`` steps ``δ_s = Σ_j (1 − μλ_j)^s (u_jᵀδ_0) u_j`` over the eigenpairs of ``H``,
    and the error's first-order part is ``‖v*_i δw_i + δv_i w*_i‖`` summed over the neurons (the rescaling
    directions, ``λ = 0``, do not change it). ``W_start, W_end (E, k, d)``, ``v_start, v_end (E, k)``,
    ``X (n, d)``, ``a (d,)``, ``mu`` a float or ``(E,)``; ``offsets``: ``(E, S)`` or a list of ``E`` 1-D arrays of
    steps after the start (``≥ 0``) → predicted errors of the same layout (numpy).

    Parameters
    ----------
    W_start, W_end : Tensor, (E, k, d)
        The first-layer weights at the start and at the limit.
    v_start, v_end : Tensor, (E, k)
        The output weights at the start and at the limit.
    X : Tensor, (n, d)
        The sample.
    a : Tensor, (d,)
        The target.
    mu : float or array_like, (E,)
        The step size.
    offsets : ndarray, (E, S), or list of ``E`` 1-D arrays
        The steps after the start at which the error is predicted, ``≥ 0``.

    Returns
    -------
    ndarray, (E, S), or list of ``E`` 1-D arrays
        The predicted errors, in the layout of ``offsets``.

    Raises
    ------
    ValueError
        When a tensor is not finite of its shape, they lie on different devices or dtypes, or ``offsets`` has not one
        row per member.
    """
    validation.same_device(W_start=W_start, v_start=v_start, W_end=W_end, v_end=v_end, X=X, a=a)
    validation.tensor("W_end", W_end, ndim=3)
    validation.tensor("v_end", v_end, ndim=2)
    validation.tensor("X", X, ndim=2)
    E, k, d = W_end.shape
    n = X.shape[0]
    if len(offsets) != E:
        raise ValueError(f"need one row of offsets per member (E = {E}), got {len(offsets)}")
    mu = np.broadcast_to(np.asarray(mu, dtype=float), (E,))
    Wn, vn = W_end.cpu().numpy(), v_end.cpu().numpy()
    out = []
    chunk = 16  # members per eigendecomposition batch (bounds the memory of J: chunk·n·k(d + 1) numbers)
    for s0 in range(0, E, chunk):
        sl = slice(s0, min(E, s0 + chunk))
        Wc, vc = W_end[sl], v_end[sl]
        pre = torch.einsum("nd,ekd->enk", X, Wc)
        Jw = (vc[:, None, :, None] * (pre > 0).to(X.dtype)[..., None] * X[None, :, None, :]).reshape(-1, n, k * d)
        J = torch.cat([Jw, torch.relu(pre)], -1)
        lam, U = torch.linalg.eigh(J.transpose(1, 2) @ J / n)
        delta0 = torch.cat([(W_start[sl] - Wc).reshape(-1, k * d), v_start[sl] - vc], -1)
        c = torch.einsum("epj,ep->ej", U, delta0).cpu().numpy()
        lam, U = lam.cpu().numpy(), U.cpu().numpy()
        for j, e in enumerate(range(sl.start, sl.stop)):
            s = np.asarray(offsets[e], dtype=float)
            fac = np.clip(1 - mu[e] * lam[j], 0, None)
            D = fac[None, :] ** s[:, None] * c[j][None, :]  # (S, p)
            dl = D @ U[j].T
            dW, dv = dl[:, : k * d].reshape(-1, k, d), dl[:, k * d :]
            lin = vn[e][None, :, None] * dW + dv[..., None] * Wn[e][None]  # (S, k, d)
            out.append(np.sqrt((lin**2).sum((1, 2))))
    return np.stack(out) if isinstance(offsets, np.ndarray) and offsets.ndim == 2 else out


def linearised_rates(
    iterations,
    error,
    snapshots,
    W_end: Tensor,
    v_end: Tensor,
    X: Tensor,
    a: Tensor,
    mu,
    *,
    low: float = 1e-10,
    high: float = 1e-5,
    confidence: float = 0.99,
) -> dict:
    """Measured and predicted contraction factors of the refinement phase, per member (Theorem 2's linear rate;
    :ref:`ch-three-phases`).

    For each member the start ``t_0`` is the last snapshot (``snapshot_at`` of :func:`companion.gd.run`) at or
    before the first recorded iteration with ``error < high``; the fit uses the recorded iterations ``t ≥ t_0``
    with ``low < error < high``. ``q`` (with its ``confidence`` interval ``q_low, q_high``) is
    :func:`companion.stats.semilog_slope` of the measured error there; ``q_lin`` is the same fit on the errors
    that GD linearised at the limit predicts from the state at ``t_0`` (:func:`linearised_errors`), at the same
    iterations. ``iterations (R,)``, ``error (R, E)``, ``snapshots`` (the ``snapshots`` of a :class:`companion.gd.GDResult`:
    ``{t: [W (E, k, d), v (E, k)]}``), ``W_end (E, k, d)``, ``v_end (E, k)``, ``X (n, d)`` → dict of ``(E,)``
    arrays ``q, q_low, q_high, q_lin, t0, h0`` (``h0``: the error at ``t_0``, the size of the neglected
    quadratic terms) and ``points``.

    Parameters
    ----------
    iterations : array_like of int, (R,)
        The recorded iterations.
    error : array_like, (R, E)
        The recorded errors.
    snapshots : dict of int to list of Tensor
        ``{t: [W (E, k, d), v (E, k)]}``, the snapshots of a :class:`companion.gd.GDResult`.
    W_end : Tensor, (E, k, d)
        The first-layer weights at the limit.
    v_end : Tensor, (E, k)
        The output weights at the limit.
    X : Tensor, (n, d)
        The sample.
    a : Tensor, (d,)
        The target.
    mu : float or array_like, (E,)
        The step size.
    low, high : float
        The window of errors fitted.
    confidence : float
        The intervals' confidence.

    Returns
    -------
    dict of str to ndarray, each (E,)
        ``"q"``, ``"q_low"``, ``"q_high"``, ``"q_lin"``, ``"t0"``, ``"h0"`` and ``"points"``.

    Raises
    ------
    ValueError
        When some member never enters the window below ``high``.
    """
    from .stats import semilog_slope

    it, err = _arr(iterations).astype(np.int64), _arr(error).astype(float)
    E = err.shape[1]
    s_it = np.array(sorted(snapshots), dtype=np.int64)
    below = err < high
    if not below.any(0).all():
        raise ValueError("some member never enters the window below `high`")
    first = it[below.argmax(0)]
    t0 = np.array([s_it[s_it <= f].max() for f in first])
    Ws = torch.stack([snapshots[int(t)][0][e] for e, t in enumerate(t0)])
    vs = torch.stack([snapshots[int(t)][1][e] for e, t in enumerate(t0)])
    sel = [(it >= t0[e]) & (err[:, e] > low) & (err[:, e] < high) for e in range(E)]
    pred = linearised_errors(Ws, vs, W_end, v_end, X, a, mu, [it[m] - t0[e] for e, m in enumerate(sel)])
    out = {key: np.full(E, np.nan) for key in ("q", "q_low", "q_high", "q_lin", "h0")}
    out["t0"], out["points"] = t0, np.array([m.sum() for m in sel])
    for e, m in enumerate(sel):
        out["h0"][e] = err[it.searchsorted(t0[e]), e] if t0[e] in it else np.nan
        if m.sum() >= 3:
            f = semilog_slope(it[m], err[m, e], confidence)
            out["q"][e], out["q_low"][e], out["q_high"][e] = np.exp([f.value, f.low, f.high])
            out["q_lin"][e] = np.exp(semilog_slope(it[m], pred[e], confidence).value)
    return out


def planted_modes(X: Tensor, a: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of the Gauss-Newton matrix ``JᵀJ/n`` of the empirical loss at the balanced planted solution
    ``W* = [a, −a]``, ``v* = [1, −1]``, built from the data before any training (Theorem 2's local refinement
    phase; :ref:`ch-three-phases`).

    At an exact fit the Hessian is ``JᵀJ/n``; GD near the limit moves the coordinate of the deviation along the
    eigenvector ``u_j`` by ``1 − μλ_j`` per step, whatever the other coordinates do. The first two eigenvalues are
    zero (the rescalings ``(w_i, v_i) → (c w_i, v_i/c)``), so ``u_3`` is the slowest contracting mode.

    Parameters
    ----------
    X : Tensor, shape ``(n, d)``
        The data.
    a : Tensor, shape ``(d,)``
        The target direction.

    Returns
    -------
    lam : numpy.ndarray, shape ``(2d + 2,)``
        Eigenvalues, ascending.
    U : numpy.ndarray, shape ``(2d + 2, 2d + 2)``
        Eigenvectors in the columns, coordinates ordered as ``(w_1, w_2, v_1, v_2)``.

    Raises
    ------
    ValueError
        On tensors of the wrong rank or on different devices.

    Examples
    --------
    >>> import torch
    >>> from companion import device, relunet
    >>> a = relunet.unit_target(3)
    >>> X, _ = relunet.gaussian_data(200, 3, a, generator=device.generator(0))
    >>> lam, U = planted_modes(X, a)
    >>> lam.shape, bool(abs(lam[:2]).max() < 1e-12 < lam[2])
    ((8,), True)
    """
    validation.same_device(X=X, a=a)
    validation.tensor("X", X, ndim=2)
    validation.tensor("a", a, ndim=1)
    W = torch.stack([a, -a]).unsqueeze(0)
    v = torch.tensor([[1.0, -1.0]], dtype=X.dtype, device=X.device)
    n, d = X.shape
    pre = torch.einsum("nd,ekd->enk", X, W)
    Jw = (v[:, None, :, None] * (pre > 0).to(X.dtype)[..., None] * X[None, :, None, :]).reshape(1, n, 2 * d)
    J = torch.cat([Jw, torch.relu(pre)], -1)[0]
    lam, U = torch.linalg.eigh(J.T @ J / n)
    return lam.cpu().numpy(), U.cpu().numpy()


def mode_rates(
    snapshots, u, a: Tensor, W_end: Tensor, v_end: Tensor, *, low: float, high: float, confidence: float = 0.99
) -> dict:
    """Per-member contraction factor of the deviation's coordinate along one Gauss-Newton eigenvector ``u`` of
    the planted solution (:func:`planted_modes`), fitted on the parameter snapshots whose error lies in a window
    (Theorem 2's linear rate; :ref:`ch-three-phases`).

    Parameters
    ----------
    snapshots : dict
        ``{t: [W (E, 2, d), v (E, 2)]}``, the ``snapshots`` of a :class:`companion.gd.GDResult`, signs ``[+, −]``.
    u : array_like, shape ``(2d + 2,)``
        The eigenvector, coordinates ``(w_1, w_2, v_1, v_2)``.
    a : Tensor, shape ``(d,)``
        The target direction.
    W_end, v_end : Tensor, shapes ``(E, 2, d)``, ``(E, 2)``
        Each member's final parameters: only their imbalance ``b_i = ‖w_i‖² − v_i²`` (conserved up to Lemma 3's
        drift) and signs are used, to place the member's limit on the planted solution's rescaling curve
        (``|v_i|‖w_i‖ = ‖a‖ = 1``), the origin of its deviation.
    low, high : float
        The window of the planted error ``h`` (:func:`companion.relunet.planted_error`) in which the fit is made.
    confidence : float
        Coverage of the interval of :func:`companion.stats.semilog_slope`.

    Returns
    -------
    dict of numpy.ndarray, each ``(E,)``
        ``q, q_low, q_high`` (``nan`` with fewer than three snapshots in the window), ``points`` and ``h_start``
        (the largest error in the window, the size of the neglected quadratic terms).

    Raises
    ------
    ValueError
        If ``low >= high`` or the shapes do not fit.
    """
    from .stats import semilog_slope

    if not 0 < low < high:
        raise ValueError(f"need 0 < low < high, got {low!r}, {high!r}")
    times = np.array(sorted(snapshots), dtype=np.int64)
    W = torch.stack([snapshots[int(t)][0] for t in times])  # (S, E, 2, d)
    v = torch.stack([snapshots[int(t)][1] for t in times])  # (S, E, 2)
    S, E, k, d = W.shape
    u = torch.as_tensor(np.asarray(u, dtype=float), dtype=W.dtype, device=W.device)
    if k != 2 or u.shape != (k * d + k,):
        raise ValueError(f"need k = 2 snapshots and u of length 2d + 2, got k = {k}, u {tuple(u.shape)}")
    # the limit on the planted solution's rescaling curve with the member's (conserved) imbalance b_i:
    # |v_i| |w_i| = |a| = 1 and |w_i|^2 - v_i^2 = b_i give v_i^2 = (sqrt(b_i^2 + 4) - b_i) / 2
    b = (W_end**2).sum(-1) - v_end**2
    v_abs = torch.sqrt((torch.sqrt(b**2 + 4) - b) / 2)
    sign = torch.sign(v_end)
    v_lim = sign * v_abs
    W_lim = (sign / v_abs).unsqueeze(-1) * a
    delta = torch.cat([(W - W_lim).reshape(S, E, k * d), v - v_lim], -1)
    coord = (delta @ u).abs().cpu().numpy()  # (S, E)
    err = (v.unsqueeze(-1) * W - a).flatten(2).norm(dim=-1).cpu().numpy()  # (S, E)
    out = {key: np.full(E, np.nan) for key in ("q", "q_low", "q_high", "h_start")}
    out["points"] = np.zeros(E, dtype=int)
    for e in range(E):
        sel = (err[:, e] > low) & (err[:, e] < high) & (coord[:, e] > 0)
        out["points"][e] = sel.sum()
        if sel.sum() >= 3:
            f = semilog_slope(times[sel], coord[sel, e], confidence)
            out["q"][e], out["q_low"][e], out["q_high"][e] = np.exp([f.value, f.low, f.high])
            out["h_start"][e] = err[sel, e].max()
    return out
