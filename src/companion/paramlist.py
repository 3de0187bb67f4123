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
    paper C's ball, :ref:`ch-parameter-ball`)."""
    _check_like(params, h)
    return [p + t * q for p, q in zip(params, h)]


def sq_norm(h: Sequence[Tensor]) -> Tensor:
    """``‖h‖²`` per member over all tensors of the list, ``(E,)`` (:ref:`ch-parameter-ball`)."""
    return sum((v**2).flatten(1).sum(1) for v in h)


def dot(h: Sequence[Tensor], g: Sequence[Tensor]) -> Tensor:
    """``⟨h, g⟩`` per member over all tensors of the lists, ``(E,)`` (:ref:`ch-parameter-ball`)."""
    _check_like(h, g, ("h", "g"))
    return sum((a * b).flatten(1).sum(1) for a, b in zip(h, g))


def scale_to(h: Sequence[Tensor], D) -> list[Tensor]:
    """``h`` with every member rescaled to total norm ``D`` (a float or an ``(E,)`` tensor): a list of ``h``'s shapes
    (a direction of norm ``D`` in paper C's ball, :ref:`ch-parameter-ball`). Raises ``ValueError`` on a zero member."""
    nrm = sq_norm(h).sqrt()
    if bool((nrm == 0).any()):
        raise ValueError("cannot rescale a zero direction")
    c = torch.as_tensor(D, dtype=nrm.dtype, device=nrm.device) / nrm
    return [v * c.view(-1, *([1] * (v.ndim - 1))) for v in h]
