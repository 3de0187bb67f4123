"""Chapter 13's feature-derivative rows at many seed offsets (``ch-parameter-ball``): where do their exponents sit?

    python tools/derivative_study.py --offsets 0 40 [--scale paper] [--iters 20 80] [--widths 64 … 2048]
        [--at-init] [--out values.npz]

The directional rows of :ref:`ch-parameter-ball` fit the exponent in ``m`` of ``max_h sup_{‖v‖=1} ‖Dx_h[v]‖``
(paper C, step 3.1: ``≤ T/√m``, exponent -1/2) and of ``max_h sup_{‖v‖=1} ‖Dz_h[v]‖`` (``≤ T``, exponent 0), each
the top of a per-input operator found by Lanczos (:func:`companion.widenet.feature_derivative_norms`), with a 99.9 %
t-interval over the 8 members, for the fully connected and the residual network. This script recomputes those
values alone, on exactly the draws of the chapter's width sweep (:func:`companion.widenet.sweep_point` with the
chapter's arguments and seeds shifted by each offset, as ``COMPANION_SEED`` shifts them; only the measurements the
rows do not use are switched off, which moves no draw), with the chapter's Lanczos steps and with more, and prints
for each row the mean exponent, how often the interval misses the paper's exponent and how often it contains the
control, and the local exponents of the mean log-value between consecutive widths. A second table takes the
maximum over the layers apart: each layer's exponent, how often it is the largest, and the ratio of the last layer's
value to the first's at each width; ``--widths`` runs other widths than the chapter's (e.g. one more doubling) and
``--at-init`` adds the same per-layer table at ``θ0`` itself (the sweep's draws, no step into the ball).
"""

from __future__ import annotations

import argparse

import numpy as np
from chapter_config import add_offsets_argument, config, parameter_ball_draws, parameter_ball_point, seed_offsets

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
    """``{(arch, key): (widths, members)}`` (and ``{(arch, key + "_layers"): (widths, members, H)}``, the values
    before the maximum over the layers) and ``{arch: (widths, members)}`` of the Lanczos convergence ratios, at one
    seed offset (the chapter's seeds plus ``offset``) with ``iters`` Lanczos steps, at the scale's widths or at
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
            out[arch, f"{key}_layers"] = np.stack([p[f"{key}_layers"] for p in points])
        conv[arch] = np.stack([p["deriv_conv"] for p in points])
    return out, conv


def values_at_init(offset: int, scale: str, iters: int, widths: tuple | None = None) -> dict:
    """``{(arch, "deriv_x_layers"): (widths, members, H)}`` and the same for ``z``: the per-layer values of
    :func:`companion.widenet.feature_derivative_norms` at ``θ0`` itself, on the width sweep's draws at one seed
    offset (Lanczos start vectors from a generator of their own, seeded with the offset)."""
    import torch

    from companion import widenet as wn

    cfg = CFG[scale]
    out = {}
    for arch in ("fc", "res"):
        net, got = wn.Net(arch, cfg.act, cfg.c_res), []
        for m in widths or WIDTHS[scale]:
            params, X, _ = parameter_ball_draws(cfg, m, cfg.H_width, offset=offset, init_seed=cfg.seed + 1 + m)
            lanczos = torch.Generator().manual_seed(offset)
            got.append(wn.feature_derivative_norms(params, X, net, iters=iters, generator=lanczos))
        for key in ROWS:
            out[arch, f"{key}_layers"] = np.stack([g[key.removeprefix("deriv_")].cpu().numpy() for g in got])
    return out


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


def layer_summary(widths, runs: np.ndarray) -> dict:
    """For per-layer values ``runs`` ``(offsets, widths, members, H)``: each layer's mean exponent (the mean over
    offsets of the member-averaged log-log slope) and local exponents of the mean log-value, the share of
    (offset, width, member) in which each layer is the largest, and the mean ratio of the last layer's value to
    the first's at each width."""
    logs, x = np.log(runs), np.log(np.asarray(widths, dtype=float))
    slopes = np.polyfit(x, logs.mean(2).transpose(1, 0, 2).reshape(len(x), -1), 1)[0].reshape(runs.shape[0], -1)
    top = runs.argmax(-1)
    return {
        "mean": slopes.mean(0).tolist(),
        "local": (np.diff(logs.mean(axis=(0, 2)), axis=0) / np.diff(x)[:, None]).T.tolist(),
        "largest": [float((top == h).mean()) for h in range(runs.shape[-1])],
        "ratio": (runs[..., -1] / runs[..., 0]).mean(axis=(0, 2)).tolist(),
    }


def _print_layers(widths, label: str, runs: dict) -> None:
    print(f"\nper layer, {label}:")
    print("| network | quantity | layer | mean exponent | local exponents | largest in |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (arch, key), r in runs.items():
        s = layer_summary(widths, r)
        for h, (mean, local, share) in enumerate(zip(s["mean"], s["local"], s["largest"]), 1):
            local = ", ".join(f"{v:.4f}" for v in local)
            print(f"| {arch} | {key} | {h} | {mean:.4f} | {local} | {share:.1%} |")
        ratio = ", ".join(f"{m}: {v:.4f}" for m, v in zip(widths, s["ratio"]))
        print(f"| {arch} | {key} | last / first | {ratio} | | |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_offsets_argument(ap)
    ap.add_argument("--scale", choices=sorted(WIDTHS), default="paper")
    ap.add_argument("--iters", type=int, nargs="+", default=None, help="Lanczos steps (default: the chapter's)")
    ap.add_argument("--widths", type=int, nargs="+", default=None, help="widths (default: the chapter's)")
    ap.add_argument("--at-init", action="store_true", help="also the per-layer values at θ0 on the same draws")
    ap.add_argument("--out", default=None, help="also save the values (npz, one array per arch, key and iters)")
    args = ap.parse_args(argv)
    offsets = seed_offsets(args.offsets)
    iters = args.iters or [CFG[args.scale].lanczos_iters]
    if min(iters) < 1:
        raise ValueError(f"--iters must be positive, got {iters}")
    widths = tuple(args.widths) if args.widths else WIDTHS[args.scale]
    if len(widths) < 3 or min(widths) < 1 or list(widths) != sorted(set(widths)):
        raise ValueError(f"--widths must be at least three increasing positive widths, got {widths}")
    saved = {"offsets": np.asarray(offsets), "widths": np.asarray(widths)}
    print(f"{args.scale} widths {widths}, seed offsets {offsets.start}-{offsets.stop - 1} ({len(offsets)}):")
    print("| network | quantity | Lanczos steps | mean exponent | misses | contains control | margin | "
          "largest conv. ratio | local exponents |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for it in iters:
        got = [values(k, args.scale, it, widths) for k in offsets]
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
        layers = {(a, k): np.stack([v[a, f"{k}_layers"] for v, _ in got]) for a in ("fc", "res") for k in ROWS}
        saved |= {f"{a}_{k}_layers_{it}": r for (a, k), r in layers.items()}
        _print_layers(widths, f"at the ball's point, {it} Lanczos steps", layers)
        if args.at_init:
            init = [values_at_init(k, args.scale, it, widths) for k in offsets]
            layers = {(a, k): np.stack([v[a, f"{k}_layers"] for v in init]) for a in ("fc", "res") for k in ROWS}
            saved |= {f"{a}_{k}_layers_init_{it}": r for (a, k), r in layers.items()}
            _print_layers(widths, f"at θ0, {it} Lanczos steps", layers)
    if args.out:
        np.savez(args.out, **saved)


if __name__ == "__main__":
    main()
