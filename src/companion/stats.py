"""Small statistics every chapter needs: Wilson intervals, Monte Carlo errors, log-log slope fits (and the per-ray
degree fit of :func:`ray_degree`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats as _st
from torch import Tensor

from . import validation


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def wilson_interval(successes, trials, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for a binomial proportion (vectorised). Used for every failure/success rate."""
    k, n = _np(successes), _np(trials)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= successes <= trials and trials > 0")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    z = _st.norm.ppf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def mean_and_se(samples, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo mean and its standard error ``s / √N`` along ``axis``."""
    x = _np(samples)
    n = x.shape[axis]
    if n < 2:
        raise ValueError("need at least two samples for a standard error")
    return x.mean(axis=axis), x.std(axis=axis, ddof=1) / np.sqrt(n)


@dataclass(frozen=True)
class SlopeFit:
    """Least-squares fit ``log y = intercept + slope · log x`` with a confidence interval on the slope."""

    slope: float
    intercept: float
    stderr: float
    low: float
    high: float
    confidence: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"{self.slope:.3f} [{self.low:.3f}, {self.high:.3f}] ({100 * self.confidence:.0f}% CI)"


def loglog_slope(x, y, confidence: float = 0.95) -> SlopeFit:
    """Fit the log-log slope of ``y`` against ``x`` (both positive) with a Student-t interval."""
    x, y = _np(x).ravel(), _np(y).ravel()
    if x.shape != y.shape or x.size < 3:
        raise ValueError("need at least three (x, y) pairs of equal length")
    if np.any(x <= 0) or np.any(y <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise ValueError("log-log fit needs finite positive x and y")
    res = _st.linregress(np.log(x), np.log(y))
    t = _st.t.ppf(0.5 + confidence / 2, df=x.size - 2)
    return SlopeFit(res.slope, res.intercept, res.stderr, res.slope - t * res.stderr, res.slope + t * res.stderr, confidence)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval ``[low, high]``."""

    value: float
    low: float
    high: float
    confidence: float
    method: str = ""

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] ({100 * self.confidence:.0f}% {self.method})".replace(
            " )", ")"
        )


def _t_quantile(confidence: float, df: int) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(_st.t.ppf(0.5 + confidence / 2, df=df))


def member_slopes(x, Y, confidence: float = 0.95, *, x_min: float | None = None) -> Estimate:
    """Mean over members of per-member log-log slopes, with a Student-t interval across members.

    ``x``: ``(R,)`` positive abscissae; ``Y``: ``(R, E)``, one positive curve per member (column). Each member's slope
    is the least-squares slope of ``log Y[:, e]`` on ``log x`` over ``x ≥ x_min`` (all points by default); the
    interval is ``mean ± t_{E−1} · s/√E`` over the ``E`` slopes. Used for rates measured on an ensemble: the Hessian's
    growth along rays (Chapter 2) and the O(T^(−1/L)) exponents of Theorem 4.8 (Chapter 4).
    """
    x, Y = _np(x).ravel(), _np(Y)
    if Y.ndim != 2 or Y.shape[0] != x.size:
        raise ValueError(f"Y must have shape (R, E) with R = len(x) = {x.size}, got {Y.shape}")
    sel = np.ones(x.size, bool) if x_min is None else x >= x_min
    if sel.sum() < 3 or Y.shape[1] < 2:
        raise ValueError("need at least three abscissae (after x_min) and two members")
    lx, ly = np.log(x[sel]), Y[sel]
    if np.any(~np.isfinite(lx)) or np.any(~(ly > 0)) or not np.all(np.isfinite(ly)):
        raise ValueError("log-log fits need finite positive x and Y")
    ly = np.log(ly)
    xc = lx - lx.mean()
    slopes = (xc @ (ly - ly.mean(axis=0))) / (xc @ xc)
    m, se = mean_and_se(slopes)
    half = _t_quantile(confidence, slopes.size - 1) * se
    return Estimate(float(m), float(m - half), float(m + half), confidence, "t-interval over members")


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


def semilog_slope(t, y, confidence: float = 0.95) -> SlopeFit:
    """Fit ``log y = intercept + slope · t`` (``y > 0``) with a Student-t interval on the slope.

    A linear (geometric) rate: ``e^slope`` is the contraction factor per unit of ``t`` (Theorem 2's refinement phase,
    Chapter 8; the depth dependence of the Gram drift, Chapter 13).
    """
    t, y = _np(t).ravel(), _np(y).ravel()
    if t.shape != y.shape or t.size < 3:
        raise ValueError("need at least three (t, y) pairs of equal length")
    if np.any(y <= 0) or not np.all(np.isfinite(t)) or not np.all(np.isfinite(y)):
        raise ValueError("a semilog fit needs finite t and finite positive y")
    res = _st.linregress(t, np.log(y))
    q = _t_quantile(confidence, t.size - 2)
    return SlopeFit(res.slope, res.intercept, res.stderr, res.slope - q * res.stderr, res.slope + q * res.stderr, confidence)


def exp_decay_binomial(k, failures, trials, confidence: float = 0.95) -> Estimate:
    """Binomial maximum likelihood of ``p_k = C e^{−c k}`` from failure counts, with a Wald interval on ``c``.

    ``k``, ``failures``, ``trials``: ``(K,)``; zero counts are allowed. The interval is ``ĉ ± z · se`` with ``se``
    from the inverse Fisher information of ``(log C, c)``. Paper B's failure probability against the width
    (Chapter 9).
    """
    from scipy import optimize

    k, F, N = _np(k).ravel(), _np(failures).ravel(), _np(trials).ravel()
    if not (k.shape == F.shape == N.shape) or k.size < 2:
        raise ValueError("need at least two (k, failures, trials) triples of equal length")
    if np.any(N <= 0) or np.any(F < 0) or np.any(F > N):
        raise ValueError("need 0 <= failures <= trials and trials > 0")
    if F.sum() == 0:
        raise ValueError("no failures at all: the decay rate is not identifiable")

    def nll(theta):
        logp = np.minimum(theta[0] - theta[1] * k, -1e-12)
        return -np.sum(F * logp + (N - F) * np.log1p(-np.exp(logp)))

    p0 = np.clip(F / N, 0.5 / N, 1 - 0.5 / N)
    start = np.polyfit(k, np.log(p0), 1)
    fit = optimize.minimize(
        nll, x0=[start[1], -start[0]], method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-12, maxiter=20000)
    )
    logC, c = fit.x
    p = np.exp(logC - c * k)
    g = np.stack([np.ones_like(k), -k])  # d log p / d(log C, c)
    info = (g * (N * p / (1 - p))) @ g.T
    se = float(np.sqrt(np.linalg.inv(info)[1, 1]))
    z = float(_st.norm.ppf(0.5 + confidence / 2))
    return Estimate(float(c), float(c - z * se), float(c + z * se), confidence, "Wald interval")


def crossing(p, x, level: float = 0.5) -> np.ndarray:
    """Where the running maximum of ``p`` first reaches ``level``, interpolated linearly in ``log x``.

    ``p``: ``(..., K)`` values at increasing positive abscissae ``x (K,)``; returns ``(...)`` (``inf`` where the level
    is never reached, ``x[0]`` where it is reached at once). The sample size at which a success rate reaches one half
    (Chapter 10).
    """
    p, x = _np(p), _np(x).ravel()
    if p.shape[-1] != x.size or x.size < 2 or np.any(np.diff(x) <= 0) or np.any(x <= 0):
        raise ValueError("p's last axis must match increasing positive x (at least two points)")
    run = np.maximum.accumulate(p, axis=-1)
    hit = run >= level
    j = np.where(hit.any(-1), hit.argmax(-1), -1)
    lx = np.log(x)
    jm = np.clip(j - 1, 0, None)
    lo = np.take_along_axis(run, jm[..., None], -1)[..., 0]
    hi = np.take_along_axis(run, np.clip(j, 0, None)[..., None], -1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(hi > lo, (level - lo) / (hi - lo), 0.0)
    out = np.exp(lx[jm] + frac * (lx[np.clip(j, 0, None)] - lx[jm]))
    out = np.where(j == 0, x[0], out)
    return np.where(j < 0, np.inf, out)


def bootstrap_crossing(
    counts, trials, x, level: float = 0.5, *, boot: int = 2000, rng=None, confidence: float = 0.95
) -> Estimate:
    """:func:`crossing` of the success rate ``counts / trials`` with a parametric bootstrap interval.

    ``counts``: ``(K,)`` successes out of ``trials`` (an int or ``(K,)``) at abscissae ``x (K,)``. Each bootstrap
    replicate draws every rate from its Jeffreys posterior ``Beta(k + ½, n − k + ½)``; the interval is the central
    ``confidence`` quantile range of the replicated crossings (Chapter 10). ``rng``: a ``numpy.random.Generator``
    (e.g. :func:`companion.device.numpy_rng`).
    """
    k = _np(counts).ravel()
    n = np.broadcast_to(_np(trials), k.shape)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= counts <= trials and trials > 0")
    if rng is None:
        raise ValueError("pass rng (e.g. companion.device.numpy_rng(seed)) so that the interval is reproducible")
    value = float(crossing(k / n, x, level))
    sims = crossing(rng.beta(k + 0.5, n - k + 0.5, size=(boot, k.size)), x, level)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(sims, [a, 1 - a])
    return Estimate(value, float(lo), float(hi), confidence, "Jeffreys bootstrap")


def bootstrap_crossing_exponent(
    counts, trials, x, sizes, level: float = 0.5, *, boot: int = 2000, rng=None, confidence: float = 0.95, x_per_size: bool = True
) -> Estimate:
    """Growth exponent of a crossing point with the problem size, with a joint parametric bootstrap interval.

    ``counts``: ``(D, K)`` successes out of ``trials`` (an int or ``(D, K)``) at abscissae ``x (K,)`` for each of ``D``
    problem sizes ``sizes (D,)``. At each size the crossing ``c_s`` of the success rate is found with
    :func:`crossing`; with ``x_per_size`` the abscissae are ratios to the size (e.g. ``n/d``) and the crossing point
    is ``n_s = s · c_s``. The value is the least-squares slope of ``log n_s`` on ``log s`` (``n ∝ s^slope``). Every
    bootstrap replicate redraws all rates from their Jeffreys posteriors ``Beta(k + ½, n − k + ½)`` and refits; a
    replicate that never reaches ``level`` at some size counts as ``+inf``. The interval is the central
    ``confidence`` quantile range. Paper B's sample complexity ``n ∝ d`` (Chapter 10).
    """
    k = _np(counts)
    s, xs = _np(sizes).ravel(), _np(x).ravel()
    n = np.broadcast_to(_np(trials), k.shape)
    if k.ndim != 2 or k.shape != (s.size, xs.size) or s.size < 2 or np.any(s <= 0):
        raise ValueError(f"counts must have shape (len(sizes), len(x)) = ({s.size}, {xs.size}), got {k.shape}")
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= counts <= trials and trials > 0")
    if rng is None:
        raise ValueError("pass rng (e.g. companion.device.numpy_rng(seed)) so that the interval is reproducible")
    ls = np.log(s)
    lc = ls - ls.mean()

    def slope(rates):  # (..., D, K) -> (...)
        c = crossing(rates, xs, level) * (s if x_per_size else 1.0)
        with np.errstate(invalid="ignore"):
            out = (np.log(c) @ lc) / (lc @ lc)
        return np.where(np.isfinite(c).all(-1), out, np.inf)

    value = float(slope(k / n))
    sims = slope(rng.beta(k + 0.5, n - k + 0.5, size=(boot, *k.shape)))
    a = (1 - confidence) / 2
    lo, hi = np.quantile(sims, [a, 1 - a])
    return Estimate(value, float(lo), float(hi), confidence, "Jeffreys bootstrap")
