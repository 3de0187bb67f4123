"""Input checks at the public boundary: a clear ``ValueError`` naming the problem, never a silent broadcast."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["tensor", "all_finite", "positive_int", "nonnegative", "same_device"]


def tensor(name: str, x: object, ndim: int | Sequence[int] | None = None, finite: bool = True) -> Tensor:
    """Check that ``x`` is a floating tensor with the given number of dimensions and finite entries.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    x : object
        The value to check.
    ndim : int, sequence of int or None
        The allowed numbers of dimensions (``None``: any).
    finite : bool
        Whether every entry must be finite (no ``nan``, no ``inf``).

    Returns
    -------
    Tensor
        ``x`` itself, unchanged (any shape allowed by ``ndim``).

    Raises
    ------
    ValueError
        When ``x`` is not a ``torch.Tensor``, has another number of dimensions, is not floating point, or (with
        ``finite``) has a non-finite entry.

    Examples
    --------
    >>> import torch
    >>> from companion import validation
    >>> validation.tensor("X", torch.zeros(4, 3), ndim=2).shape
    torch.Size([4, 3])
    >>> validation.tensor("X", torch.zeros(4, 3), ndim=(1, 3))
    Traceback (most recent call last):
    ...
    ValueError: X must have 1 or 3 dimensions, got shape (4, 3)
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, got shape {tuple(x.shape)}")
    if not torch.is_floating_point(x):
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if finite and not all_finite(x):
        raise ValueError(f"{name} contains non-finite values (nan or inf)")
    return x


def all_finite(x: Tensor) -> bool:
    """Whether every entry of the floating tensor ``x`` is finite, from its smallest and largest entries: one
    reduction that propagates ``nan`` (:func:`torch.aminmax`), without the boolean copy of ``torch.isfinite(x)``
    (about ten times faster on a weight tensor of millions of entries, which every public function of
    :mod:`companion.widenet` checks; :ref:`ch-parameter-ball`).

    Parameters
    ----------
    x : Tensor
        A floating-point tensor (empty: ``True``).

    Returns
    -------
    bool
        ``False`` when an entry is ``nan`` or infinite.

    Examples
    --------
    >>> import torch
    >>> from companion import validation
    >>> validation.all_finite(torch.tensor([1.0, -2.0])), validation.all_finite(torch.tensor([1.0, float("nan")]))
    (True, False)
    """
    if x.numel() == 0:
        return True
    lo, hi = torch.aminmax(x.detach())
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def positive_int(name: str, value: object) -> int:
    """Check that ``value`` is an int ≥ 1 (ensemble sizes, widths, step counts).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        The value to check (a ``bool`` is not an int here).

    Returns
    -------
    int
        ``value`` itself.

    Raises
    ------
    ValueError
        When ``value`` is not an ``int`` or is below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def nonnegative(name: str, value: float) -> float:
    """Check that a scalar is finite and ≥ 0.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : float
        Anything ``float()`` accepts (a number, a 0-d tensor or array).

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    ValueError
        When ``value`` is negative, ``nan`` or infinite.
    """
    v = float(value)
    if not (v >= 0 and v < float("inf")):
        raise ValueError(f"{name} must be a finite non-negative number, got {value!r}")
    return v


def same_device(**tensors: Tensor) -> None:
    """All tensors on one device with one dtype.

    Parameters
    ----------
    ``**tensors`` : Tensor
        The tensors to compare, by name (at least one); each is compared with the first.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        Naming the first tensor on another device, or with another dtype, than the first.
    """
    items = list(tensors.items())
    n0, t0 = items[0]
    for n, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(f"{n} is on {t.device} but {n0} is on {t0.device}")
        if t.dtype != t0.dtype:
            raise ValueError(f"{n} has dtype {t.dtype} but {n0} has dtype {t0.dtype}")
