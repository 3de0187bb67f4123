"""Small statistics every chapter needs: Wilson intervals, Monte Carlo errors, log-log slope fits."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _st


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
    denom = 1 + z ** 2 / n
    centre = (p + z ** 2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / denom
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
