"""Where tensors live and in which precision: the package's one piece of global policy.

CUDA when available, else CPU; ``float64`` by default, because several chapters check
inequalities and identities to 1e-12. One override, either from the environment
(``COMPANION_DEVICE``, ``COMPANION_DTYPE``) or from code (:func:`set_policy`).
Every public function that creates tensors takes explicit ``device``/``dtype``
arguments that default to this policy, so nothing is hidden on a particular device.
"""
from __future__ import annotations

import os

import torch

_DTYPES = {"float64": torch.float64, "float32": torch.float32}
_policy: dict[str, object] = {"device": None, "dtype": None}


def _parse_dtype(value: str | torch.dtype) -> torch.dtype:
    if isinstance(value, torch.dtype):
        if value not in _DTYPES.values():
            raise ValueError(f"dtype must be float64 or float32, got {value}")
        return value
    if value not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {value!r}")
    return _DTYPES[value]


def get_device() -> torch.device:
    """The device new tensors go to: the override if set, else CUDA if available, else CPU."""
    if _policy["device"] is not None:
        return _policy["device"]  # type: ignore[return-value]
    env = os.environ.get("COMPANION_DEVICE")
    if env:
        return torch.device(env)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def get_dtype() -> torch.dtype:
    """The floating dtype of new tensors: the override if set, else ``float64``."""
    if _policy["dtype"] is not None:
        return _policy["dtype"]  # type: ignore[return-value]
    return _parse_dtype(os.environ.get("COMPANION_DTYPE", "float64"))


def set_policy(device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> None:
    """Override the device and/or dtype for the rest of the session (``None`` restores the default)."""
    _policy["device"] = None if device is None else torch.device(device)
    _policy["dtype"] = None if dtype is None else _parse_dtype(dtype)


def resolve(device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> tuple[torch.device, torch.dtype]:
    """Explicit arguments win; ``None`` falls back to the policy."""
    return (torch.device(device) if device is not None else get_device(),
            _parse_dtype(dtype) if dtype is not None else get_dtype())


def generator(seed: int, device: str | torch.device | None = None) -> torch.Generator:
    """A seeded ``torch.Generator`` on ``device``: reruns are bit-identical on the same device."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    dev, _ = resolve(device)
    return torch.Generator(device=dev).manual_seed(seed)


def describe() -> str:
    """One line for a chapter to print: device, dtype, torch version."""
    dev, dt = resolve()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    return f"device={dev} ({name}), dtype={str(dt).replace('torch.', '')}, torch {torch.__version__}"
