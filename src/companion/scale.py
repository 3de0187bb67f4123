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
    """The active scale, read from ``COMPANION_SCALE`` (default ``paper``)."""
    value = os.environ.get("COMPANION_SCALE", "paper").strip().lower()
    if value not in SCALES:
        raise ValueError(f"COMPANION_SCALE must be one of {SCALES}, got {value!r}")
    return value


def select(configs: Mapping[str, T], scale: str | None = None) -> T:
    """Pick the configuration for ``scale`` (default: :func:`current`) from ``{'quick': ..., 'paper': ...}``."""
    scale = current() if scale is None else scale
    missing = [s for s in SCALES if s not in configs]
    if missing:
        raise ValueError(f"configs must define every scale; missing {missing}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    return configs[scale]
