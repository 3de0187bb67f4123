"""Ensemble sweeps past one device: the ensemble axis sharded over processes with ``torch.distributed``.

A chapter's experiment trains independent members; a curve at 10⁵–10⁶ seeds per point needs more than one
device holds (or more time than one device has). This module runs such an experiment under ``torchrun``::

    python -m companion.sweep CONFIG.json                                   # one process
    torchrun --standalone --nproc_per_node 2 -m companion.sweep CONFIG.json # two processes (gloo on CPU)
    torchrun --nproc_per_node 8 -m companion.sweep CONFIG.json --device cuda   # NCCL, one GPU per process
    # several nodes (e.g. SLURM): torchrun --nnodes N --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...

**Work units.** The members of one setting (e.g. one width ``k``) are cut into *blocks* of ``block``
members (the last one shorter). Block ``b`` of setting ``s`` draws its initialisation from its own CPU
generator, seeded from ``(seed + COMPANION_SEED, s, b)``, and is trained by one :func:`companion.gd.run`
call. Blocks are dealt to ranks round-robin. A member's numbers therefore depend only on the configuration:
not on the number of processes, nor on which rank trained it (the same block shapes run the same kernels),
so a 2-process run reproduces a 1-process run bit for bit (``tests/unit/test_sweep.py``). Memory per process is
one block's.

**Results.** Each block returns per-member arrays; rank 0 gathers them (``gather_object``, which works on
gloo and NCCL), assembles arrays of shape ``(settings, members)`` and writes one ``.npz`` file that a
chapter loads with :func:`load` (no ``torch.distributed`` needed to read it).

**Experiments** (the ``experiment`` key of the configuration; :data:`EXPERIMENTS`):

``failure_vs_width``
    Paper B, Section 3's remark on wide networks (:ref:`ch-failures`): ``k`` neurons, ``w_i ~ N(0, σ²/d I)``,
    ``v_i ~ N(0, σ²/k)`` (:func:`companion.relunet.gaussian_init`), GD with step ``mu`` for ``steps`` steps on
    the population loss (:func:`companion.population.make_loss_and_grad`) with target ``a = e₁``. Per
    member: ``final_loss`` (population loss after training), ``fails`` (:func:`companion.failures.failed` at ``tau``),
    ``initial_signs_agree`` (all ``v_i(0)`` of one sign), ``growth_signs_agree`` (all
    :func:`companion.relunet.growth_sign` of one sign), ``diverged``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import device as cdevice
from . import failures, gd, population, relunet, validation

__all__ = ["SweepConfig", "EXPERIMENTS", "block_generator", "blocks", "run_sweep", "save", "load", "main"]


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: ``experiment`` (a key of :data:`EXPERIMENTS`), ``members`` per setting, ``block`` members per
    work unit, ``seed`` (offset by ``COMPANION_SEED``), ``dtype``, ``out`` (the ``.npz`` path) and the
    experiment's own parameters in ``params`` (for ``failure_vs_width``: ``d``, ``ks``, ``sigma``, ``mu``,
    ``steps``, ``tau``).

    The configuration of :ref:`ch-failures`'s width sweep (paper B, Section 3's remark on wide networks).

    Parameters
    ----------
    experiment : str
        A key of :data:`EXPERIMENTS` (``"failure_vs_width"``).
    members : int
        Members per setting, ``≥ 1``.
    block : int
        Members per work unit, ``≥ 1`` (the last block of a setting may be shorter).
    seed : int
        The base seed, ``≥ 0`` (offset by ``COMPANION_SEED``).
    dtype : str
        ``"float64"`` or ``"float32"``.
    out : str
        The ``.npz`` path :func:`main` writes to.
    params : dict
        The experiment's parameters (for ``failure_vs_width``: ``d``, ``ks``, ``sigma``, ``mu``, ``steps``,
        ``tau``).

    Examples
    --------
    >>> from companion import sweep
    >>> cfg = sweep.SweepConfig("failure_vs_width", members=10, block=4,
    ...                         params={"d": 3, "ks": [2, 4], "sigma": 0.1, "mu": 0.1, "steps": 5, "tau": 0.01})
    >>> cfg.validated().block
    4
    >>> sweep.SweepConfig("failure_vs_width", members=0).validated()
    Traceback (most recent call last):
    ...
    ValueError: members must be a positive integer, got 0
    """

    experiment: str
    members: int
    block: int = 4096
    seed: int = 0
    dtype: str = "float64"
    out: str = "sweep.npz"
    params: dict = field(default_factory=dict)

    @staticmethod
    def from_file(path: str | Path) -> SweepConfig:
        """Read a JSON configuration (the keys above; unknown keys are an error).

        Parameters
        ----------
        path : str or Path
            A JSON file with the fields of :class:`SweepConfig`.

        Returns
        -------
        SweepConfig
            The configuration, validated.

        Raises
        ------
        ValueError
            On an unknown key or an invalid field (see :meth:`validated`).
        """
        raw = json.loads(Path(path).read_text())
        known = set(SweepConfig.__dataclass_fields__)
        extra = set(raw) - known
        if extra:
            raise ValueError(f"unknown configuration keys {sorted(extra)}; known: {sorted(known)}")
        return SweepConfig(**raw).validated()

    def validated(self) -> SweepConfig:
        """Check every field and the experiment's parameters; returns ``self``.

        Returns
        -------
        SweepConfig
            ``self``, unchanged.

        Raises
        ------
        ValueError
            On an unknown experiment, ``members`` or ``block`` below 1, a negative or non-int ``seed``, another
            ``dtype``, or parameters the experiment rejects (missing, unknown or out of range).
        """
        if self.experiment not in EXPERIMENTS:
            raise ValueError(f"unknown experiment {self.experiment!r}; known: {sorted(EXPERIMENTS)}")
        validation.positive_int("members", self.members)
        validation.positive_int("block", self.block)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be float64 or float32, got {self.dtype!r}")
        EXPERIMENTS[self.experiment].check(self.params)
        return self


def block_generator(seed: int, setting: int, block: int) -> torch.Generator:
    """The CPU generator of one work unit, seeded from ``(seed + COMPANION_SEED, setting, block)`` through
    ``numpy.random.SeedSequence`` (independent streams for distinct triples).

    Why a member's numbers do not depend on the number of processes (:ref:`ch-failures`'s width sweep).

    Parameters
    ----------
    seed : int
        The configuration's seed, ``≥ 0``.
    setting : int
        The index of the setting (a row of the result arrays).
    block : int
        The index of the block within the setting.

    Returns
    -------
    torch.Generator
        A seeded CPU generator.
    """
    state = np.random.SeedSequence([seed + cdevice.seed_offset(), setting, block]).generate_state(2, dtype=np.uint32)
    return torch.Generator(device="cpu").manual_seed(int(state[0]) << 32 | int(state[1]))


def blocks(members: int, block: int) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` member ranges of the blocks of one setting.

    The work units of a sweep (:ref:`ch-failures`).

    Parameters
    ----------
    members : int
        Members per setting.
    block : int
        Members per block, ``≥ 1``.

    Returns
    -------
    list of (int, int)
        ``⌈members/block⌉`` ranges covering ``0 … members−1`` in order; the last one may be shorter.

    Examples
    --------
    >>> from companion import sweep
    >>> sweep.blocks(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    return [(lo, min(lo + block, members)) for lo in range(0, members, block)]


# ------------------------------------------------------------------------------------------ experiments
@dataclass(frozen=True)
class Experiment:
    """``settings(params)`` lists the settings (one row of the result arrays each); ``run(params, setting,
    generator, size, device, dtype)`` trains ``size`` members of one setting and returns per-member numpy
    arrays ``(size,)``; ``check(params)`` validates the parameters."""

    settings: Callable[[dict], list]
    run: Callable[..., dict[str, np.ndarray]]
    check: Callable[[dict], None]


_FAILURE_KEYS = {"d", "ks", "sigma", "mu", "steps", "tau"}


def _failure_check(p: dict) -> None:
    missing, extra = _FAILURE_KEYS - set(p), set(p) - _FAILURE_KEYS
    if missing or extra:
        raise ValueError(
            f"failure_vs_width needs params {sorted(_FAILURE_KEYS)}; missing {sorted(missing)}, unknown {sorted(extra)}"
        )
    validation.positive_int("d", p["d"])
    validation.positive_int("steps", p["steps"])
    if not p["ks"] or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in p["ks"]):
        raise ValueError(f"ks must be a non-empty list of positive ints, got {p['ks']!r}")
    for name in ("sigma", "mu", "tau"):
        if not float(p[name]) > 0:
            raise ValueError(f"{name} must be positive, got {p[name]!r}")


def _failure_run(
    p: dict, k: int, generator: torch.Generator, size: int, dev: torch.device, dtype: torch.dtype
) -> dict[str, np.ndarray]:
    """``size`` members of paper B's ``k``-neuron network on the population loss (:ref:`ch-failures`'s width sweep)."""
    d = int(p["d"])
    a = relunet.unit_target(d, device=dev, dtype=dtype)
    W, v = relunet.gaussian_init(int(k), d, size, float(p["sigma"]), generator=generator, device=dev, dtype=dtype)
    res = gd.run(population.make_loss_and_grad(a), [W, v], int(p["steps"]), float(p["mu"]), progress=False)
    final = res.history["loss"][-1]
    s_g = relunet.growth_sign(W, v, a)
    out = {
        "final_loss": final,
        "fails": torch.from_numpy(failures.failed(final, a, tau=float(p["tau"]))),  # NaN counts as failed
        "initial_signs_agree": (v > 0).all(1) | (v < 0).all(1),
        "growth_signs_agree": (s_g > 0).all(1) | (s_g < 0).all(1),
        "diverged": res.diverged,
    }
    return {key: val.cpu().numpy() for key, val in out.items()}


EXPERIMENTS: dict[str, Experiment] = {
    "failure_vs_width": Experiment(settings=lambda p: list(p["ks"]), run=_failure_run, check=_failure_check),
}


# ------------------------------------------------------------------------------------------ driver
def _dist_info() -> tuple[int, int, bool]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    return 0, 1, False


def run_sweep(
    cfg: SweepConfig, *, device: str | torch.device | None = None, log: Callable[[str], None] | None = None
) -> dict | None:
    """Run ``cfg``'s work units owned by this rank and gather them on rank 0.

    Without an initialised process group it runs every unit (one process). Returns, on rank 0, a dict with
    ``settings (S,)`` and one ``(S, members)`` array per result field, plus ``meta``; ``None`` on the other
    ranks. ``device``: where the members train (default: CPU under gloo, ``cuda:LOCAL_RANK`` under NCCL,
    else the package policy).

    The width sweep of :ref:`ch-failures` (paper B, Section 3's remark on wide networks) at 10⁵–10⁶ members.

    Parameters
    ----------
    cfg : SweepConfig
        The sweep; validated first.
    device : str, torch.device or None
        Where the members train (``None``: see above).
    log : callable, ``log(str) -> None``, or None
        Called with one progress line per work unit.

    Returns
    -------
    dict or None
        On rank 0: ``settings`` ``(S,)``, one ``(S, members)`` numpy array per result field and ``meta`` (a dict:
        configuration, world size, device, backend, torch version, seed offset, seconds per rank, date); ``None``
        on the other ranks.

    Raises
    ------
    ValueError
        When ``cfg`` is invalid (see :meth:`SweepConfig.validated`).

    Examples
    --------
    >>> from companion import sweep
    >>> cfg = sweep.SweepConfig("failure_vs_width", members=3, block=2,
    ...                         params={"d": 3, "ks": [2, 4], "sigma": 0.1, "mu": 0.1, "steps": 3, "tau": 0.01})
    >>> result = sweep.run_sweep(cfg, device="cpu")
    >>> result["settings"].tolist(), result["final_loss"].shape, result["fails"].dtype
    ([2, 4], (2, 3), dtype('bool'))
    """
    cfg = cfg.validated()
    rank, world, distributed = _dist_info()
    dev = _pick_device(device, distributed)
    dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
    exp = EXPERIMENTS[cfg.experiment]
    settings = exp.settings(cfg.params)
    units = [(s, b, lo, hi) for s in range(len(settings)) for b, (lo, hi) in enumerate(blocks(cfg.members, cfg.block))]
    mine = units[rank::world]
    t0 = time.perf_counter()
    done: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for i, (s, b, lo, hi) in enumerate(mine):
        done[(s, b)] = exp.run(cfg.params, settings[s], block_generator(cfg.seed, s, b), hi - lo, dev, dtype)
        if log is not None:
            log(
                f"rank {rank}/{world}: unit {i + 1}/{len(mine)} (setting {settings[s]}, members {lo}-{hi}) "
                f"at {time.perf_counter() - t0:.1f} s"
            )
    wall = time.perf_counter() - t0
    parts = [(done, wall)]
    if distributed:
        import torch.distributed as dist

        parts = [None] * world if rank == 0 else None
        dist.gather_object((done, wall), parts, dst=0)
    if rank != 0:
        return None
    merged: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for part, _ in parts:
        merged.update(part)
    fields = sorted(next(iter(merged.values())))
    result: dict = {"settings": np.asarray(settings)}
    for f in fields:
        rows = [
            np.concatenate([merged[(s, b)][f] for b in range(len(blocks(cfg.members, cfg.block)))]) for s in range(len(settings))
        ]
        result[f] = np.stack(rows)
    result["meta"] = {
        "config": _config_dict(cfg),
        "world_size": world,
        "device": str(dev),
        "backend": _backend_name() if distributed else None,
        "torch": torch.__version__,
        "seed_offset": cdevice.seed_offset(),
        "rank_seconds": [w for _, w in parts],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return result


def _pick_device(device, distributed: bool) -> torch.device:
    if device is not None:
        dev = torch.device(device)
    elif distributed and _backend_name() == "nccl":
        dev = torch.device("cuda")
    elif distributed:
        dev = torch.device("cpu")
    else:
        dev = cdevice.get_device()
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return dev


def _backend_name() -> str:
    import torch.distributed as dist

    return str(dist.get_backend())


def _config_dict(cfg: SweepConfig) -> dict:
    return {k: getattr(cfg, k) for k in SweepConfig.__dataclass_fields__}


def save(result: dict, path: str | Path) -> Path:
    """Write :func:`run_sweep`'s result as a compressed ``.npz`` (the ``meta`` dict as a JSON string).

    The sweep files :ref:`ch-failures` reads with :func:`load`.

    Parameters
    ----------
    result : dict
        :func:`run_sweep`'s result: numpy arrays and a JSON-serialisable ``meta``.
    path : str or Path
        The file to write (its folder is created).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: v for k, v in result.items() if k != "meta"}
    np.savez_compressed(path, meta=np.asarray(json.dumps(result["meta"])), **arrays)
    return path


def load(path: str | Path) -> dict:
    """Read a sweep file written by :func:`save`: ``settings (S,)``, one ``(S, members)`` array per result
    field, and ``meta`` (configuration, world size, device, torch version, seconds per rank).

    How :ref:`ch-failures` reads a width sweep (no ``torch.distributed`` needed).

    Parameters
    ----------
    path : str or Path
        A ``.npz`` file written by :func:`save`.

    Returns
    -------
    dict
        ``settings`` ``(S,)``, one ``(S, members)`` numpy array per result field, and ``meta`` (a dict).
    """
    with np.load(Path(path), allow_pickle=False) as z:
        out = {k: z[k] for k in z.files if k != "meta"}
        out["meta"] = json.loads(str(z["meta"]))
    return out


def main(argv=None) -> int:
    """``python -m companion.sweep CONFIG [--out PATH] [--device DEV] [--members N] [--quiet]`` (under
    ``torchrun`` for several processes).

    The command line of :ref:`ch-failures`'s width sweep; ``--backend gloo|nccl`` chooses the process group's
    backend (default: NCCL with ``--device cuda``, else gloo) when ``WORLD_SIZE > 1``.

    Parameters
    ----------
    argv : list of str or None
        The arguments (``None``: ``sys.argv[1:]``).

    Returns
    -------
    int
        ``0``; rank 0 writes the ``.npz`` file and prints one line about it.

    Raises
    ------
    ValueError
        When the configuration file is invalid.
    """
    p = argparse.ArgumentParser(prog="python -m companion.sweep", description=__doc__.split("\n")[0])
    p.add_argument("config", help="JSON configuration (see companion.sweep.SweepConfig)")
    p.add_argument("--out", default=None, help="output .npz (default: the configuration's 'out')")
    p.add_argument("--device", default=None, help="cpu, cuda (default: CPU under gloo, cuda:LOCAL_RANK under NCCL)")
    p.add_argument("--backend", default=None, help="gloo or nccl (default: nccl when --device cuda, else gloo)")
    p.add_argument("--members", type=int, default=None, help="override the configuration's members per setting")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    cfg = SweepConfig.from_file(args.config)
    if args.members is not None:
        cfg = SweepConfig(**{**_config_dict(cfg), "members": args.members}).validated()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import torch.distributed as dist

        cuda = (args.device or "").startswith("cuda")
        backend = args.backend or ("nccl" if cuda else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    try:
        log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
        result = run_sweep(cfg, device=args.device, log=log)
        if result is not None:
            path = save(result, args.out or cfg.out)
            print(
                f"wrote {path}: {len(result['settings'])} settings x {cfg.members} members, "
                f"{result['meta']['world_size']} process(es), {max(result['meta']['rank_seconds']):.1f} s"
            )
    finally:
        if distributed:
            import torch.distributed as dist

            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
