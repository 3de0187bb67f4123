"""Where tensors live, in which precision, and where random numbers come from: the package's one piece of
global policy.

**Device and dtype.** CUDA when available, else CPU; ``float64`` by default, because several chapters check
inequalities and identities to 1e-12. One override, either from the environment (``COMPANION_DEVICE``,
``COMPANION_DTYPE``) or from code (:func:`set_policy`). Every public function that creates tensors takes
explicit ``device``/``dtype`` arguments that default to this policy, so nothing is hidden on a particular
device.

**Randomness.** One seed gives the same numbers on every device:

1. every random draw of the package and of the chapters comes from a seeded :class:`torch.Generator` on the
   **CPU** (:func:`generator` always returns one), and the drawn tensor is then moved to the policy device.
   CPU and CUDA generators produce different streams from one seed, so drawing on the GPU would make a
   chapter's initialisations, data and therefore its verdicts depend on the device;
2. the draws go through the samplers of this module (:func:`randn`, :func:`rand`, :func:`uniform`,
   :func:`log_uniform`, :func:`randint`, :func:`randperm`) or through the package's own samplers built on them
   (``deepnet.init_params``, ``deepnet.ball_data``, ``relunet.gaussian_data``, ``relunet.xavier_init``, …).
   Chapters never call ``torch.randn``/``rand``/``randint``/``randperm``/``normal``/``bernoulli``/``multinomial``
   themselves (``tests/book/test_book.py`` fails when one does);
3. the draw is made in the requested dtype on the CPU, so a float64 chapter is bit-identical on CPU and GPU
   (a float32 run draws other numbers: its stream is that of float32);
4. ``COMPANION_SEED=k`` offsets every seed passed to :func:`generator` by ``k``: one switch reruns every
   chapter on an independent random stream (the seed-robustness runs of the test suite and ``make seeds``).

:ref:`ch-setup` explains the policy; every chapter prints :func:`describe`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from torch import Tensor

_DTYPES = {"float64": torch.float64, "float32": torch.float32}
_policy: dict[str, object] = {"device": None, "dtype": None}

__all__ = [
    "get_device",
    "get_dtype",
    "set_policy",
    "switched_to_float64",
    "resolve",
    "seed_offset",
    "generator",
    "numpy_rng",
    "require_float64",
    "randn",
    "rand",
    "uniform",
    "log_uniform",
    "randint",
    "randperm",
    "describe",
]


def _parse_dtype(value: str | torch.dtype) -> torch.dtype:
    if isinstance(value, torch.dtype):
        if value not in _DTYPES.values():
            raise ValueError(f"dtype must be float64 or float32, got {value}")
        return value
    if value not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {value!r}")
    return _DTYPES[value]


def get_device() -> torch.device:
    """The device new tensors go to: the override if set, else CUDA if available, else CPU.

    The device policy that :ref:`ch-setup` explains: :func:`set_policy` wins, then ``COMPANION_DEVICE``, then CUDA
    when ``torch.cuda.is_available()``.

    Returns
    -------
    torch.device
        The policy device.
    """
    if _policy["device"] is not None:
        return _policy["device"]  # type: ignore[return-value]
    env = os.environ.get("COMPANION_DEVICE")
    if env:
        return torch.device(env)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def get_dtype() -> torch.dtype:
    """The floating dtype of new tensors: the override if set, else ``float64``.

    The dtype policy that :ref:`ch-setup` explains: :func:`set_policy` wins, then ``COMPANION_DTYPE``.

    Returns
    -------
    torch.dtype
        ``torch.float64`` or ``torch.float32``.

    Raises
    ------
    ValueError
        When ``COMPANION_DTYPE`` is neither ``float64`` nor ``float32``.
    """
    if _policy["dtype"] is not None:
        return _policy["dtype"]  # type: ignore[return-value]
    return _parse_dtype(os.environ.get("COMPANION_DTYPE", "float64"))


def set_policy(device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> None:
    """Override the device and/or dtype for the rest of the session (``None`` restores the default).

    The one override of the policy that :ref:`ch-setup` explains; it also clears the note left by
    :func:`require_float64`.

    Parameters
    ----------
    device : str, torch.device or None
        The device of new tensors (``"cpu"``, ``"cuda"``, ``"cuda:1"``, …); ``None``: back to ``COMPANION_DEVICE``,
        else CUDA if available, else CPU.
    dtype : str, torch.dtype or None
        ``"float64"``/``torch.float64`` or ``"float32"``/``torch.float32``; ``None``: back to ``COMPANION_DTYPE``,
        else ``float64``.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        When ``dtype`` is another dtype.
    """
    _policy["device"] = None if device is None else torch.device(device)
    _policy["dtype"] = None if dtype is None else _parse_dtype(dtype)
    _policy.pop("switched", None)


def resolve(device: str | torch.device | None = None, dtype: torch.dtype | str | None = None) -> tuple[torch.device, torch.dtype]:
    """Explicit arguments win; ``None`` falls back to the policy.

    How every public function that creates tensors reads the policy of :ref:`ch-setup`.

    Parameters
    ----------
    device : str, torch.device or None
        The requested device; ``None``: :func:`get_device`.
    dtype : torch.dtype, str or None
        The requested dtype (float64 or float32, as a dtype or its name); ``None``: :func:`get_dtype`.

    Returns
    -------
    tuple of (torch.device, torch.dtype)
        The device and dtype to use.

    Raises
    ------
    ValueError
        When ``dtype`` is neither float64 nor float32.

    Examples
    --------
    >>> from companion import device
    >>> device.resolve("cpu", "float32")
    (device(type='cpu'), torch.float32)
    """
    return (
        torch.device(device) if device is not None else get_device(),
        _parse_dtype(dtype) if dtype is not None else get_dtype(),
    )


def seed_offset() -> int:
    """The offset ``COMPANION_SEED`` adds to every seed (0 when unset); see the randomness policy above.

    The seed switch of :ref:`ch-setup`: ``COMPANION_SEED=k`` reruns every chapter on an independent random stream.

    Returns
    -------
    int
        ``k ≥ 0``.

    Raises
    ------
    ValueError
        When ``COMPANION_SEED`` is not a non-negative integer.
    """
    raw = os.environ.get("COMPANION_SEED", "0").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"COMPANION_SEED must be a non-negative integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"COMPANION_SEED must be a non-negative integer, got {raw!r}")
    return value


def generator(seed: int) -> torch.Generator:
    """A seeded CPU ``torch.Generator`` (seed ``seed + COMPANION_SEED``): the same stream on every machine.

    Always on the CPU, whatever the policy device: draw with the samplers below, which move the result to
    the device afterwards, so one seed gives bit-identical float64 draws on CPU and GPU (the randomness policy
    of :ref:`ch-setup`).

    Parameters
    ----------
    seed : int
        A non-negative seed; :func:`seed_offset` is added to it.

    Returns
    -------
    torch.Generator
        A CPU generator seeded with ``seed + COMPANION_SEED``.

    Raises
    ------
    ValueError
        When ``seed`` is not a non-negative ``int`` (a ``bool`` is not one).

    Examples
    --------
    >>> import torch
    >>> from companion import device
    >>> gen = device.generator(7)
    >>> gen.device
    device(type='cpu')
    >>> x = device.randn((2, 3), generator=gen, device="cpu", dtype=torch.float64)
    >>> x.shape, x.dtype
    (torch.Size([2, 3]), torch.float64)
    >>> torch.equal(x, device.randn((2, 3), generator=device.generator(7), device="cpu", dtype=torch.float64))
    True
    >>> device.generator(-1)
    Traceback (most recent call last):
    ...
    ValueError: seed must be a non-negative int, got -1
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return torch.Generator(device="cpu").manual_seed(seed + seed_offset())


def numpy_rng(seed: int):
    """A ``numpy.random.Generator`` seeded with ``seed + COMPANION_SEED`` (for host-side statistics such as a
    bootstrap; tensors are drawn with :func:`generator` and the samplers below).

    The randomness policy of :ref:`ch-setup`, on the host.

    Parameters
    ----------
    seed : int
        A non-negative seed; :func:`seed_offset` is added to it.

    Returns
    -------
    numpy.random.Generator
        ``numpy.random.default_rng(seed + COMPANION_SEED)``.

    Raises
    ------
    ValueError
        When ``seed`` is not a non-negative ``int``.
    """
    import numpy as np

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return np.random.default_rng(seed + seed_offset())


def require_float64(reason: str) -> None:
    """Switch the policy to float64, with a printed note, when it is float32 (``COMPANION_DTYPE=float32``).

    For a chapter whose checks need float64 resolution (``reason`` says which); the README lists them.
    :ref:`ch-setup` calls it (Lemma 4.2 is compared with autograd to 1e-12); the claim records name the switch
    (:func:`switched_to_float64`).

    Parameters
    ----------
    reason : str
        Which check needs float64, printed in the note and kept for the claim records.

    Returns
    -------
    None
        The policy device is kept; the dtype becomes float64 (nothing happens when it already is).
    """
    if get_dtype() != torch.float64:
        print(f"note: this chapter needs float64 ({reason}); running it in float64 instead of {get_dtype()}.")
        requested = get_dtype()
        set_policy(device=_policy["device"], dtype=torch.float64)
        _policy["switched"] = (str(requested).replace("torch.", ""), reason)  # the claim records say so


def switched_to_float64() -> tuple[str, str] | None:
    """``(requested dtype, reason)`` when :func:`require_float64` switched this process to float64, else None.

    Read by the claim records of every chapter (:ref:`ch-setup`), which name the dtype that was asked for.

    Returns
    -------
    tuple of (str, str) or None
        The requested dtype's name (``"float32"``) and the chapter's reason; ``None`` when no switch was made
        (or :func:`set_policy` was called since).
    """
    return _policy.get("switched")  # type: ignore[return-value]


def _check_generator(gen: torch.Generator | None) -> None:
    if gen is not None and (not isinstance(gen, torch.Generator) or gen.device.type != "cpu"):
        where = gen.device if isinstance(gen, torch.Generator) else type(gen).__name__
        raise ValueError(f"generator must be a CPU torch.Generator (see companion.device.generator), got one on {where}")


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
        raise ValueError(f"shape must be a sequence of non-negative ints, got {shape!r}")
    return shape


def randn(shape: Sequence[int] | int, *, generator: torch.Generator | None, device=None, dtype=None) -> Tensor:
    """Standard normal draws of ``shape``: drawn on the CPU from ``generator``, then moved to ``device``.

    The normal sampler of the randomness policy (:ref:`ch-setup`): initialisations and data of every chapter.

    Parameters
    ----------
    shape : int or sequence of int
        The shape of the draws (an int ``n`` is ``(n,)``).
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).
    dtype : torch.dtype, str or None
        float64 or float32 (``None``: :func:`get_dtype`); the draw is made in this dtype.

    Returns
    -------
    Tensor
        ``shape``, entries ``N(0, 1)``, of ``dtype`` on ``device``.

    Raises
    ------
    ValueError
        When ``generator`` is not a CPU ``torch.Generator``, ``shape`` is not a sequence of non-negative ints, or
        ``dtype`` is neither float64 nor float32.
    """
    _check_generator(generator)
    dev, dt = resolve(device, dtype)
    return torch.randn(_shape(shape), generator=generator, dtype=dt).to(dev)


def rand(shape: Sequence[int] | int, *, generator: torch.Generator | None, device=None, dtype=None) -> Tensor:
    """Uniform draws on ``[0, 1)`` of ``shape``: drawn on the CPU from ``generator``, then moved to ``device``.

    The uniform sampler of the randomness policy (:ref:`ch-setup`).

    Parameters
    ----------
    shape : int or sequence of int
        The shape of the draws (an int ``n`` is ``(n,)``).
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).
    dtype : torch.dtype, str or None
        float64 or float32 (``None``: :func:`get_dtype`); the draw is made in this dtype.

    Returns
    -------
    Tensor
        ``shape``, entries uniform on ``[0, 1)``, of ``dtype`` on ``device``.

    Raises
    ------
    ValueError
        When ``generator`` is not a CPU ``torch.Generator``, ``shape`` is not a sequence of non-negative ints, or
        ``dtype`` is neither float64 nor float32.
    """
    _check_generator(generator)
    dev, dt = resolve(device, dtype)
    return torch.rand(_shape(shape), generator=generator, dtype=dt).to(dev)


def uniform(
    shape: Sequence[int] | int, low: float, high: float, *, generator: torch.Generator | None, device=None, dtype=None
) -> Tensor:
    """Uniform draws on ``[low, high)`` of ``shape`` (CPU draw, then moved).

    A sampler of the randomness policy (:ref:`ch-setup`).

    Parameters
    ----------
    shape : int or sequence of int
        The shape of the draws (an int ``n`` is ``(n,)``).
    low, high : float
        The interval, finite, ``low < high``.
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).
    dtype : torch.dtype, str or None
        float64 or float32 (``None``: :func:`get_dtype`); the draw is made in this dtype.

    Returns
    -------
    Tensor
        ``shape``, entries uniform on ``[low, high)``, of ``dtype`` on ``device``.

    Raises
    ------
    ValueError
        When ``low``/``high`` are not finite with ``low < high``; as :func:`rand` otherwise.
    """
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"need finite low < high, got [{low}, {high})")
    return low + (high - low) * rand(shape, generator=generator, device=device, dtype=dtype)


def log_uniform(
    shape: Sequence[int] | int, low: float, high: float, *, generator: torch.Generator | None, device=None, dtype=None
) -> Tensor:
    """Draws whose logarithm is uniform on ``[log low, log high)`` (scales spread over decades).

    A sampler of the randomness policy (:ref:`ch-setup`), for initialisation scales and step sizes spread over
    several decades.

    Parameters
    ----------
    shape : int or sequence of int
        The shape of the draws (an int ``n`` is ``(n,)``).
    low, high : float
        The interval, ``0 < low < high < ∞``.
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).
    dtype : torch.dtype, str or None
        float64 or float32 (``None``: :func:`get_dtype`); the draw is made in this dtype.

    Returns
    -------
    Tensor
        ``shape``, entries in ``[low, high)`` with uniform logarithm, of ``dtype`` on ``device``.

    Raises
    ------
    ValueError
        When not ``0 < low < high < ∞``; as :func:`rand` otherwise.
    """
    if not (0 < low < high < math.inf):
        raise ValueError(f"need 0 < low < high < inf, got [{low}, {high})")
    return torch.exp(uniform(shape, math.log(low), math.log(high), generator=generator, device=device, dtype=dtype))


def randint(low: int, high: int, shape: Sequence[int] | int, *, generator: torch.Generator | None, device=None) -> Tensor:
    """Integers uniform on ``[low, high)`` (int64) of ``shape`` (CPU draw, then moved).

    The integer sampler of the randomness policy (:ref:`ch-setup`: random widths and dimensions).

    Parameters
    ----------
    low, high : int
        The range, ``high > low``.
    shape : int or sequence of int
        The shape of the draws (an int ``n`` is ``(n,)``).
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).

    Returns
    -------
    Tensor
        ``shape``, int64, on ``device``.

    Raises
    ------
    ValueError
        When ``high ≤ low``, ``generator`` is not a CPU ``torch.Generator`` or ``shape`` is not a sequence of
        non-negative ints.
    """
    _check_generator(generator)
    if not high > low:
        raise ValueError(f"need high > low, got [{low}, {high})")
    dev, _ = resolve(device)
    return torch.randint(low, high, _shape(shape), generator=generator).to(dev)


def randperm(n: int, *, generator: torch.Generator | None, device=None) -> Tensor:
    """A uniformly random permutation of ``0 … n−1`` (int64, CPU draw, then moved).

    The permutation sampler of the randomness policy (:ref:`ch-setup`).

    Parameters
    ----------
    n : int
        The number of items.
    generator : torch.Generator or None
        A CPU generator from :func:`generator` (``None``: torch's global CPU generator, which chapters never use).
    device : str, torch.device or None
        Where the draws go (``None``: :func:`get_device`).

    Returns
    -------
    Tensor
        ``(n,)``, int64, a permutation of ``0 … n−1``, on ``device``.

    Raises
    ------
    ValueError
        When ``generator`` is not a CPU ``torch.Generator``.
    """
    _check_generator(generator)
    dev, _ = resolve(device)
    return torch.randperm(n, generator=generator).to(dev)


def describe() -> str:
    """One line for a chapter to print: device, dtype, torch version, seed offset.

    Printed at the top of every chapter (:ref:`ch-setup`).

    Returns
    -------
    str
        ``device=<device> (<GPU name or CPU>), dtype=<dtype>, torch <version>[, seed offset <k>]``.

    Raises
    ------
    ValueError
        When ``COMPANION_DTYPE`` or ``COMPANION_SEED`` is malformed.
    """
    dev, dt = resolve()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    offset = seed_offset()
    seed = f", seed offset {offset}" if offset else ""
    return f"device={dev} ({name}), dtype={str(dt).replace('torch.', '')}, torch {torch.__version__}{seed}"
