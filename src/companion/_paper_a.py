"""Argument checks and small helpers shared by paper A's modules.

:mod:`companion.assumptions`, :mod:`companion.polysum`, :mod:`companion.smoothness`, :mod:`companion.ratios`,
:mod:`companion.descent`, :mod:`companion.rate` and :mod:`companion.search` check their arguments here: the depth
``L``, the width ``d_max``, the loss constant ``c_J``, a layer index ``ℓ``, norms (tensors ``≥ 0`` on one device),
a pair of parameter lists, and parameters and data on one device. Each check raises a ``ValueError`` naming the
argument. Not part of the public API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from . import deepnet, validation

__all__ = [
    "check_L",
    "check_dmax",
    "check_cJ",
    "check_ell",
    "norm",
    "same_device_norms",
    "check_devices",
    "pair",
    "grad_norms",
]


def check_L(L: int) -> int:
    """``L``, an integer ``≥ 2`` (the depth of paper A's bounds)."""
    if isinstance(L, bool) or not isinstance(L, int) or L < 2:
        raise ValueError(f"paper A's bounds need an integer depth L >= 2, got {L!r}")
    return L


def check_dmax(d_max: int) -> int:
    """``d_max``, a positive integer."""
    if isinstance(d_max, bool) or not isinstance(d_max, int) or d_max < 1:
        raise ValueError(f"d_max must be a positive integer, got {d_max!r}")
    return d_max


def check_cJ(c_J: float) -> float:
    """``c_J`` as a float, finite and ``≥ 1`` (Assumption 3.4)."""
    c = float(c_J)
    if not (c >= 1 and math.isfinite(c)):
        raise ValueError(f"Assumption 3.4 takes c_J >= 1 (finite), got {c_J!r}")
    return c


def check_ell(ell: int, L: int | None = None, lowest: int = 1) -> int:
    """A layer index ``ℓ``, an integer in ``[lowest, L]``."""
    if isinstance(ell, bool) or not isinstance(ell, int) or ell < lowest or (L is not None and ell > L):
        top = "L" if L is None else str(L)
        raise ValueError(f"layer index ell must be an integer in [{lowest}, {top}], got {ell!r}")
    return ell


def norm(name: str, x) -> Tensor:
    """``x`` as a tensor (float64 for a Python number), finite and ``≥ 0``."""
    x = torch.as_tensor(x, dtype=torch.float64) if not isinstance(x, Tensor) else x
    validation.tensor(name, x)
    if bool((x < 0).any()):
        raise ValueError(f"{name} is a norm and must be >= 0")
    return x


def same_device_norms(**named) -> dict[str, Tensor]:
    """Norm arguments as tensors on one device: Python numbers follow the first tensor; tensors on two
    devices raise ``ValueError`` naming both."""
    tensors = {k: v for k, v in named.items() if isinstance(v, Tensor)}
    if len(tensors) > 1:
        first, t0 = next(iter(tensors.items()))
        for k, t in tensors.items():
            if t.device != t0.device:
                raise ValueError(f"{k} is on {t.device} but {first} is on {t0.device}")
    ref = next(iter(tensors.values()), None)
    out = {}
    for k, v in named.items():
        if not isinstance(v, Tensor):
            v = torch.as_tensor(v, dtype=torch.float64 if ref is None else ref.dtype, device=None if ref is None else ref.device)
        out[k] = norm(k, v)
    return out


def check_devices(params1, params2=None, X=None, y=None) -> None:
    """Parameters, data and targets on one device with one dtype (``ValueError`` naming both otherwise)."""
    named = {}
    if isinstance(params1, (list, tuple)) and params1 and isinstance(params1[0], Tensor):
        named["W1"] = params1[0]
    if isinstance(params2, (list, tuple)) and params2 and isinstance(params2[0], Tensor):
        named["W2"] = params2[0]
    if isinstance(X, Tensor):
        named["X"] = X
    if isinstance(y, Tensor):
        named["y"] = y
    if len(named) > 1:
        validation.same_device(**named)


def pair(params1, params2):
    """Two parameter lists of one shape and depth ``L ≥ 2``: ``(p1, p2, ‖W1‖, ‖W2‖, ‖W2 − W1‖, W2 − W1)``, the
    norms ``(E,)``."""
    p1, p2 = deepnet.check_params(params1), deepnet.check_params(params2)
    if [w.shape for w in p1] != [w.shape for w in p2]:
        raise ValueError("W1 and W2 must have the same layer shapes")
    check_L(len(p1))
    diff = [b - a for a, b in zip(p1, p2)]
    return p1, p2, deepnet.norm(p1), deepnet.norm(p2), deepnet.norm(diff), diff


def grad_norms(grads: Sequence[Tensor], lead: int) -> Tensor:
    """``‖(g_1, …, g_L)‖`` over all layers, keeping the first ``lead`` axes."""
    return torch.sqrt(sum((g**2).flatten(lead).sum(-1) for g in grads))
