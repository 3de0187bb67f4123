"""A chapter's ``Config``, read from its source, for the seed-study tools (a tool cannot import a notebook).

    from chapter_config import config, parameter_ball_draws, parameter_ball_point
    cfg = config("13_parameter_ball", "quick")        # the chapter's Config at that scale (a frozen dataclass)
    params, X, y = parameter_ball_draws(cfg, 64, 2, offset=3, init_seed=cfg.seed + 1 + 64)
    values = parameter_ball_point(cfg, 64, 2, "fc", offset=3, init_seed=cfg.seed + 1 + 64, derivatives=True)

:func:`config` runs only two statements of the chapter's MyST source: the ``Config`` dataclass and the ``CONFIGS``
mapping, so the tools study exactly the sizes the chapter runs with, and a change of the chapter's Config reaches
them without a copy to update.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELL = re.compile(r"^```\{code-cell\} ipython3\n(.*?)^```$", re.S | re.M)


def _wanted(node: ast.stmt) -> bool:
    if isinstance(node, ast.ClassDef):
        return node.name == "Config"
    return isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIGS" for t in node.targets)


def config(chapter: str, scale: str):
    """The ``Config`` instance that ``chapter`` (a file stem under ``book/``, e.g. ``"13_parameter_ball"``) selects at
    ``scale`` (``CONFIGS[scale]``); its seed is the chapter's, to which a tool adds its offset."""
    paths = sorted(ROOT.glob(f"book/**/{chapter}.md"))
    if len(paths) != 1:
        raise ValueError(f"no single chapter source named {chapter!r} under book/ (found {len(paths)})")
    namespace: dict = {"dataclass": dataclass}
    for cell in CELL.findall(paths[0].read_text()):
        if "class Config" not in cell and "CONFIGS =" not in cell:
            continue
        body = "\n".join(line for line in cell.splitlines() if not line.startswith(":"))  # cell options
        nodes = [node for node in ast.parse(body).body if _wanted(node)]
        exec(compile(ast.Module(nodes, type_ignores=[]), str(paths[0]), "exec"), namespace)
    if "CONFIGS" not in namespace or scale not in namespace["CONFIGS"]:
        raise ValueError(f"{paths[0].name} has no CONFIGS[{scale!r}]")
    return namespace["CONFIGS"][scale]


def parameter_ball_draws(cfg, m: int, H: int, *, offset: int, init_seed: int) -> tuple:
    """``(params, X, y)`` of one point of ``ch-parameter-ball``'s sweeps, drawn as the chapter draws them
    (:func:`companion.widenet.sweep_draws` with its inputs and ensemble), every seed shifted by ``offset``;
    ``init_seed`` as in :func:`parameter_ball_point`."""
    from companion import widenet as wn

    return wn.sweep_draws(m, H, n=cfg.n, d=cfg.d, members=cfg.members, data_seed=cfg.seed + offset, init_seed=init_seed + offset)


def parameter_ball_point(cfg, m: int, H: int, arch: str, *, offset: int, init_seed: int, **flags) -> dict:
    """One point of ``ch-parameter-ball``'s sweeps as the chapter computes it (its ``sweep_point``: the chapter's
    inputs, ensemble and Lanczos steps, on the ``arch`` network) with every seed shifted by ``offset``, as
    ``COMPANION_SEED`` shifts them. ``init_seed``: the chapter's, e.g. ``cfg.seed + 1 + m`` in its width sweep;
    ``flags``: further arguments of :func:`companion.widenet.sweep_point` (``iters`` replaces the chapter's)."""
    from companion import widenet as wn

    return wn.sweep_point(
        m,
        H,
        cfg.D,
        n=cfg.n,
        d=cfg.d,
        members=cfg.members,
        net=wn.Net(arch, cfg.act, cfg.c_res),
        data_seed=cfg.seed + offset,
        init_seed=init_seed + offset,
        **{"iters": cfg.lanczos_iters, **flags},
    )


def add_offsets_argument(ap) -> None:
    """The seed-study tools' ``--offsets FIRST STOP`` (default 0 20) on an ``argparse`` parser."""
    ap.add_argument("--offsets", type=int, nargs=2, default=[0, 20], metavar=("FIRST", "STOP"))


def seed_offsets(pair) -> range:
    """``range(FIRST, STOP)`` from a parsed ``--offsets``; a ``ValueError`` unless ``0 <= FIRST < STOP``."""
    first, stop = pair
    if not 0 <= first < stop:
        raise ValueError(f"--offsets must be FIRST < STOP, both non-negative, got {first} {stop}")
    return range(first, stop)
