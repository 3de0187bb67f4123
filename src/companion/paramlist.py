"""Arithmetic on parameter lists: sums, inner products and norms per member (:ref:`ch-parameter-ball`).

A parameter list is the container of :mod:`companion.model`: tensors ``(E, …)`` with a leading ensemble axis, so
a direction ``h`` in parameter space is a list of the same shapes and every reduction here is per member, over
all tensors of the list together (e.g. paper C's ball ``‖θ − θ_0‖ ≤ D`` in :ref:`ch-parameter-ball`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from . import validation

__all__ = ["add", "dot", "sq_norm", "scale_to"]


def _check_like(params: Sequence[Tensor], h: Sequence[Tensor], names: tuple[str, str] = ("params", "h")) -> None:
    """Two lists of tensors with equal lengths, shapes, device and dtype (``ValueError`` naming the first mismatch)."""
    a, b = names
    for name, p in ((a, params), (b, h)):
        if not isinstance(p, (list, tuple)) or not p:
            raise ValueError(f"{name} must be a non-empty list of tensors with a leading ensemble axis")
    if len(params) != len(h):
        raise ValueError(f"{b} must have as many tensors as {a} ({len(params)}), got {len(h)}")
    for i, (p, q) in enumerate(zip(params, h)):
        if isinstance(p, Tensor) and isinstance(q, Tensor):
            validation.same_device(**{f"{a}[{i}]": p, f"{b}[{i}]": q})
        validation.tensor(f"{a}[{i}]", p)
        validation.tensor(f"{b}[{i}]", q)
        if p.shape != q.shape:
            raise ValueError(f"{b}[{i}] must have shape {tuple(p.shape)}, got {tuple(q.shape)}")


def add(params: Sequence[Tensor], h: Sequence[Tensor], t: float = 1.0) -> list[Tensor]:
    """``θ + t h``, tensor by tensor: lists of equal shapes ``(E, …)`` → a list of those shapes (e.g. a point of
    paper C's ball, :ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : sequence of Tensor, each (E, ...)
        The point ``θ``: a non-empty list of floating tensors with a leading ensemble axis.
    h : sequence of Tensor, each (E, ...)
        The direction, with ``params``' length, shapes, device and dtype.
    t : float
        The step along ``h``.

    Returns
    -------
    list of Tensor, each (E, ...)
        ``θ + t h``, tensor by tensor, in ``params``' shapes.

    Raises
    ------
    ValueError
        When either is not a non-empty list or tuple of finite floating tensors, or they differ in length, shape,
        device or dtype.

    Examples
    --------
    >>> import torch
    >>> from companion import paramlist
    >>> theta = [torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64)]
    >>> h = [torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64)]
    >>> [p.tolist() for p in paramlist.add(theta, h, t=0.5)][1]
    [[1.5], [1.5]]
    >>> paramlist.sq_norm(h).tolist(), paramlist.dot(theta, h).tolist()
    ([4.0, 4.0], [1.0, 1.0])
    >>> paramlist.sq_norm(paramlist.scale_to(h, 3.0)).tolist()
    [9.0, 9.0]
    """
    _check_like(params, h)
    return [p + t * q for p, q in zip(params, h)]


def sq_norm(h: Sequence[Tensor]) -> Tensor:
    """``‖h‖²`` per member over all tensors of the list, ``(E,)`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    h : sequence of Tensor, each (E, ...)
        A non-empty list of tensors with one leading ensemble axis (not checked: the engine's hot path).

    Returns
    -------
    Tensor, (E,)
        The squared Euclidean norm of each member's tensors taken together.
    """
    return sum((v**2).flatten(1).sum(1) for v in h)


def dot(h: Sequence[Tensor], g: Sequence[Tensor]) -> Tensor:
    """``⟨h, g⟩`` per member over all tensors of the lists, ``(E,)`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    h, g : sequence of Tensor, each (E, ...)
        Two lists of equal lengths, shapes, device and dtype.

    Returns
    -------
    Tensor, (E,)
        The Euclidean inner product of each member's tensors taken together.

    Raises
    ------
    ValueError
        As :func:`add`: not non-empty lists of finite floating tensors, or a mismatch of length, shape, device or
        dtype.
    """
    _check_like(h, g, ("h", "g"))
    return sum((a * b).flatten(1).sum(1) for a, b in zip(h, g))


def scale_to(h: Sequence[Tensor], D) -> list[Tensor]:
    """``h`` with every member rescaled to total norm ``D`` (a float or an ``(E,)`` tensor): a list of ``h``'s shapes
    (a direction of norm ``D`` in paper C's ball, :ref:`ch-parameter-ball`). Raises ``ValueError`` on a zero member.

    Parameters
    ----------
    h : sequence of Tensor, each (E, ...)
        A direction per member, none of them zero.
    D : float or Tensor, (E,)
        The norm each member is rescaled to (one for all, or one per member).

    Returns
    -------
    list of Tensor, each (E, ...)
        ``D h / ‖h‖`` member by member, in ``h``'s shapes.

    Raises
    ------
    ValueError
        When a member of ``h`` is zero.
    """
    nrm = sq_norm(h).sqrt()
    if bool((nrm == 0).any()):
        raise ValueError("cannot rescale a zero direction")
    c = torch.as_tensor(D, dtype=nrm.dtype, device=nrm.device) / nrm
    return [v * c.view(-1, *([1] * (v.ndim - 1))) for v in h]
