"""Two scales from one switch.

``COMPANION_SCALE=quick`` keeps the test suite within minutes on a 2-core machine while still testing
each claim; ``paper`` (the default, for readers) uses the paper's sizes. A chapter keeps both
configurations side by side and picks one with :func:`select`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

__all__ = ["SCALES", "current", "select"]

SCALES = ("quick", "paper")
T = TypeVar("T")


def current() -> str:
    """The active scale, read from ``COMPANION_SCALE`` (default ``paper``).

    Every chapter prints it beside :func:`companion.device.describe` (:ref:`ch-setup`).

    Returns
    -------
    str
        ``"quick"`` or ``"paper"``.

    Raises
    ------
    ValueError
        When ``COMPANION_SCALE`` names another scale.
    """
    value = os.environ.get("COMPANION_SCALE", "paper").strip().lower()
    if value not in SCALES:
        raise ValueError(f"COMPANION_SCALE must be one of {SCALES}, got {value!r}")
    return value


def select(configs: Mapping[str, T], scale: str | None = None) -> T:
    """Pick the configuration for ``scale`` (default: :func:`current`) from ``{'quick': ..., 'paper': ...}``.

    How every chapter chooses its sizes (:ref:`ch-setup` is the first).

    Parameters
    ----------
    configs : Mapping of str to object
        One configuration per scale of :data:`SCALES` (more keys are allowed and ignored).
    scale : str or None
        ``"quick"`` or ``"paper"``; ``None``: :func:`current`.

    Returns
    -------
    object
        ``configs[scale]``, as given.

    Raises
    ------
    ValueError
        When ``configs`` lacks a scale, or ``scale`` (or ``COMPANION_SCALE``) is not one of :data:`SCALES`.

    Examples
    --------
    >>> from companion import scale
    >>> configs = {"quick": {"members": 64}, "paper": {"members": 4096}}
    >>> scale.select(configs, "quick")
    {'members': 64}
    >>> scale.select({"paper": 1}, "paper")
    Traceback (most recent call last):
    ...
    ValueError: configs must define every scale; missing ['quick']
    """
    scale = current() if scale is None else scale
    missing = [s for s in SCALES if s not in configs]
    if missing:
        raise ValueError(f"configs must define every scale; missing {missing}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    return configs[scale]
