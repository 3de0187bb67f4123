"""Certificates: an inequality in one or two variables proved on a whole box by interval branch and bound.

A sample can miss the point where a closed-form inequality fails; a certificate cannot. :func:`lower_bound` proves
``f(x) ≥ bound`` for *every* ``x`` in a box by evaluating ``f`` in ball arithmetic (python-flint's ``arb``: each
operation returns a ball guaranteed to contain the exact result) on sub-boxes, splitting a box whenever its ball
straddles the bound, until every sub-box is decided. :func:`maximum` encloses ``sup f`` over a box the same way.
Both return a :class:`Certificate` that says what was proved, with its margin and the number of boxes it took.

``f`` is written with ``arb`` operations (``x.sin()``, ``x.tanh()``, ``x.exp()``, ``+ - * /``, ``arb.pi()``, …) and
takes one ``arb`` per variable; the same function evaluated at a point gives the point's value. Where an inequality
is tight at the boundary of its domain (``f = bound`` there), no box touching it can be decided: certify on a box
that stops short of it and handle the boundary analytically (say how, next to the certificate).

Used by :ref:`ch-setup` (Assumption 3.1's constants of each activation) and :ref:`ch-pl-smoothness` (the reduced
functions of Lemmas 8, 12 and 13 and Figures 4 and 5 over ``θ ∈ [π/2, π]``).

Examples
--------
>>> from companion import certify
>>> c = certify.lower_bound(lambda t: t.sin() + 0.5, [(0.0, 3.0)])     # sin t + 1/2 > 0 on [0, 3]
>>> c.holds, c.margin > 0.49
(True, True)
>>> certify.lower_bound(lambda t: t.cos(), [(0.0, 3.0)]).holds         # cos 3 < 0: a counterexample
False
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Certificate", "lower_bound", "maximum"]

try:  # python-flint: ball arithmetic (Arb)
    from flint import arb
except ImportError:  # pragma: no cover - a dependency of the package; a clear message if it is missing
    arb = None

Box = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Certificate:
    """What a branch and bound proved over a box.

    ``holds``: the claim was proved on the whole box (``False`` when a counterexample was found or the box budget
    ran out: ``counterexample`` tells which). ``value``: for :func:`lower_bound`, a proved lower bound of
    ``min f`` over the box; for :func:`maximum`, a proved upper bound of ``sup f``. ``attained``: the best value of
    ``f`` at a point (an upper bound of the minimum, a lower bound of the supremum), and ``at``: that point, so the
    truth lies in ``[value, attained]`` (or ``[attained, value]``). ``margin``: ``value − bound`` (lower bounds).
    ``boxes``: the boxes evaluated.

    The certificates of :ref:`ch-setup` (Assumption 3.1's constants) and :ref:`ch-pl-smoothness` (Lemmas 8, 12
    and 13); made by :func:`lower_bound` and :func:`maximum`, not by hand.

    Parameters
    ----------
    holds : bool
        Whether the claim was proved on the whole box.
    value : float
        The proved bound: a lower bound of ``min f`` (:func:`lower_bound`) or an upper bound of ``sup f``
        (:func:`maximum`).
    attained : float
        The best value of ``f`` found at a point.
    at : tuple of float, (n,)
        That point, one coordinate per variable.
    boxes : int
        The number of boxes evaluated.
    margin : float
        ``value − bound`` for :func:`lower_bound`; ``nan`` for :func:`maximum`.
    counterexample : tuple of float, (n,), or None
        A point where ``f < bound`` certainly (:func:`lower_bound` only).
    method : str
        How it was proved, for the claim records.
    """

    holds: bool
    value: float
    attained: float
    at: tuple[float, ...]
    boxes: int
    margin: float = float("nan")
    counterexample: tuple[float, ...] | None = None
    method: str = "interval branch and bound (python-flint arb balls)"

    def __str__(self) -> str:
        state = "proved" if self.holds else ("counterexample" if self.counterexample else "undecided")
        return f"{state}: {self.value:.6g} (attained {self.attained:.6g}), {self.boxes} boxes"


def _need_arb() -> None:
    if arb is None:
        raise ImportError("companion.certify needs python-flint (pip install python-flint)")


def _box(domain: Sequence[Sequence[float]]) -> Box:
    box = tuple((float(lo), float(hi)) for lo, hi in domain)
    if not 1 <= len(box) <= 3 or any(not lo <= hi for lo, hi in box):
        raise ValueError(f"domain must be 1 to 3 intervals (lo <= hi), got {domain!r}")
    return box


def _ball(lo: float, hi: float):
    return arb((lo + hi) / 2, (hi - lo) / 2)


def _eval(f: Callable, box: Box):
    """The ball of ``f`` over ``box``: (lower, upper) as floats rounded outward, or None where ``f`` is undefined."""
    y = f(*(_ball(lo, hi) for lo, hi in box))
    if not y.is_finite():
        return None
    return float(y.lower()), float(y.upper())


def _point(f: Callable, x: tuple[float, ...]) -> tuple[float, float, float]:
    """``f`` at the point ``x``: (its ball's lower end, centre, upper end); NaNs where undefined."""
    y = f(*(arb(v) for v in x))
    if not y.is_finite():
        return (float("nan"),) * 3
    return float(y.lower()), float(y.mid()), float(y.upper())


def _split(box: Box) -> tuple[Box, Box]:
    k = max(range(len(box)), key=lambda i: box[i][1] - box[i][0])
    lo, hi = box[k]
    mid = (lo + hi) / 2
    left = box[:k] + ((lo, mid),) + box[k + 1 :]
    right = box[:k] + ((mid, hi),) + box[k + 1 :]
    return left, right


def _mid(box: Box) -> tuple[float, ...]:
    return tuple((lo + hi) / 2 for lo, hi in box)


def lower_bound(f: Callable, domain: Sequence[Sequence[float]], bound: float = 0.0, *, max_boxes: int = 200_000) -> Certificate:
    """Prove ``f(x) ≥ bound`` for every ``x`` in the box ``domain``.

    The certificates of :ref:`ch-setup` (Assumption 3.1's constants of each activation) and
    :ref:`ch-pl-smoothness` (the reduced functions of Lemmas 8, 12 and 13 over ``θ ∈ [π/2, π]``).

    Parameters
    ----------
    f : callable, ``f(x₁[, x₂[, x₃]]) -> arb``
        Written with python-flint ``arb`` operations, one ``arb`` argument per variable.
    domain : sequence of (float, float), (n, 2) with 1 ≤ n ≤ 3
        One ``(lo, hi)`` per variable, ``lo ≤ hi``.
    bound : float
        The claimed lower bound.
    max_boxes : int
        The budget: past it the certificate is ``undecided`` (``holds=False`` without a counterexample).

    Returns
    -------
    Certificate
        ``value``: a proved lower bound of ``min f`` over the decided boxes (over the whole box when ``holds``);
        ``attained``/``at``: the smallest value found at a point; ``margin = value − bound``;
        ``counterexample``: a point where ``f < bound`` certainly, when one was found.

    Raises
    ------
    ValueError
        When ``domain`` is not 1 to 3 intervals with ``lo ≤ hi``.
    ImportError
        When python-flint is not installed.

    Examples
    --------
    >>> from companion import certify
    >>> c = certify.lower_bound(lambda x, y: x * x + y * y + 1, [(-1.0, 1.0), (-1.0, 1.0)], bound=0.5)
    >>> c.holds, c.margin >= 0
    (True, True)
    >>> certify.lower_bound(lambda x: x - 1, [(0.0, 3.0)]).counterexample is not None   # x − 1 < 0 near 0
    True
    """
    _need_arb()
    box = _box(domain)
    count = itertools.count()
    queue: list = []
    best = (float("inf"), float("inf"), _mid(box))  # (centre, upper end) of f at the lowest point seen, the point

    def push(b: Box) -> None:
        nonlocal best
        ball = _eval(f, b)
        x = _mid(b)
        _, centre, upper = _point(f, x)
        if centre == centre and centre < best[0]:
            best = (centre, upper, x)
        heapq.heappush(queue, (ball[0] if ball else -float("inf"), next(count), b))

    push(box)
    boxes = 1
    while queue:
        low, _, b = heapq.heappop(queue)
        if low >= bound:  # the lowest box left is decided: so is every other one
            return Certificate(True, low, best[0], best[2], boxes, low - bound)
        if best[1] < bound:  # f is certainly below the bound at that point
            return Certificate(False, low, best[0], best[2], boxes, low - bound, counterexample=best[2])
        if boxes >= max_boxes:
            return Certificate(False, low, best[0], best[2], boxes, low - bound)
        for half in _split(b):
            push(half)
            boxes += 1
    raise AssertionError("unreachable: the queue is never empty before a return")  # pragma: no cover


def maximum(f: Callable, domain: Sequence[Sequence[float]], *, tol: float = 1e-7, max_boxes: int = 200_000) -> Certificate:
    """Enclose ``sup f`` over the box ``domain`` to ``tol``: ``attained ≤ sup f ≤ value``.

    A box whose ball lies below the best value found at a point cannot hold the supremum and is dropped; the others
    are split until the largest upper end left is within ``tol`` (absolute, or relative to ``|attained|`` when that
    is larger) of the best point value. ``holds`` is ``True`` when that precision was reached within ``max_boxes``.

    Encloses the suprema of :ref:`ch-setup` (``c2 = sup|σ'|``, ``c3 = sup|σ''|``) and of the reduced functions of
    :ref:`ch-pl-smoothness`.

    Parameters
    ----------
    f : callable, ``f(x₁[, x₂[, x₃]]) -> arb``
        Written with python-flint ``arb`` operations, one ``arb`` argument per variable.
    domain : sequence of (float, float), (n, 2) with 1 ≤ n ≤ 3
        One ``(lo, hi)`` per variable, ``lo ≤ hi``.
    tol : float
        The precision of the enclosure (absolute, or relative when ``|attained| > 1``).
    max_boxes : int
        The budget: past it ``holds`` is ``False`` and ``value`` the best upper bound so far.

    Returns
    -------
    Certificate
        ``value``: a proved upper bound of ``sup f``; ``attained``/``at``: the largest proved value at a point, so
        ``attained ≤ sup f ≤ value``; ``margin`` is ``nan``.

    Raises
    ------
    ValueError
        When ``domain`` is not 1 to 3 intervals with ``lo ≤ hi``.
    ImportError
        When python-flint is not installed.

    Examples
    --------
    >>> from companion import certify
    >>> m = certify.maximum(lambda t: t * (1 - t), [(0.0, 1.0)], tol=1e-6)   # sup = 1/4 at t = 1/2
    >>> m.holds, m.attained <= 0.25 <= m.value, m.value - m.attained <= 1e-6
    (True, True, True)
    """
    _need_arb()
    box = _box(domain)
    count = itertools.count()
    queue: list = []
    best_val, best_at = -float("inf"), _mid(box)

    def push(b: Box) -> None:
        nonlocal best_val, best_at
        ball = _eval(f, b)
        x = _mid(b)
        lower, _, _ = _point(f, x)  # a proved lower bound of sup f
        if lower == lower and lower > best_val:
            best_val, best_at = lower, x
        heapq.heappush(queue, (-(ball[1] if ball else float("inf")), next(count), b))

    push(box)
    boxes = 1
    while queue:
        neg_up, _, b = heapq.heappop(queue)
        upper = -neg_up
        if upper <= best_val:  # no box left can exceed the point already found
            return Certificate(True, best_val, best_val, best_at, boxes)
        if upper - best_val <= tol * max(1.0, abs(best_val)):
            return Certificate(True, upper, best_val, best_at, boxes)
        if boxes >= max_boxes:
            return Certificate(False, upper, best_val, best_at, boxes)
        for half in _split(b):
            push(half)
            boxes += 1
    raise AssertionError("unreachable: the queue is never empty before a return")  # pragma: no cover
