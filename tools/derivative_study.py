"""Chapter 13's feature-derivative rows at many seed offsets (``ch-parameter-ball``): where do their exponents sit?

    python tools/derivative_study.py --offsets 0 40 [--scale paper] [--iters 20 80] [--out values.npz]

The directional rows of :ref:`ch-parameter-ball` fit the exponent in ``m`` of ``max_h sup_{‖v‖=1} ‖Dx_h[v]‖``
(paper C, step 3.1: ``≤ T/√m``, exponent -1/2) and of ``max_h sup_{‖v‖=1} ‖Dz_h[v]‖`` (``≤ T``, exponent 0), each
the top of a per-input operator found by Lanczos (:func:`companion.widenet.feature_derivative_norms`), with a 99.9 %
t-interval over the 8 members, for the fully connected and the residual network. This script recomputes those
values alone, on exactly the draws of the chapter's width sweep (:func:`companion.widenet.sweep_point` with the
chapter's arguments and seeds shifted by each offset, as ``COMPANION_SEED`` shifts them; only the measurements the
rows do not use are switched off, which moves no draw), with the chapter's Lanczos steps and with more, and prints
for each row the mean exponent, how often the interval misses the paper's exponent and how often it contains the
control, and the local exponents of the mean log-value between consecutive widths.
"""

from __future__ import annotations

import argparse

import numpy as np
from chapter_config import config, parameter_ball_point

CFG = {scale: config("13_parameter_ball", scale) for scale in ("quick", "paper")}  # the chapter's Config
# the derivatives stop at hess_max_width; the residual sweep stops at res_max_width, which is not below it at either scale
WIDTHS = {scale: tuple(m for m in cfg.widths if m <= cfg.hess_max_width) for scale, cfg in CFG.items()}
if any(cfg.res_max_width < cfg.hess_max_width for cfg in CFG.values()):
    raise ValueError("the chapter's residual width sweep now stops below hess_max_width: give each network its widths")
ROWS = {  # key of sweep_point: (paper's exponent, control), as the chapter's rows test them
    "deriv_x": (-0.5, 0.0),
    "deriv_z": (0.0, -0.5),
}


def values(offset: int, scale: str, iters: int, widths: tuple | None = None) -> tuple[dict, dict]:
    """``{(arch, key): (widths, members)}`` and ``{arch: (widths, members)}`` of the Lanczos convergence ratios, at
    one seed offset (the chapter's seeds plus ``offset``) with ``iters`` Lanczos steps, at the scale's widths or at
    ``widths``."""
    cfg = CFG[scale]
    out, conv = {}, {}
    for arch in ("fc", "res"):
        points = [
            parameter_ball_point(
                cfg,
                m,
                cfg.H_width,
                arch,
                offset=offset,
                init_seed=cfg.seed + 1 + m,
                iters=iters,
                hessian=False,
                taylor=False,
                entry=False,
                derivatives=True,
            )
            for m in widths or WIDTHS[scale]
        ]
        for key in ROWS:
            out[arch, key] = np.stack([p[key] for p in points])
        conv[arch] = np.stack([p["deriv_conv"] for p in points])
    return out, conv


def summary(widths, runs: np.ndarray, expected: float, control: float, confidence: float = CFG["paper"].confidence):
    """For ``runs`` ``(offsets, widths, members)``: the mean exponent, the share of offsets whose interval misses
    ``expected``, the share whose interval contains ``control``, the smallest distance from ``expected`` to an end
    of an interval that contains it, and the local exponents of the mean log-value."""
    from companion import stats

    fits = [stats.member_slopes(widths, Y, confidence) for Y in runs]
    logs = np.log(runs).mean(axis=(0, 2))
    margins = [min(expected - f.low, f.high - expected) for f in fits if f.contains(expected)]
    return {
        "mean": float(np.mean([f.value for f in fits])),
        "misses": float(np.mean([not f.contains(expected) for f in fits])),
        "accepts_control": float(np.mean([f.contains(control) for f in fits])),
        "margin": float(min(margins)) if margins else float("nan"),
        "local": (np.diff(logs) / np.diff(np.log(widths))).tolist(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=int, nargs=2, default=[0, 20], metavar=("FIRST", "STOP"))
    ap.add_argument("--scale", choices=sorted(WIDTHS), default="paper")
    ap.add_argument("--iters", type=int, nargs="+", default=None, help="Lanczos steps (default: the chapter's)")
    ap.add_argument("--out", default=None, help="also save the values (npz, one array per arch, key and iters)")
    args = ap.parse_args(argv)
    first, stop = args.offsets
    if not 0 <= first < stop:
        raise ValueError(f"--offsets must be FIRST < STOP, both non-negative, got {first} {stop}")
    iters = args.iters or [CFG[args.scale].lanczos_iters]
    if min(iters) < 1:
        raise ValueError(f"--iters must be positive, got {iters}")
    offsets, widths = range(first, stop), WIDTHS[args.scale]
    saved = {"offsets": np.asarray(offsets), "widths": np.asarray(widths)}
    print(f"{args.scale} widths {widths}, seed offsets {first}-{stop - 1} ({len(offsets)}):")
    print("| network | quantity | Lanczos steps | mean exponent | misses | contains control | margin | "
          "largest conv. ratio | local exponents |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for it in iters:
        got = [values(k, args.scale, it) for k in offsets]
        for arch in ("fc", "res"):
            conv = np.stack([c[arch] for _, c in got])
            for key, (expected, control) in ROWS.items():
                runs = np.stack([v[arch, key] for v, _ in got])
                saved[f"{arch}_{key}_{it}"] = runs
                s = summary(widths, runs, expected, control)
                local = ", ".join(f"{v:.4f}" for v in s["local"])
                print(
                    f"| {arch} | {key} | {it} | {s['mean']:.4f} | {s['misses']:.2%} | {s['accepts_control']:.2%} "
                    f"| {s['margin']:.4f} | {conv.max():.6f} | {local} |"
                )
    if args.out:
        np.savez(args.out, **saved)


if __name__ == "__main__":
    main()
