"""Input checks at the public boundary: a clear ``ValueError`` naming the problem, never a silent broadcast."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["tensor", "positive_int", "nonnegative", "same_device"]


def tensor(name: str, x: object, ndim: int | Sequence[int] | None = None, finite: bool = True) -> Tensor:
    """Check that ``x`` is a floating tensor with the given number of dimensions and finite entries."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, got shape {tuple(x.shape)}")
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains non-finite values (nan or inf)")
    return x


def positive_int(name: str, value: object) -> int:
    """Check that ``value`` is an int ≥ 1 (ensemble sizes, widths, step counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def nonnegative(name: str, value: float) -> float:
    """Check that a scalar is finite and ≥ 0."""
    v = float(value)
    if not (v >= 0 and v < float("inf")):
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    return v


def same_device(**tensors: Tensor) -> None:
    """All tensors on one device with one dtype."""
    items = list(tensors.items())
    n0, t0 = items[0]
    for n, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(f"{n} is on {t.device} but {n0} is on {t0.device}")
        if t.dtype != t0.dtype:
            raise ValueError(f"{n} has dtype {t.dtype} but {n0} has dtype {t0.dtype}")
