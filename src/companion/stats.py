"""Small statistics every chapter needs: binomial rates, Monte Carlo means, slope fits and crossing points.

Every fit and interval here returns one type, :class:`Estimate`: the point value, the two-sided interval
``[low, high]`` at its ``confidence``, the ``method`` that made the interval, and what a method has more to report
(a fit's ``intercept`` and ``stderr``, a rate's ``successes`` and ``trials``). Its ``contains(x)`` is the test most
claim rows apply, and its text is what the claim table shows (:mod:`companion.claims`). One point statistic carries
no interval: :func:`crossing` (an array of crossing points; :func:`bootstrap_crossing` gives its interval). The exact
per-ray degree fit of Lemma 4.5 is :func:`companion.smoothness.ray_degree`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as _st

__all__ = [
    "Estimate",
    "wilson",
    "clopper_pearson",
    "mean",
    "linear_slope",
    "loglog_slope",
    "semilog_slope",
    "member_slopes",
    "exp_decay_binomial",
    "crossing",
    "bootstrap_crossing",
    "bootstrap_crossing_exponent",
    "LawFit",
    "crossing_law_fit",
]


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _field(x):
    """A float for a single number; otherwise a read-only float array of its own (the estimate is frozen)."""
    if x is None:
        return None
    a = np.array(x, dtype=float)
    if a.ndim == 0:
        return float(a)
    a.flags.writeable = False
    return a


def _decimals(low: float, high: float) -> int:
    """Decimals that show the interval's width to two significant digits, at least 3 (at most 12)."""
    width = abs(high - low)
    if not math.isfinite(width) or width <= 0:
        return 3
    return min(12, max(3, 1 - math.floor(math.log10(width))))


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval ``[low, high]``: the result of every fit and interval
    of :mod:`companion.stats`, and what the claim tables show (e.g. the rates and decay fits of :ref:`ch-failures`).

    The fields hold floats for one estimate, or arrays of one shape ``(...)`` for a vectorised one (e.g.
    :func:`wilson` of an array of counts); ``contains`` then answers elementwise.

    Parameters
    ----------
    value : float or ndarray, shape (...)
        The point estimate (a rate ``k/n``, a mean, a fitted slope, a crossing point).
    low, high : float or ndarray, shape (...)
        The interval's ends.
    confidence : float
        Its coverage, in ``(0, 1)``.
    method : str
        How the interval was made (``"Wilson"``, ``"t-interval"``, ``"Wald interval"``, ``"Jeffreys bootstrap"``, …).
    intercept : float, optional
        A line fit's intercept (:func:`linear_slope` and its log forms; ``log C`` of :func:`exp_decay_binomial`).
    stderr : float or ndarray, shape (...), optional
        The standard error of ``value`` the interval was made from (fits, :func:`mean`).
    successes, trials : float or ndarray, shape (...), optional
        The counts behind a binomial rate (:func:`wilson`), shown as ``k/n`` in the text.

    Notes
    -----
    ``str`` shows ``value [low, high] (confidence% method)``, preceded by ``k/n =`` for a rate; one estimate per
    element, separated by ``;``, for a vectorised one. Numbers get three decimals, more where the interval is
    narrower than 0.01 (enough for two significant digits of its width). A format spec (``f"{est:.2f}"``) sets the
    numbers' format instead.
    """

    value: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray
    confidence: float
    method: str = ""
    intercept: float | None = None
    stderr: float | np.ndarray | None = None
    successes: float | np.ndarray | None = None
    trials: float | np.ndarray | None = None

    def __post_init__(self):
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must lie in (0, 1), got {self.confidence}")
        if not np.shape(self.value) == np.shape(self.low) == np.shape(self.high):
            raise ValueError(
                f"value, low and high must have one shape, got {np.shape(self.value)}, {np.shape(self.low)}, "
                f"{np.shape(self.high)}"
            )
        if np.any(np.asarray(self.low) > np.asarray(self.high)):  # nan ends pass: they compare False
            raise ValueError(f"an interval's low end exceeds its high end: [{self.low}, {self.high}]")

    def reciprocal(self, method: str | None = None) -> Estimate:
        """The estimate of ``1/value``: the interval of the reciprocal is ``[1/high, 1/low]``, exact for an interval
        of one sign (``1/x`` is monotone there). E.g. the exponent of the sample size needed for a given
        deviation, from the fitted exponent of the deviation in the sample size (:ref:`ch-uniform-concentration`).

        Parameters
        ----------
        method : str or None
            The new estimate's method; by default ``"reciprocal of <method>"``.

        Returns
        -------
        Estimate
            ``1/value`` in ``[1/high, 1/low]``, same confidence; the fit's intercept and standard error are dropped.

        Raises
        ------
        ValueError
            When the interval contains 0 (its reciprocal is not an interval).

        Examples
        --------
        >>> from companion import stats
        >>> print(stats.Estimate(-0.5, -0.6, -0.4, 0.99, "t-interval").reciprocal())
        -2.000 [-2.500, -1.667] (99% reciprocal of t-interval)
        """
        v, lo, hi = (np.asarray(a, dtype=float) for a in (self.value, self.low, self.high))
        if np.any((lo <= 0) & (hi >= 0)):
            raise ValueError(f"the interval [{self.low}, {self.high}] contains 0: its reciprocal is not an interval")
        default = f"reciprocal of {self.method}" if self.method else "reciprocal"
        return Estimate(_field(1 / v), _field(1 / hi), _field(1 / lo), self.confidence, default if method is None else method)

    def contains(self, x):
        """Whether ``low ≤ x ≤ high``: a bool for one estimate, a bool array (broadcast against ``x``) for a
        vectorised one or an array ``x``. ``nan`` lies in no interval.

        Parameters
        ----------
        x : float or array_like
            The value or values to test, broadcast against ``low`` and ``high``.

        Returns
        -------
        bool or ndarray of bool
            ``low ≤ x ≤ high``: a bool when both are scalars, else an array of the broadcast shape.
        """
        inside = np.logical_and(np.asarray(self.low) <= x, np.asarray(x) <= self.high)
        return bool(inside) if inside.ndim == 0 else inside

    def __format__(self, spec: str) -> str:
        v, lo, hi = (np.asarray(a, dtype=float) for a in (self.value, self.low, self.high))
        counted = self.successes is not None and self.trials is not None
        if counted:
            k, n = (np.broadcast_to(np.asarray(a, dtype=float), v.shape) for a in (self.successes, self.trials))
        parts = []
        for i in np.ndindex(v.shape):
            f = spec or f".{_decimals(float(lo[i]), float(hi[i]))}f"
            text = f"{v[i]:{f}} [{lo[i]:{f}}, {hi[i]:{f}}]"
            parts.append(f"{_count(k[i])}/{_count(n[i])} = {text}" if counted else text)
        level = f"{100 * self.confidence:.4g}%"
        return "; ".join(parts) + (f" ({level} {self.method})" if self.method else f" ({level})")

    def __str__(self) -> str:
        return self.__format__("")


# ------------------------------------------------------------------------------------------ rates and means
def _binomial_counts(successes, trials, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The counts ``k`` and trials ``n`` of :func:`wilson` and :func:`clopper_pearson` as arrays, checked: ``0 ≤ k ≤ n``,
    ``n > 0`` and ``confidence`` in ``(0, 1)`` (``ValueError`` otherwise)."""
    k, n = _np(successes), _np(trials)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= successes <= trials and trials > 0")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return k, n


def wilson(successes, trials, confidence: float = 0.95) -> Estimate:
    """Wilson score interval for a binomial proportion, for one count or vectorised.

    The rate of every failure and success count of the book: descent violations (:ref:`ch-descent`), stalls at the
    saddle (:ref:`ch-landscape`), failures of two-neuron GD (:ref:`ch-failures`), recoveries
    (:ref:`ch-sample-complexity`) and the shapes of wider networks (:ref:`ch-beyond-two`).

    Parameters
    ----------
    successes : int, array_like or Tensor, shape (...)
        Counts ``k``, with ``0 ≤ k ≤ n``.
    trials : int, array_like or Tensor, shape (...)
        Trials ``n > 0``, broadcast against ``successes``.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value = k/n`` with the Wilson interval (clipped to ``[0, 1]``), ``method = "Wilson"``, ``successes`` and
        ``trials``; floats for a single count, arrays of the broadcast shape ``(...)`` otherwise.

    Raises
    ------
    ValueError
        When not ``0 ≤ successes ≤ trials`` with ``trials > 0``, or ``confidence`` is not in ``(0, 1)``.

    Examples
    --------
    >>> from companion import stats
    >>> rate = stats.wilson(7, 40, confidence=0.99)
    >>> print(rate)
    7/40 = 0.175 [0.071, 0.372] (99% Wilson)
    >>> rate.contains(0.5), round(rate.low, 4)
    (False, 0.0706)
    >>> rates = stats.wilson([0, 20], 40)
    >>> rates.contains(0.4)
    array([False,  True])
    >>> print(rates)
    0/40 = 0.000 [0.000, 0.088]; 20/40 = 0.500 [0.352, 0.648] (95% Wilson)
    """
    k, n = _binomial_counts(successes, trials, confidence)
    z = _st.norm.ppf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    low, high = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    k, n = np.broadcast_arrays(k, n)
    return Estimate(_field(p), _field(low), _field(high), confidence, "Wilson", successes=_field(k), trials=_field(n))


def clopper_pearson(successes, trials, confidence: float = 0.95) -> Estimate:
    """Clopper–Pearson (exact) interval for a binomial proportion, for one count or vectorised: its coverage is at
    least ``confidence`` for every ``p``, where :func:`wilson`'s dips below it when ``n p`` is of order one (rare
    failures at large ``d``, :ref:`ch-failures`).

    Parameters
    ----------
    successes : int, array_like or Tensor, shape (...)
        Counts ``k``, with ``0 ≤ k ≤ n``.
    trials : int, array_like or Tensor, shape (...)
        Trials ``n > 0``, broadcast against ``successes``.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value = k/n`` with the interval ``[B(α/2; k, n−k+1), B(1−α/2; k+1, n−k)]`` (beta quantiles, ``0`` at
        ``k = 0`` and ``1`` at ``k = n``), ``method = "Clopper-Pearson"``, ``successes`` and ``trials``; floats for a
        single count, arrays of the broadcast shape ``(...)`` otherwise.

    Raises
    ------
    ValueError
        When not ``0 ≤ successes ≤ trials`` with ``trials > 0``, or ``confidence`` is not in ``(0, 1)``.

    Examples
    --------
    >>> from companion import stats
    >>> print(stats.clopper_pearson(7, 40, confidence=0.99))
    7/40 = 0.175 [0.054, 0.376] (99% Clopper-Pearson)
    >>> edges = stats.clopper_pearson([0, 40], 40)
    >>> edges.low.round(4).tolist(), edges.high.round(4).tolist()
    ([0.0, 0.9119], [0.0881, 1.0])
    """
    k, n = np.broadcast_arrays(*_binomial_counts(successes, trials, confidence))
    alpha = 1 - confidence
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, _st.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
        high = np.where(k < n, _st.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return Estimate(
        _field(k / n), _field(low), _field(high), confidence, "Clopper-Pearson", successes=_field(k), trials=_field(n)
    )


def _t_quantile(confidence: float, df: int) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(_st.t.ppf(0.5 + confidence / 2, df=df))


def mean(samples, axis: int = 0, confidence: float = 0.95) -> Estimate:
    """Monte Carlo mean with its standard error ``s/√N`` and the Student-t interval ``mean ± t_{N−1} s/√N``.

    The average over an ensemble's members (:func:`member_slopes`; the Theorem 10 fit of
    :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    samples : array_like or Tensor, shape (..., N, ...)
        ``N ≥ 2`` independent draws along ``axis``.
    axis : int
        The axis of the draws.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the mean, ``stderr`` its standard error, ``method = "t-interval"``; floats for a 1-d sample,
        arrays of the remaining shape otherwise.

    Raises
    ------
    ValueError
        When ``samples`` is empty or has fewer than two samples along ``axis``.
    """
    x = _np(samples)
    if x.ndim == 0:
        raise ValueError("need an array of samples")
    n = x.shape[axis]
    if n < 2:
        raise ValueError("need at least two samples for a standard error")
    m, se = x.mean(axis=axis), x.std(axis=axis, ddof=1) / np.sqrt(n)
    half = _t_quantile(confidence, n - 1) * se
    return Estimate(_field(m), _field(m - half), _field(m + half), confidence, "t-interval", stderr=_field(se))


# ------------------------------------------------------------------------------------------ slope fits
def _line(x: np.ndarray, y: np.ndarray, confidence: float) -> Estimate:
    res = _st.linregress(x, y)
    q = _t_quantile(confidence, x.size - 2)
    return Estimate(
        float(res.slope),
        float(res.slope - q * res.stderr),
        float(res.slope + q * res.stderr),
        confidence,
        "t-interval",
        intercept=float(res.intercept),
        stderr=float(res.stderr),
    )


def _pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = _np(x).ravel(), _np(y).ravel()
    if x.shape != y.shape or x.size < 3:
        raise ValueError("need at least three (x, y) pairs of equal length")
    return x, y


def linear_slope(x, y, confidence: float = 0.95) -> Estimate:
    """Least-squares fit ``y = intercept + slope · x`` with a Student-t interval on the slope (``N − 2`` degrees of
    freedom).

    The burn-in against ``ln(1/σ)`` of Theorem 2 (:func:`companion.phases.burn_in_slope`, :ref:`ch-three-phases`);
    :func:`loglog_slope` and :func:`semilog_slope` are this fit on logarithms.

    Parameters
    ----------
    x, y : array_like or Tensor, shape (N,)
        Finite abscissae (not all equal) and ordinates, ``N ≥ 3``.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the slope, with ``intercept`` and ``stderr``, ``method = "t-interval"``.

    Raises
    ------
    ValueError
        When ``x`` or ``y`` is not finite.

    Examples
    --------
    >>> from companion import stats
    >>> fit = stats.linear_slope([0, 1, 2, 3], [1.0, 3.1, 4.9, 7.0], confidence=0.99)
    >>> print(fit)
    1.980 [1.559, 2.401] (99% t-interval)
    >>> fit.contains(2.0), round(fit.intercept, 3), round(fit.stderr, 4)
    (True, 1.03, 0.0424)
    """
    x, y = _pairs(x, y)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("a linear fit needs finite x and y")
    return _line(x, y, confidence)


def loglog_slope(x, y, confidence: float = 0.95) -> Estimate:
    """Least-squares fit ``log y = intercept + slope · log x`` with a Student-t interval on the slope: a power law
    ``y ∝ x^slope``.

    The order of a finite-difference error (:ref:`ch-setup`), the growth of the bounds' slack with the width
    (:ref:`ch-smoothness`), the continuity of the closed-form Hessian (:ref:`ch-closed-forms`) and the loss decrease
    near the saddles of Theorem 1 (:ref:`ch-landscape`).

    Parameters
    ----------
    x, y : array_like or Tensor, shape (N,)
        Finite positive values, ``N ≥ 3``.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the exponent, with ``intercept`` (of ``log y``) and ``stderr``, ``method = "t-interval"``.

    Raises
    ------
    ValueError
        When ``x`` or ``y`` is not finite and positive.

    Examples
    --------
    >>> import numpy as np
    >>> from companion import stats
    >>> x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    >>> fit = stats.loglog_slope(x, 3 * x**-0.5 * np.array([1.01, 0.99, 1.02, 0.98, 1.0]), confidence=0.99)
    >>> print(fit)
    -0.504 [-0.551, -0.458] (99% t-interval)
    >>> fit.contains(-0.5), fit.contains(-1.0)
    (True, False)
    """
    x, y = _pairs(x, y)
    if np.any(x <= 0) or np.any(y <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise ValueError("log-log fit needs finite positive x and y")
    return _line(np.log(x), np.log(y), confidence)


def semilog_slope(t, y, confidence: float = 0.95) -> Estimate:
    """Least-squares fit ``log y = intercept + slope · t`` (``y > 0``) with a Student-t interval on the slope.

    A linear (geometric) rate: ``e^slope`` is the contraction factor per unit of ``t`` (Theorem 2's refinement phase,
    :ref:`ch-three-phases`; the depth dependence of the Gram drift, :ref:`ch-parameter-ball`).

    Parameters
    ----------
    t : array_like or Tensor, shape (N,)
        Finite abscissae, ``N ≥ 3``.
    y : array_like or Tensor, shape (N,)
        Finite positive values.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the slope of ``log y``, with ``intercept`` and ``stderr``, ``method = "t-interval"``.

    Raises
    ------
    ValueError
        When ``t`` is not finite, or ``y`` not finite and positive.
    """
    t, y = _pairs(t, y)
    if np.any(y <= 0) or not np.all(np.isfinite(t)) or not np.all(np.isfinite(y)):
        raise ValueError("a semilog fit needs finite t and finite positive y")
    return _line(t, np.log(y), confidence)


def member_slopes(x, Y, confidence: float = 0.95, *, x_min: float | None = None, semilog: bool = False) -> Estimate:
    """Mean over members of per-member log-log slopes, with a Student-t interval across members.

    Each member's slope is the least-squares slope of ``log Y[:, e]`` on ``log x`` (on ``x`` itself with
    ``semilog``: a geometric rate, as :func:`semilog_slope` fits it pooled) over ``x ≥ x_min``; the
    interval is ``mean ± t_{E−1} · s/√E`` over the ``E`` slopes (:func:`mean`). Used for rates measured on an
    ensemble: the Hessian's growth along rays (:ref:`ch-smoothness`), the O(T^(−1/L)) exponents of Theorem 4.8
    (:ref:`ch-rate`), the decay of Theorem 10's deviation (:ref:`ch-uniform-concentration`) and the width, input and
    depth exponents of paper C, the depth rates being semilog (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    x : array_like or Tensor, shape (R,)
        Positive abscissae.
    Y : array_like or Tensor, shape (R, E)
        One positive curve per member (column), ``E ≥ 2``.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.
    x_min : float, optional
        Fit only the abscissae ``x ≥ x_min`` (all by default); at least three must remain.
    semilog : bool
        Regress ``log Y`` on ``x`` rather than on ``log x`` (then ``x`` may be any finite numbers).

    Returns
    -------
    Estimate
        ``value`` the mean slope, ``stderr`` its standard error across members,
        ``method = "t-interval over members"``.

    Raises
    ------
    ValueError
        When ``Y`` is not ``(R, E)`` with ``R = len(x)``, fewer than three abscissae (after ``x_min``) or two members
        remain, the abscissae are all equal, or a value is not finite and positive.
    """
    x, Y = _np(x).ravel(), _np(Y)
    if Y.ndim != 2 or Y.shape[0] != x.size:
        raise ValueError(f"Y must have shape (R, E) with R = len(x) = {x.size}, got {Y.shape}")
    sel = np.ones(x.size, bool) if x_min is None else x >= x_min
    if sel.sum() < 3 or Y.shape[1] < 2:
        raise ValueError("need at least three abscissae (after x_min) and two members")
    lx, ly = (x[sel] if semilog else np.log(x[sel])), Y[sel]
    if np.any(~np.isfinite(lx)) or np.any(~(ly > 0)) or not np.all(np.isfinite(ly)):
        raise ValueError("semilog fits need finite x and positive Y" if semilog else "log-log fits need finite positive x and Y")
    ly = np.log(ly)
    xc = lx - lx.mean()
    if not xc @ xc > 0:
        raise ValueError(f"the abscissae must not all be equal (a slope needs a spread in x), got {x[sel].tolist()}")
    slopes = (xc @ (ly - ly.mean(axis=0))) / (xc @ xc)
    return replace(mean(slopes, confidence=confidence), method="t-interval over members")


def exp_decay_binomial(k, failures, trials, confidence: float = 0.95) -> Estimate:
    """Binomial maximum likelihood of ``p_k = C e^{−c k}`` from failure counts, with a Wald interval on ``c``.

    The interval is ``ĉ ± z · se`` with ``se`` from the inverse Fisher information of ``(log C, c)``; zero counts
    are allowed. Paper B's failure probability against the width and against the input dimension
    (:ref:`ch-failures`).

    Parameters
    ----------
    k : array_like, shape (K,)
        The abscissae (widths, dimensions), ``K ≥ 2``.
    failures : array_like, shape (K,)
        Failure counts, ``0 ≤ failures ≤ trials``, not all zero.
    trials : array_like, shape (K,)
        Runs at each ``k``, positive.
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the rate ``ĉ``, ``intercept`` the fitted ``log C``, ``stderr`` the Wald standard error of ``ĉ``,
        ``method = "Wald interval"``.

    Raises
    ------
    ValueError
        When there are fewer than two triples or their lengths differ, not ``0 ≤ failures ≤ trials`` with
        ``trials > 0``, or there are no failures at all.
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
    return Estimate(float(c), float(c - z * se), float(c + z * se), confidence, "Wald interval", intercept=float(logC), stderr=se)


# ------------------------------------------------------------------------------------------ crossing points
def crossing(p, x, level: float = 0.5) -> np.ndarray:
    """Where the running maximum of ``p`` first reaches ``level``, interpolated linearly in ``log x``: the sample
    size at which a success rate reaches one half (:ref:`ch-sample-complexity`). A point, without an interval:
    :func:`bootstrap_crossing` adds one.

    Parameters
    ----------
    p : array_like, shape (..., K)
        Values at the abscissae ``x``.
    x : array_like, shape (K,)
        Increasing positive abscissae, ``K ≥ 2``.
    level : float
        The level to reach.

    Returns
    -------
    ndarray, shape (...)
        The crossing points: ``inf`` where the level is never reached, ``x[0]`` where it is reached at once.

    Raises
    ------
    ValueError
        When ``p``'s last axis does not match ``x``, or ``x`` is not increasing and positive with at least two points.
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

    Each bootstrap replicate draws every rate from its Jeffreys posterior ``Beta(k + ½, n − k + ½)``; the interval
    is the central ``confidence`` quantile range of the replicated crossings (:ref:`ch-sample-complexity`).

    Parameters
    ----------
    counts : array_like, shape (K,)
        Successes at the abscissae ``x``.
    trials : int or array_like, shape (K,)
        Trials, positive.
    x : array_like, shape (K,)
        Increasing positive abscissae.
    level : float
        The level the rate must reach.
    boot : int
        Bootstrap replicates.
    rng : numpy.random.Generator
        Required, so that the interval is reproducible (e.g. :func:`companion.device.numpy_rng`).
    confidence : float
        Coverage of the interval, in ``(0, 1)``.

    Returns
    -------
    Estimate
        ``value`` the crossing of the measured rates (``inf`` if never reached), ``method = "Jeffreys bootstrap"``.

    Raises
    ------
    ValueError
        When not ``0 ≤ counts ≤ trials`` with ``trials > 0``, or ``rng`` is not given.
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

    At each size the crossing ``c_s`` of the success rate is found with :func:`crossing`; with ``x_per_size`` the
    abscissae are ratios to the size (e.g. ``n/d``) and the crossing point is ``n_s = s · c_s``. The value is the
    least-squares slope of ``log n_s`` on ``log s`` (``n ∝ s^slope``). Every bootstrap replicate redraws all rates
    from their Jeffreys posteriors ``Beta(k + ½, n − k + ½)`` and refits; a replicate that never reaches ``level``
    at some size counts as ``+inf``. The interval is the central ``confidence`` quantile range. Paper B's sample
    complexity ``n ∝ d`` (:ref:`ch-sample-complexity`).

    Parameters
    ----------
    counts : array_like, shape (D, K)
        Successes at the abscissae ``x`` for each of the ``D`` problem sizes.
    trials : int or array_like, shape (D, K)
        Trials, positive.
    x : array_like, shape (K,)
        Increasing positive abscissae (ratios to the size with ``x_per_size``).
    sizes : array_like, shape (D,)
        Positive problem sizes, ``D ≥ 2``.
    level : float
        The level the rate must reach.
    boot : int
        Bootstrap replicates.
    rng : numpy.random.Generator
        Required, so that the interval is reproducible (e.g. :func:`companion.device.numpy_rng`).
    confidence : float
        Coverage of the interval, in ``(0, 1)``.
    x_per_size : bool
        Whether ``x`` is a ratio to the size.

    Returns
    -------
    Estimate
        ``value`` the exponent of the measured rates, ``method = "Jeffreys bootstrap"``.

    Raises
    ------
    ValueError
        When ``counts`` is not ``(len(sizes), len(x))``, not ``0 ≤ counts ≤ trials`` with ``trials > 0``,
        or ``rng`` is not given.
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


@dataclass(frozen=True)
class LawFit:
    """A weighted least-squares fit ``n_s = c · f(s) + b`` of crossing points against a growth law ``f``, with its
    lack-of-fit test: the result of :func:`crossing_law_fit` (:ref:`ch-sample-complexity`).

    Parameters
    ----------
    law : str
        ``"linear"`` (``f(s) = s``) or ``"dlogd"`` (``f(s) = s ln s``).
    slope : Estimate
        ``c`` with its Jeffreys-bootstrap interval (``+inf`` for a replicate that never reaches the level at some
        size); ``intercept`` holds ``b``.
    points : ndarray, shape (D,)
        The crossing points ``n_s`` of the measured rates.
    scale : ndarray, shape (D,)
        Their bootstrap standard errors (half the central 68 % range of the redrawn crossings; ``inf`` where more
        than 16 % of the redraws never cross).
    chi2 : float
        ``Σ_s (n_s − c f(s) − b)² / scale_s²``.
    dof : int
        ``D − 2``.
    p_value : float
        ``P(χ²_dof ≥ chi2)``: small when the law does not fit, whichever way the points bend away from it.
    """

    law: str
    slope: Estimate
    points: np.ndarray
    scale: np.ndarray
    chi2: float
    dof: int
    p_value: float


_LAWS = {"linear": lambda s: s, "dlogd": lambda s: s * np.log(s)}


def crossing_law_fit(
    counts, trials, x, sizes, law: str = "linear", level: float = 0.5, *, boot: int = 2000, rng=None, confidence=0.99
) -> LawFit:
    """Fit the crossing points ``n_s = s · crossing_s`` of success rates to ``n_s = c · f(s) + b`` and test the fit.

    Paper B's sample complexity, Theorem 2 (:ref:`ch-sample-complexity`): ``n ∝ d`` is the law ``"linear"``, the
    nearest law a reader might believe is ``"dlogd"``. The crossings are those of :func:`crossing` (``x`` ratios to
    the size); their standard errors come from ``boot`` joint redraws of every rate from its Jeffreys posterior
    ``Beta(k + ½, n − k + ½)``. The fit is weighted by ``1 / scale²``; ``chi2`` is its weighted residual sum of squares,
    a two-sided lack-of-fit statistic with ``D − 2`` degrees of freedom. The slope's interval refits every redraw
    with the same weights.

    Parameters
    ----------
    counts : array_like, shape (D, K)
        Successes at the ratios ``x`` for each of the ``D`` sizes.
    trials : int or array_like, shape (D, K)
        Trials, positive.
    x : array_like, shape (K,)
        Increasing positive ratios ``n / s``.
    sizes : array_like, shape (D,)
        Sizes ``s > 1``, ``D ≥ 3``.
    law : str
        ``"linear"`` or ``"dlogd"``.
    level : float
        The level the rate must reach.
    boot : int
        Bootstrap replicates.
    rng : numpy.random.Generator
        Required, so that the interval is reproducible.
    confidence : float
        Coverage of the slope's interval, in ``(0, 1)``.

    Returns
    -------
    LawFit
        The slope, the points and their scales, ``chi2``, ``dof`` and ``p_value``.

    Raises
    ------
    ValueError
        On an unknown law, mismatched shapes, fewer than three sizes, a size ``≤ 1``, counts outside
        ``[0, trials]``, a missing ``rng``, or a crossing that is never reached by the measured rates.

    Examples
    --------
    A crossing at ``n/d = 3`` for every ``d``: the linear law fits, ``c ≈ 3``:

    >>> import numpy as np
    >>> from companion import stats
    >>> ratios, sizes = np.array([1, 2, 4, 8.0]), np.array([10, 20, 40, 80.0])
    >>> p = 1 / (1 + np.exp(-4 * (np.log(ratios) - np.log(3))))
    >>> fit = stats.crossing_law_fit(np.round(400 * np.tile(p, (4, 1))), 400, ratios, sizes, rng=np.random.default_rng(0))
    >>> bool(abs(fit.slope.value - 3) < 0.05 and fit.p_value > 0.5)
    True
    """
    if law not in _LAWS:
        raise ValueError(f"law must be one of {sorted(_LAWS)}, got {law!r}")
    k = _np(counts)
    s, xs = _np(sizes).ravel(), _np(x).ravel()
    n = np.broadcast_to(_np(trials), k.shape)
    if k.ndim != 2 or k.shape != (s.size, xs.size) or s.size < 3 or np.any(s <= 1):
        raise ValueError(f"counts must have shape (len(sizes), len(x)) with >= 3 sizes > 1, got {k.shape}, {s}")
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= counts <= trials and trials > 0")
    if rng is None:
        raise ValueError("pass rng (e.g. companion.device.numpy_rng(seed)) so that the interval is reproducible")
    points = crossing(k / n, xs, level) * s
    if not np.isfinite(points).all():
        raise ValueError(f"the measured rates never reach {level} at some size: {points}")
    redrawn = crossing(rng.beta(k + 0.5, n - k + 0.5, size=(boot, *k.shape)), xs, level) * s  # (boot, D)
    q16, q84 = np.quantile(redrawn, [0.158655, 0.841345], axis=0)
    with np.errstate(invalid="ignore"):
        scale = np.where(np.isfinite(q84), (q84 - q16) / 2, np.inf)
    weight = np.where(np.isfinite(scale) & (scale > 0), 1 / np.maximum(scale, 1e-300) ** 2, 0.0)
    design = np.stack([_LAWS[law](s), np.ones_like(s)], 1)  # (D, 2)
    normal = np.linalg.inv(design.T @ (weight[:, None] * design))
    project = normal @ (design.T * weight)  # (2, D): the weighted least-squares coefficients of any points

    c, b = project @ points
    chi2 = float(np.sum(weight * (points - design @ np.array([c, b])) ** 2))
    dof = s.size - 2
    with np.errstate(invalid="ignore"):
        sims = np.where(np.isfinite(redrawn).all(1), np.nan_to_num(redrawn, posinf=0.0) @ project[0], np.inf)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(sims, [a, 1 - a])
    slope = Estimate(float(c), float(lo), float(hi), confidence, "Jeffreys bootstrap", intercept=float(b))
    return LawFit(law, slope, points, scale, chi2, dof, float(_st.chi2.sf(chi2, dof)))
