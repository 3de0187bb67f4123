"""Paper B's local inequalities (Lemmas 8, 12, 13) reduced to two variables, and certified on their whole region.

The three inequalities compare quadratic functions of the target ``a`` at effective weights ``w̃_i = v_i w_i``
(network ``ReLU(w̃1ᵀx) − ReLU(w̃2ᵀx)``, loss ``L = ½E[(·)²]``). With ``‖w̃2‖ = 1``, ``w̃1 = r e1``,
``w̃2 = (cos θ, sin θ)`` and the closed forms of Appendix A, each side is ``q‖a‖² + ℓᵀa + c`` with an *isotropic*
quadratic part (``∇_{w̃1}L = g1 − a/2``, ``∇_{w̃2}L = g2 + a/2``, ``L = ½E f² − ½aᵀ(w̃1 − w̃2) + ½‖a‖²``,
``‖w̃1 − a‖² + ‖w̃2 + a‖² = r² + 1 − 2aᵀ(w̃1 − w̃2) + 2‖a‖²``), so the minimum over the target of each gap is
``c − ‖ℓ‖²/(4q)``: a closed form in ``(r, θ)`` (:func:`gap`), the paper's ``h̃`` of Figures 4 and 5
(:func:`printed_figure4`, :func:`printed_figure5` are the formulas the paper prints). By homogeneity and the
symmetry that swaps the neurons and sends ``a → −a``, ``gap(r, θ) = r² gap(1/r, θ)``: ``r ∈ [0, 1]`` covers all.

Every function here is written with ``+ − × ÷``, ``sin``, ``cos`` and ``π`` only, so the same code evaluates on
floats, torch tensors, python-flint ``arb`` balls (:mod:`companion.certify`) and :class:`Jet` numbers (second-order
Taylor arithmetic, for derivatives in ball arithmetic). At ``(r, θ) = (1, π)`` — the optimum ``w̃1 = −w̃2 = a`` —
every gap vanishes, so no box touching that corner can be decided by its ball; :func:`certify_gap` certifies the
gap away from the corner and its second ``θ``-derivative in the corner, and the boundary ``θ = π`` is exact:
``gap(r, π) = C (r − 1)²`` (:func:`boundary_constant`) and ``∂_θ gap(r, π) = 0``. Explained in
:ref:`ch-pl-smoothness`.

Examples
--------
>>> from companion import pl
>>> round(pl.gap(8, 1.0, 2.0), 6) == round(pl.printed_figure4(1.0, 2.0, 0.05), 6)
True
>>> pl.certify_gap(lambda r, th: pl.gap(13, r, th), t_max=1.5708).holds
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from . import certify

try:  # python-flint: ball arithmetic (a dependency of the package, as for companion.certify)
    from flint import arb
except ImportError:  # pragma: no cover
    arb = None

__all__ = [
    "CONSTANTS",
    "Jet",
    "gap",
    "printed_figure4",
    "printed_figure5",
    "boundary_constant",
    "GapCertificate",
    "certify_gap",
]

CONSTANTS = {8: 0.05, 12: 2.5, 13: 0.05}
"""The lemmas' constants: Lemma 8's ``α``, Lemma 12's ``5/2``, Lemma 13's ``α̃ = 1/20``."""


@dataclass(frozen=True)
class Jet:
    """A second-order Taylor number ``f(x₀ + ε) = value + d1 ε + d2 ε²/2`` (forward-mode differentiation).

    ``Jet.variable(x)`` is the independent variable; ``+ − × ÷``, ``**`` (integer powers), ``sin()`` and
    ``cos()`` propagate the first and second derivatives. The components may be floats or ``arb`` balls, so a
    function written with these operations yields enclosures of its derivatives (used by :func:`certify_gap`).
    """

    value: object
    d1: object = 0.0
    d2: object = 0.0

    @staticmethod
    def variable(x, direction: float = 1.0) -> Jet:
        """The variable ``x`` (its derivative ``direction``: ``−1`` differentiates in ``t`` for ``x = π − t``).

        Parameters
        ----------
        x : float or arb
            The value.
        direction : float
            The first derivative (``1.0``: differentiate in ``x`` itself).

        Returns
        -------
        Jet
            ``Jet(x, direction, 0.0)``.
        """
        return Jet(x, direction, 0.0)

    @staticmethod
    def _lift(x) -> Jet:
        return x if isinstance(x, Jet) else Jet(x, 0.0, 0.0)

    def __add__(self, other):
        o = Jet._lift(other)
        return Jet(self.value + o.value, self.d1 + o.d1, self.d2 + o.d2)

    __radd__ = __add__

    def __neg__(self):
        return Jet(-self.value, -self.d1, -self.d2)

    def __sub__(self, other):
        return self + (-Jet._lift(other))

    def __rsub__(self, other):
        return Jet._lift(other) - self

    def __mul__(self, other):
        o = Jet._lift(other)
        return Jet(
            self.value * o.value,
            self.value * o.d1 + self.d1 * o.value,
            self.value * o.d2 + 2 * self.d1 * o.d1 + self.d2 * o.value,
        )

    __rmul__ = __mul__

    def reciprocal(self) -> Jet:
        """``1/f``: ``(1/f)' = −f'/f²``, ``(1/f)'' = 2f'²/f³ − f''/f²``.

        Returns
        -------
        Jet
            The value and the first two derivatives of ``1/f``.
        """
        inv = 1 / self.value
        return Jet(inv, -self.d1 * inv * inv, 2 * self.d1 * self.d1 * inv * inv * inv - self.d2 * inv * inv)

    def __truediv__(self, other):
        return self * (Jet._lift(other).reciprocal() if isinstance(other, Jet) else 1 / other)

    def __rtruediv__(self, other):
        return Jet._lift(other) * self.reciprocal()

    def __pow__(self, k: int):
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"Jet powers are non-negative integers, got {k!r}")
        out = Jet(1.0)
        for _ in range(k):
            out = out * self
        return out

    def sin(self) -> Jet:
        """``sin f``: ``(sin f)' = f' cos f``, ``(sin f)'' = f'' cos f − f'² sin f``.

        Returns
        -------
        Jet
            The value and the first two derivatives of ``sin f``.
        """
        s, c = _sin(self.value), _cos(self.value)
        return Jet(s, c * self.d1, -s * self.d1 * self.d1 + c * self.d2)

    def cos(self) -> Jet:
        """``cos f``: ``(cos f)' = −f' sin f``, ``(cos f)'' = −f'' sin f − f'² cos f``.

        Returns
        -------
        Jet
            The value and the first two derivatives of ``cos f``.
        """
        s, c = _sin(self.value), _cos(self.value)
        return Jet(c, -s * self.d1, -c * self.d1 * self.d1 - s * self.d2)


def _sin(x):
    return x.sin() if hasattr(x, "sin") else math.sin(x)


def _cos(x):
    return x.cos() if hasattr(x, "cos") else math.cos(x)


def _pi(x):
    base = x.value if isinstance(x, Jet) else x
    return arb.pi() if arb is not None and isinstance(base, arb) else math.pi


def _sides(r, theta):
    """The three sides as ``(q, ℓx, ℓy, c)`` at ``w̃1 = r e1``, ``w̃2 = (cos θ, sin θ)``: loss, squared gradient, error."""
    pi = _pi(theta)
    s, co = _sin(theta), _cos(theta)
    rest = pi - theta  # π − θ
    kernel = s + rest * co  # J(θ) = sin θ + (π − θ) cos θ
    # the gradients at a = 0: g1 = w̃1/2 − (‖w̃2‖ sin θ w̄1 + (π − θ) w̃2)/(2π), g2 likewise with the neurons swapped
    g1x = r / 2 - (s + rest * co) / (2 * pi)
    g1y = -rest * s / (2 * pi)
    g2x = co / 2 - (r * s * co + rest * r) / (2 * pi)
    g2y = s / 2 - r * s * s / (2 * pi)
    dx, dy = r - co, -s  # w̃1 − w̃2
    loss = (0.5, -dx / 2, -dy / 2, ((r * r + 1) / 2 - r * kernel / pi) / 2)
    grad2 = (0.5, g2x - g1x, g2y - g1y, g1x * g1x + g1y * g1y + g2x * g2x + g2y * g2y)
    err = (2.0, -2 * dx, -2 * dy, r * r + 1)
    return loss, grad2, err


def gap(lemma: int, r, theta, coef=None):
    """The minimum over the target ``a`` of a lemma's gap, at ``w̃1 = r e1``, ``w̃2 = (cos θ, sin θ)`` (Lemmas 8, 12,
    13 of paper B; :ref:`ch-pl-smoothness`).

    Parameters
    ----------
    lemma
        8: ``‖∇_{w̃1}L‖² + ‖∇_{w̃2}L‖² − α L`` (Figure 4's ``h̃``); 13: ``L − α̃ (‖w̃1 − a‖² + ‖w̃2 + a‖²)``
        (Figure 5's ``h̃``); 12: ``(5/2)(‖w̃1 − a‖² + ‖w̃2 + a‖²) − ‖∇_{w̃1}L‖² − ‖∇_{w̃2}L‖²``.
    r, theta
        ``r = ‖w̃1‖/‖w̃2‖ ≥ 0`` and the angle ``θ ∈ [0, π]``: floats, tensors (broadcast), ``arb`` balls or
        :class:`Jet` numbers. At ``r = 0`` the value is the limit ``r → 0`` (the lemmas' neurons are nonzero;
        :mod:`companion.population`'s convention for a zero neuron gives another value there).
    coef
        The lemma's constant (default :data:`CONSTANTS`); an ``arb`` for an exact ``1/20``.

    Returns
    -------
    The minimum ``c − ‖ℓ‖²/(4q)`` (times ``‖w̃2‖²``), of the type of ``theta``. The lemma holds at ``(r, θ)`` for
    every target exactly when it is ``≥ 0`` (the quadratic coefficient ``q`` is positive for the paper's constants).

    Raises
    ------
    ValueError
        For a lemma other than 8, 12, 13, or a constant that makes the gap non-convex in ``a``.
    """
    if lemma not in CONSTANTS:
        raise ValueError(f"lemma must be one of {sorted(CONSTANTS)}, got {lemma!r}")
    coef = CONSTANTS[lemma] if coef is None else coef
    loss, grad2, err = _sides(r, theta)
    first, second, sign = {8: (grad2, loss, 1), 13: (loss, err, 1), 12: (err, grad2, -1)}[lemma]
    # lemma 8, 13: first − coef·second; lemma 12: coef·first − second
    scale_first, scale_second = (1, coef) if sign > 0 else (coef, 1)
    q, lx, ly, c = (scale_first * f - scale_second * g for f, g in zip(first, second, strict=True))
    if float(q) <= 0:
        raise ValueError(f"the gap of Lemma {lemma} with constant {coef} is not convex in the target")
    return c - (lx * lx + ly * ly) / (4 * q)


def printed_figure4(r, theta, alpha=0.05):
    """The paper's printed ``h̃/‖w2‖²`` of Figure 4 (Appendix B.2, Lemma 8; :ref:`ch-pl-smoothness`).

    ``c − (α₁² + 2α₁α₂ cos θ + α₂²)/(2(1 − α))`` with
    ``c = ¼(1 − α + ((π−θ)² + 2(π−θ) sin θ cos θ + sin²θ)/π²)(r² + 1) − (1 − α/2) ((π−θ) cos θ + sin θ) r/π``,
    ``α₁ = −½((π−θ)/π + 1 − α) r + ½ sin θ/π`` and ``α₂ = ½((π−θ)/π + 1 − α) − ½ r sin θ/π`` (the coefficients of
    ``w̄1ᵀa`` and ``w̄2ᵀa`` the proof prints); at ``r = 1`` it is the printed ``c − (1 − cos θ) α₂²/(1 − α)``.
    Types as in :func:`gap`.

    Parameters
    ----------
    r, theta
        ``r = ‖w̃1‖/‖w̃2‖`` and the angle ``θ``: floats, tensors (broadcast), ``arb`` balls or :class:`Jet` numbers.
    alpha : float
        Lemma 8's constant ``α``.

    Returns
    -------
    The printed ``h̃/‖w2‖²`` at ``(r, θ)``, of the type of ``theta`` (broadcast with ``r``).
    """
    pi = _pi(theta)
    s, co = _sin(theta), _cos(theta)
    rest = pi - theta
    quad = rest * rest + 2 * rest * s * co + s * s
    c = (1 - alpha + quad / (pi * pi)) * (r * r + 1) / 4 - (1 - alpha / 2) * (rest * co + s) * r / pi
    alpha1 = -((rest / pi + 1 - alpha) * r - s / pi) / 2
    alpha2 = ((rest / pi + 1 - alpha) - s * r / pi) / 2
    return c - (alpha1 * alpha1 + 2 * alpha1 * alpha2 * co + alpha2 * alpha2) / (2 * (1 - alpha))


def printed_figure5(r, theta, alpha_t=0.05):
    """The paper's printed ``h̃/‖w̃2‖²`` of Figure 5 (Appendix B.4, Lemma 13; :ref:`ch-pl-smoothness`):
    ``(1/8 − α̃/2)(r² + 1) − ((π(1/2 + 2α̃) − θ) cos θ + sin θ) r/(2π)``. Types as in :func:`gap`.

    Parameters
    ----------
    r, theta
        ``r = ‖w̃1‖/‖w̃2‖`` and the angle ``θ``: floats, tensors (broadcast), ``arb`` balls or :class:`Jet` numbers.
    alpha_t : float
        Lemma 13's constant ``α̃``.

    Returns
    -------
    The printed ``h̃/‖w̃2‖²`` at ``(r, θ)``, of the type of ``theta`` (broadcast with ``r``).
    """
    pi = _pi(theta)
    return (1 / 8 - alpha_t / 2) * (r * r + 1) - ((pi * (0.5 + 2 * alpha_t) - theta) * _cos(theta) + _sin(theta)) * r / (2 * pi)


def boundary_constant(lemma: int, coef=None) -> float:
    """``C`` with ``gap(r, π) = C (r − 1)²`` (Lemmas 8, 12, 13; :ref:`ch-pl-smoothness`).

    At ``θ = π`` the kernel terms vanish (``sin θ = π − θ = 0``) and every side is a quadratic in ``r`` and ``a``
    along one axis: ``C = (1 − α)/8`` (Lemma 8), ``(κ − ¼)/2`` (Lemma 12, constant ``κ``), ``1/8 − α̃/2``
    (Lemma 13). Zero at ``r = 1``: the optimum ``w̃1 = −w̃2``.

    Parameters
    ----------
    lemma : int
        8, 12 or 13.
    coef : float, optional
        The lemma's constant (default :data:`CONSTANTS`).

    Returns
    -------
    float
        The constant ``C``.

    Raises
    ------
    ValueError
        For a lemma other than 8, 12, 13.
    """
    if lemma not in CONSTANTS:
        raise ValueError(f"lemma must be one of {sorted(CONSTANTS)}, got {lemma!r}")
    coef = CONSTANTS[lemma] if coef is None else float(coef)
    return {8: (1 - coef) / 8, 12: (coef - 0.25) / 2, 13: 1 / 8 - coef / 2}[lemma]


@dataclass(frozen=True)
class GapCertificate:
    """What :func:`certify_gap` proved.

    ``holds``: the gap is ``≥ 0`` on the whole region. ``margin``: a proved lower bound of the gap away from the
    corner ``(r, θ) = (1, π)`` (the smallest over the pieces). ``curvature``: a proved lower bound of
    ``∂²_θ gap`` in the corner box. ``boxes``: the boxes evaluated, all pieces together. ``pieces``: each
    piece's name, box (in ``(r, t = π − θ)``) and :class:`companion.certify.Certificate`.
    """

    holds: bool
    margin: float
    curvature: float
    boxes: int
    pieces: tuple

    def __str__(self) -> str:
        state = "proved" if self.holds else "not proved"
        return f"{state}: gap >= {self.margin:.3g} off the corner, d2/dtheta2 >= {self.curvature:.3g} in it, {self.boxes} boxes"


def _mean_value_form(f: Callable) -> Callable:
    """``(r, t) -> f(r, π − t)`` over balls, enclosed by the mean-value form ``f(m) + ∂_r f(X)(r − m_r) +
    ∂_t f(X)(t − m_t)`` (derivatives by :class:`Jet` over the whole box ``X``) intersected with the direct ball:
    the overestimation shrinks with the square of the box's width instead of linearly."""

    def value(r, t):
        direct = f(r, arb.pi() - t)
        if r.rad() == 0 and t.rad() == 0:
            return direct
        r_mid, t_mid = arb(r.mid()), arb(t.mid())
        centre = f(r_mid, arb.pi() - t_mid)
        d_r = f(Jet.variable(r), arb.pi() - t).d1
        d_t = f(r, Jet.variable(arb.pi() - t, -1.0)).d1
        if not (centre.is_finite() and d_r.is_finite() and d_t.is_finite()):
            return direct
        return direct.intersection(centre + d_r * (r - r_mid) + d_t * (t - t_mid))

    return value


def certify_gap(
    f: Callable,
    *,
    t_max: float,
    r_range: tuple[float, float] = (0.0, 1.0),
    corner: tuple[float, float] = (0.1, 0.1),
    max_boxes: int = 200_000,
) -> GapCertificate:
    """Prove ``f(r, θ) ≥ 0`` for every ``r`` in ``r_range`` and ``θ ∈ [π − t_max, π]`` (Lemmas 8, 12, 13;
    :ref:`ch-pl-smoothness`).

    ``f(r, θ)`` is written with the operations of :func:`gap` and vanishes at ``(1, π)`` with
    ``f(r, π) = C(r − 1)² ≥ 0`` and ``∂_θ f(r, π) = 0`` (true of every gap here: :func:`boundary_constant`). With
    ``t = π − θ`` (so the box reaches ``θ = π`` exactly: ``θ = arb.pi() − t``) and ``corner = (ρ, δ)``:

    - ``f ≥ 0`` is certified on ``r ≤ 1 − ρ`` (all ``t``) and on ``r ≥ 1 − ρ, t ≥ δ`` by
      :func:`companion.certify.lower_bound`;
    - in the corner ``r ≥ 1 − ρ, t ≤ δ``, ``∂²_t f ≥ 0`` is certified (in :class:`Jet` arithmetic), and Taylor's
      formula ``f(r, π − t) = f(r, π) + t ∂_t f(r, π) + ∫₀ᵗ (t − u) ∂²_u f du`` gives ``f ≥ f(r, π) ≥ 0``.

    ``t_max`` is rounded up to the next float so that the region is covered. A piece that does not apply (a
    ``r_range`` inside the corner's ``r``) is skipped.

    Parameters
    ----------
    f : callable
        The gap ``f(r, θ)``, e.g. ``lambda r, th: gap(13, r, th)``.
    t_max : float
        The region's extent in ``θ``: ``θ ∈ [π − t_max, π]``.
    r_range : (float, float)
        The region's ``r`` interval, within ``[0, 1]``.
    corner : (float, float)
        ``(ρ, δ)``: the corner is ``r ≥ 1 − ρ, t ≤ δ``, with ``0 < ρ ≤ 1`` and ``0 < δ < t_max``.
    max_boxes : int
        The most boxes :func:`companion.certify.lower_bound` evaluates for each piece.

    Returns
    -------
    GapCertificate
        Whether every piece was proved, the proved margin off the corner, the proved curvature in it, and the pieces.

    Raises
    ------
    ValueError
        Unless ``0 ≤ r_lo ≤ r_hi ≤ 1``, ``0 < ρ ≤ 1`` and ``0 < δ < t_max``.
    ImportError
        Without python-flint.
    """
    if arb is None:  # pragma: no cover
        raise ImportError("companion.pl.certify_gap needs python-flint")
    rho, delta = corner
    r_lo, r_hi = r_range
    if not (0 <= r_lo <= r_hi <= 1 and 0 < rho <= 1 and 0 < delta < t_max):
        raise ValueError(f"need 0 <= r_lo <= r_hi <= 1, 0 < rho <= 1, 0 < delta < t_max; got {r_range}, {corner}, {t_max}")
    t_hi = math.nextafter(t_max, math.inf)
    value = _mean_value_form(f)
    curvature = lambda r, t: f(r, Jet.variable(arb.pi() - t, -1.0)).d2
    pieces = []
    r_corner = max(r_lo, 1 - rho)
    if r_lo < 1 - rho:
        box = ((r_lo, min(r_hi, 1 - rho)), (0.0, t_hi))
        pieces.append(("away from r = 1", box, certify.lower_bound(value, box, max_boxes=max_boxes)))
    if r_hi >= 1 - rho:
        box = ((r_corner, r_hi), (delta, t_hi))
        pieces.append(("near r = 1, away from theta = pi", box, certify.lower_bound(value, box, max_boxes=max_boxes)))
        box = ((r_corner, r_hi), (0.0, delta))
        pieces.append(("corner: d2/dt2 >= 0", box, certify.lower_bound(curvature, box, max_boxes=max_boxes)))
    values = [c for name, _, c in pieces if not name.startswith("corner")]
    curv = [c for name, _, c in pieces if name.startswith("corner")]
    return GapCertificate(
        holds=all(c.holds for _, _, c in pieces),
        margin=min(c.value for c in values),
        curvature=min((c.value for c in curv), default=float("nan")),
        boxes=sum(c.boxes for _, _, c in pieces),
        pieces=tuple(pieces),
    )
