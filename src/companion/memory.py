"""Host memory: large CPU tensors reuse freed memory instead of fresh pages from the operating system.

glibc's ``malloc`` serves every block above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and returns it
to the system on ``free``. A tensor of that size, freed and allocated again at every step of a loop (the products of
a Hessian-vector product at width ``m = 1024``, each ``8 × 1024²`` float64 numbers), then pays a page fault and the
zeroing of every 4 KiB page each time. On a 2-core virtual machine (2026-12-03) writing a fresh 64 MiB tensor took
24 ms, writing it into reused memory 8.5 ms, and one output Hessian-vector product of :ref:`ch-parameter-ball` at
width 1024 took 34 ms and 22 ms (``benchmarks/host_allocator.py``; section ``host`` of ``benchmarks/run.py``).

:func:`reuse_freed_memory` asks glibc (``mallopt``) to serve large blocks from its heap and to keep freed memory for
the next allocation, as PyTorch's CPU tuning guide suggests with jemalloc or tcmalloc. It changes where memory comes
from, never what is computed: the numbers are bit-identical. The package applies it when it is first imported (on
Linux with glibc; elsewhere it does nothing); ``COMPANION_HOST_MALLOC=default`` before the import keeps glibc's
defaults. The price is that freed memory stays with the process: its resident size is its peak use, not its current
use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["reuse_freed_memory", "state"]

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_MAX = -4
_KEEP = 2**31 - 1  # bytes of free memory at the heap's top that are kept rather than trimmed (the largest int)
_state = "default"


def reuse_freed_memory() -> bool:
    """Serve large host allocations from glibc's heap and keep freed memory for reuse (see the module docstring;
    the speed of :ref:`ch-parameter-ball`'s Lanczos runs).

    Returns
    -------
    bool
        Whether the setting was applied: ``False`` without glibc (macOS, Windows, musl) or where ``mallopt``
        refuses it; nothing is changed then.
    """
    global _state
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, _KEEP) != 1:
        return False
    _state = "reuse"
    return True


def state() -> str:
    """``"reuse"`` once :func:`reuse_freed_memory` has been applied in this process, else ``"default"``.

    Returns
    -------
    str
        The host allocator's setting.
    """
    return _state


def _apply_on_import() -> None:
    """What ``import companion`` does: :func:`reuse_freed_memory`, unless ``COMPANION_HOST_MALLOC=default``."""
    choice = os.environ.get("COMPANION_HOST_MALLOC", "reuse")
    if choice not in ("reuse", "default"):
        raise ValueError(f"COMPANION_HOST_MALLOC must be 'reuse' or 'default', got {choice!r}")
    if choice == "reuse":
        reuse_freed_memory()
