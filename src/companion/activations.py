"""Activation functions with their Assumption 3.1 constants (paper A, :ref:`ch-setup`).

Assumption 3.1 of paper A asks for constants ``c0, c1, c2, c3`` with

* ``|σ(w)| ≤ c0 + c1 |w|``            (linear growth),
* ``|σ(w1) − σ(w2)| ≤ c2 |w1 − w2|``  (σ is c2-Lipschitz, so ``|σ'| ≤ c2``),
* ``|σ'(w1) − σ'(w2)| ≤ c3 |w1 − w2|`` (σ' is c3-Lipschitz, so ``|σ''| ≤ c3``),

and Assumption 3.3 asks all of them to be ``≤ 1``. The registry stores the tightest values
(``c2 = sup|σ'|``, ``c3 = sup|σ''|``); :ref:`ch-setup` measures them on a grid and compares.
ReLU is registered for paper B but flagged non-smooth: its ``c3`` does not exist and asking raises.
:func:`certify_constants` encloses the same suprema over the whole real line with interval arithmetic
(:mod:`companion.certify` on ``[−R, R]``, an analytic bound on the tails ``|w| ≥ R``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from companion import certify

__all__ = [
    "Activation",
    "Enclosure",
    "REGISTRY",
    "SMOOTH",
    "ball_functions",
    "certify_constants",
    "get",
    "measure_constants",
]


@dataclass(frozen=True)
class Activation:
    """An activation σ with its first two derivatives and Assumption 3.1 constants.

    ``fn``, ``d1``, ``d2`` map a tensor of any shape to one of the same shape. Paper A, Assumption 3.1
    (:ref:`ch-setup`); look one up with :func:`get`.

    Parameters
    ----------
    name : str
        The registry's name (``"tanh"``).
    fn, d1 : callable, Tensor (...) -> Tensor (...)
        σ and σ', elementwise.
    d2 : callable, Tensor (...) -> Tensor (...), or None
        σ'' elementwise; ``None`` where σ' is not differentiable (ReLU).
    c0, c1 : float
        The linear-growth constants, ``|σ(w)| ≤ c0 + c1 |w|`` (Assumption 3.1, eq. 1).
    c2 : float
        The Lipschitz constant of σ, ``sup |σ'|`` (eq. 2).
    _c3 : float or None
        The Lipschitz constant of σ', ``sup |σ''|`` (eq. 3), read through :attr:`c3`; ``None`` for a non-smooth σ.
    smooth : bool
        Whether σ satisfies Assumption 3.1 (σ' Lipschitz).

    Examples
    --------
    >>> import torch
    >>> from companion import activations
    >>> tanh = activations.get("tanh")
    >>> tanh(torch.zeros(2)).tolist(), tanh.d1(torch.zeros(2)).tolist()
    ([0.0, 0.0], [1.0, 1.0])
    >>> round(tanh.c3, 4)
    0.7698
    >>> activations.get("relu").c3
    Traceback (most recent call last):
    ...
    ValueError: activation 'relu' is not smooth: ...
    """

    name: str
    fn: Callable[[Tensor], Tensor]
    d1: Callable[[Tensor], Tensor]
    d2: Callable[[Tensor], Tensor] | None
    c0: float
    c1: float
    c2: float
    _c3: float | None
    smooth: bool

    @property
    def c3(self) -> float:
        """Lipschitz constant of σ' (Assumption 3.1, eq. 3). Raises for a non-smooth σ such as ReLU.

        Paper A, Assumption 3.1 (:ref:`ch-setup`).

        Returns
        -------
        float
            ``sup |σ''|``.

        Raises
        ------
        ValueError
            For a non-smooth σ (ReLU): no finite ``c3`` exists.
        """
        if not self.smooth or self._c3 is None:
            raise ValueError(
                f"activation {self.name!r} is not smooth: σ' is discontinuous, so no finite c3 exists "
                "and paper A's Assumption 3.1 (hence Lemmas 4.3-4.7) does not apply"
            )
        return self._c3

    def constants(self) -> dict[str, float]:
        """``{'c0','c1','c2','c3'}``; raises for a non-smooth activation.

        Paper A, Assumption 3.1's constants (:ref:`ch-setup`).

        Returns
        -------
        dict of str to float
            ``{"c0": ..., "c1": ..., "c2": ..., "c3": ...}``.

        Raises
        ------
        ValueError
            For a non-smooth σ (ReLU), as :attr:`c3`.
        """
        return {"c0": self.c0, "c1": self.c1, "c2": self.c2, "c3": self.c3}

    def require_smooth(self) -> Activation:
        """Return self, or raise ``ValueError`` if σ violates Assumption 3.1 (used by paper A's bounds).

        Paper A, Assumption 3.1, on which Lemmas 4.3–4.7 rest (:ref:`ch-setup`, :ref:`ch-smoothness`).

        Returns
        -------
        Activation
            ``self``.

        Raises
        ------
        ValueError
            For a non-smooth σ (ReLU).
        """
        self.c3  # noqa: B018 -- raises for a non-smooth activation
        return self

    def __call__(self, x: Tensor) -> Tensor:
        return self.fn(x)


def _sigmoid_d1(x: Tensor) -> Tensor:
    s = torch.sigmoid(x)
    return s * (1 - s)


def _sigmoid_d2(x: Tensor) -> Tensor:
    s = torch.sigmoid(x)
    return s * (1 - s) * (1 - 2 * s)


def _softplus(x: Tensor) -> Tensor:
    # log(1 + e^x) computed exactly; torch.nn.functional.softplus switches to the identity above x = 20,
    # which makes its autograd derivative exactly 1 there instead of sigmoid(x) = 1 - O(e^-20).
    # Written as x⁺ + log1p(e^{-x⁺}) for x > 0 and log1p(e^{x⁻}) otherwise, with each branch fed only its own
    # half-line (the "double where"), so every autograd derivative is finite: torch.logaddexp's double backward
    # returns NaN for x ≲ -750 (Hessian-vector products of ch-smoothness hit this at large weights).
    pos = x > 0
    xp = torch.where(pos, x, torch.zeros_like(x))
    xn = torch.where(pos, torch.zeros_like(x), x)
    return torch.where(pos, xp + torch.log1p(torch.exp(-xp)), torch.log1p(torch.exp(xn)))


def _tanh_d1(x: Tensor) -> Tensor:
    return 1 - torch.tanh(x) ** 2


def _tanh_d2(x: Tensor) -> Tensor:
    t = torch.tanh(x)
    return -2 * t * (1 - t**2)


REGISTRY: dict[str, Activation] = {
    # σ(w) = w: |σ| = |w|, σ' = 1, σ'' = 0.
    "linear": Activation("linear", lambda x: x, torch.ones_like, torch.zeros_like, c0=0.0, c1=1.0, c2=1.0, _c3=0.0, smooth=True),
    # |tanh| ≤ 1; sup|tanh'| = 1 at 0; sup|tanh''| = 4/(3√3) at tanh(w) = ±1/√3.
    "tanh": Activation("tanh", torch.tanh, _tanh_d1, _tanh_d2, c0=1.0, c1=0.0, c2=1.0, _c3=4 / (3 * math.sqrt(3)), smooth=True),
    # 0 < s < 1; sup s' = 1/4 at 0; sup|s''| = 1/(6√3) at s = 1/2 ± 1/(2√3).
    "sigmoid": Activation(
        "sigmoid", torch.sigmoid, _sigmoid_d1, _sigmoid_d2, c0=1.0, c1=0.0, c2=0.25, _c3=1 / (6 * math.sqrt(3)), smooth=True
    ),
    # log(1+e^w) ≤ log 2 + |w|; σ' = sigmoid ≤ 1; σ'' = sigmoid' ≤ 1/4.
    "softplus": Activation(
        "softplus", _softplus, torch.sigmoid, _sigmoid_d1, c0=math.log(2.0), c1=1.0, c2=1.0, _c3=0.25, smooth=True
    ),
    # ReLU: |σ| ≤ |w|, 1-Lipschitz, but σ' jumps at 0: no c3 (paper B's activation).
    "relu": Activation("relu", torch.relu, lambda x: (x > 0).to(x.dtype), None, c0=0.0, c1=1.0, c2=1.0, _c3=None, smooth=False),
}

SMOOTH = tuple(name for name, a in REGISTRY.items() if a.smooth)


def get(name: str | Activation) -> Activation:
    """Look an activation up by name (``linear``, ``tanh``, ``sigmoid``, ``softplus``, ``relu``).

    The activations of paper A's Assumption 3.1 and paper B's ReLU (:ref:`ch-setup`).

    Parameters
    ----------
    name : str or Activation
        A name of :data:`REGISTRY` (any case), or an :class:`Activation`, returned as it is.

    Returns
    -------
    Activation
        The registered activation.

    Raises
    ------
    ValueError
        When ``name`` is not a registered name.
    """
    if isinstance(name, Activation):
        return name
    if not isinstance(name, str) or name.lower() not in REGISTRY:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name.lower()]


def measure_constants(act: str | Activation, lo: float = -50.0, hi: float = 50.0, num: int = 2_000_001) -> dict[str, float]:
    """Measure Assumption 3.1's constants of ``act`` on a uniform grid of ``[lo, hi]`` (:ref:`ch-setup`).

    Returns ``c2 = max|σ'|`` and ``c3 = max|σ''|`` (by finite differences of σ and σ', *not* the stored
    derivatives, so the check is independent), and for linear growth the smallest ``c1`` given the
    registry's ``c0`` (``max (|σ(w)| − c0)/|w|``), clipped at 0. For a non-smooth σ ``c3`` is the
    largest difference quotient of σ', which grows like 1/h as the grid is refined.

    Parameters
    ----------
    act : str or Activation
        The activation (see :func:`get`).
    lo, hi : float
        The grid's interval (always float64, on the CPU).
    num : int
        The number of grid points; the spacing is ``h = (hi − lo)/(num − 1)``.

    Returns
    -------
    dict of str to float
        ``{"c0": registry's c0, "c1": measured, "c2": measured, "c3": measured}``.

    Raises
    ------
    ValueError
        When ``act`` is not a registered name.

    Examples
    --------
    >>> from companion import activations
    >>> c = activations.measure_constants("tanh", -5.0, 5.0, num=10_001)
    >>> round(c["c2"], 4), round(c["c3"], 4)
    (1.0, 0.7698)
    """
    a = get(act)
    w = torch.linspace(lo, hi, num, dtype=torch.float64)
    h = w[1] - w[0]
    s = a.fn(w)
    ds = torch.diff(s) / h  # σ' at midpoints
    dds = torch.diff(a.d1(w)) / h  # σ'' at midpoints (difference of σ')
    nz = w.abs() > 1e-12
    c1 = torch.clamp((s.abs() - a.c0)[nz] / w.abs()[nz], min=0).max().item()
    return {"c0": a.c0, "c1": c1, "c2": ds.abs().max().item(), "c3": dds.abs().max().item()}


@dataclass(frozen=True)
class Enclosure:
    """A supremum over the whole real line, proved to lie in ``[low, high]``.

    ``low``: a value of the function at a point ``at`` (so ``sup ≥ low``); ``high``: the larger of the certified
    upper end on ``[−radius, radius]`` and the analytic bound ``tail`` on ``|w| ≥ radius``; ``boxes``: the boxes
    the branch and bound evaluated.
    """

    low: float
    high: float
    tail: float
    boxes: int
    at: float
    radius: float

    def __str__(self) -> str:
        return f"[{self.low:.12f}, {self.high:.12f}]"


def _logistic(w):
    return 1 / (1 + (-w).exp())


def _arb_tanh_derivatives(w):
    t = w.tanh()
    return 1 - t * t, -2 * t * (1 - t * t), -2 * (1 - t * t) * (1 - 3 * t * t)


def _arb_logistic_derivatives(w):
    s = _logistic(w)
    d1 = s * (1 - s)
    return d1, d1 * (1 - 2 * s), d1 * (1 - 6 * s + 6 * s * s)


def _arb_softplus_derivatives(w):
    d1, d2, d3 = _arb_logistic_derivatives(w)
    return _logistic(w), d1, d2


def _arb_linear_derivatives(w):
    return w * 0 + 1, w * 0, w * 0


# For each smooth activation, in ball arithmetic: the growth function |σ(w)| − c1|w| with the registry's c1 (its
# sup is the smallest c0 for that c1); (σ', σ'', σ''') (σ''' serves the mean-value form only); and the analytic
# bounds of |σ| − c1|w|, |σ'|, |σ''| on the tails |w| ≥ R, as functions of R:
#   linear:    |w| − |w| = 0; σ' = 1; σ'' = 0 everywhere;
#   tanh:      |tanh| < 1; sech² w ≤ 4e^{−2|w|}; |tanh''| = 2|tanh| sech² ≤ 8e^{−2|w|};
#   sigmoid:   0 < s < 1; s(1 − s) ≤ e^{−|w|}; |s''| = s(1 − s)|1 − 2s| ≤ e^{−|w|};
#   softplus:  log(1 + e^w) − |w| = log(1 + e^{−|w|}) ≤ e^{−|w|}; σ' = s < 1; σ'' = s(1 − s) ≤ e^{−|w|}.
_ARB = {
    "linear": (lambda w: w * 0, _arb_linear_derivatives, lambda R: (R * 0, R * 0 + 1, R * 0)),
    "tanh": (
        lambda w: abs(w.tanh()),
        _arb_tanh_derivatives,
        lambda R: (R * 0 + 1, 4 * (-2 * R).exp(), 8 * (-2 * R).exp()),
    ),
    "sigmoid": (_logistic, _arb_logistic_derivatives, lambda R: (R * 0 + 1, (-R).exp(), (-R).exp())),
    "softplus": (
        lambda w: (1 + w.exp()).log() - abs(w),
        _arb_softplus_derivatives,
        lambda R: ((-R).exp(), R * 0 + 1, (-R).exp()),
    ),
}


def _mean_value(g: Callable, dg: Callable) -> Callable:
    """``g`` on a ball: its natural form intersected with its mean-value form ``g(m) + g'(w)(w − m)``."""

    def form(w):
        if w.rad() == 0:
            return g(w)
        m = type(w)(w.mid())
        return g(w).intersection(g(m) + dg(w) * (w - m))

    return form


def certify_constants(act: str | Activation, radius: float = 40.0, tol: float = 1e-12) -> dict[str, Enclosure]:
    """Enclose Assumption 3.1's tightest constants of ``act`` over the whole real line (:ref:`ch-setup`).

    ``c0 = sup_w (|σ(w)| − c1 |w|)`` for the registry's ``c1`` (condition (1) holds with these two constants),
    ``c2 = sup_w |σ'(w)|`` and ``c3 = sup_w |σ''(w)|``, each proved by interval branch and bound
    (:func:`companion.certify.maximum`, python-flint balls) on ``[−radius, radius]`` and by an analytic bound on
    the tails ``|w| ≥ radius`` (the exponential decay of σ' and σ'' of tanh, sigmoid and softplus; written next
    to the code). σ' and σ'' are evaluated in their mean-value form (with the third derivative written by hand;
    a unit test checks it against autograd), so that a box near the supremum is decided without splitting it
    down to rounding size.

    Parameters
    ----------
    act
        A smooth activation of :data:`REGISTRY` (ReLU raises: it has no ``c3``).
    radius
        ``R``: the branch and bound covers ``[−R, R]``.
    tol
        The certified precision of each supremum on ``[−R, R]`` (absolute, or relative where larger than 1).

    Returns
    -------
    dict[str, Enclosure]
        ``{"c0", "c2", "c3"}``, each with ``low ≤ sup ≤ high`` over all of ℝ.

    Raises
    ------
    ValueError
        For a non-smooth activation, or ``radius ≤ 0``.
    RuntimeError
        When a branch and bound does not reach ``tol`` within its box budget.

    Examples
    --------
    >>> enc = certify_constants("tanh")["c3"]
    >>> bool(enc.low <= 4 / (3 * 3**0.5) <= enc.high), enc.high - enc.low < 1e-9
    (True, True)
    """
    a = get(act).require_smooth()
    if not radius > 0:
        raise ValueError(f"radius must be positive, got {radius!r}")
    growth, derivatives, tails = _ARB[a.name]
    tail_bounds = [float(t.upper()) for t in tails(certify.arb(radius))]
    parts = {"c0": [growth]}
    for key, k in (("c2", 0), ("c3", 1)):  # sup|g| = max(sup g, sup −g), g = σ' or σ''
        parts[key] = [
            _mean_value(lambda w, k=k, s=sign: s * derivatives(w)[k], lambda w, k=k, s=sign: s * derivatives(w)[k + 1])
            for sign in (1, -1)
        ]
    out = {}
    for (key, functions), tail in zip(parts.items(), tail_bounds, strict=True):
        certs = [certify.maximum(f, [(-radius, radius)], tol=tol) for f in functions]
        if not all(c.holds for c in certs):
            raise RuntimeError(f"{a.name} {key}: the branch and bound did not reach {tol:g}: {certs}")
        best = max(certs, key=lambda c: c.attained)
        out[key] = Enclosure(
            low=best.attained,
            high=max(max(c.value for c in certs), tail),
            tail=tail,
            boxes=sum(c.boxes for c in certs),
            at=best.at[0],
            radius=radius,
        )
    return out


def _arb_softplus(w):
    return (1 + w.exp()).log()


_ARB_FUNCTIONS = {
    "linear": lambda w: w,
    "tanh": lambda w: w.tanh(),
    "sigmoid": _logistic,
    "softplus": _arb_softplus,
}


def _arb_tanh_prime(w):
    t = w.tanh()
    return 1 - t * t


def _arb_logistic_prime(w):
    s = _logistic(w)
    return s * (1 - s)


# σ' alone, by the same operations as the first entry of _ARB's derivatives (so the enclosures are the same)
_ARB_PRIMES = {
    "linear": lambda w: w * 0 + 1,
    "tanh": _arb_tanh_prime,
    "sigmoid": _arb_logistic_prime,
    "softplus": _logistic,
}


def ball_functions(act: str | Activation) -> tuple[Callable, Callable]:
    """``(σ, σ')`` of a smooth activation in ball arithmetic: each maps a python-flint ``arb`` to an ``arb`` that
    contains the exact value (paper A's network evaluated rigorously, :ref:`ch-descent`).

    Parameters
    ----------
    act
        A smooth activation of :data:`REGISTRY`.

    Returns
    -------
    tuple
        ``(sigma, sigma_prime)``, callables on ``arb``.

    Raises
    ------
    ValueError
        For a non-smooth activation (ReLU).

    Examples
    --------
    >>> from flint import arb
    >>> sigma, sigma_prime = ball_functions("tanh")
    >>> bool(sigma_prime(arb(0)).contains(1))
    True
    """
    a = get(act).require_smooth()
    return _ARB_FUNCTIONS[a.name], _ARB_PRIMES[a.name]
