"""Chapter 13's first-order Gram values at many seed offsets (``ch-parameter-ball``): does the interval hold at -1/2?

    python tools/gram_first_order_study.py --offsets 0 400 [--scale paper] [--out values.npz]

The width rows of :ref:`ch-parameter-ball` fit the exponent in ``m`` of the first-order entrywise Gram value
``D ‖∇G_H,ij(θ0)‖`` (:func:`companion.widenet.gram_entry_ascent`, no search) with a 99.9 % t-interval over the
8 members. This script recomputes those values alone, on exactly the draws of the chapter's width sweep
(:func:`companion.widenet.sweep_draws` with the chapter's seeds shifted by each offset, as ``COMPANION_SEED`` shifts
them), and prints,
for two summaries over the ``n(n + 1)/2`` entries,

* ``max``: their largest (the retired row ``parameter-ball.width-fc-gram-entry-gradient``);
* ``rms``: their root mean square (the row ``parameter-ball.width-fc-gram-entry-gradient-rms``),

the mean exponent, how often the interval misses -1/2 and how often it contains the control 0, and the local
exponents of the mean log-value between consecutive widths. An unbiased 99.9 % interval misses -1/2 at about
0.1 % of the offsets; the largest entry picks up the positive fluctuation of the near-largest entries (a correction
of relative order ``m^-1/2``) and misses more often. One offset costs about 1.5 s at paper scale on two cores.
"""

from __future__ import annotations

import argparse

import numpy as np
from chapter_config import add_offsets_argument, config, parameter_ball_draws, seed_offsets

CFG = {scale: config("13_parameter_ball", scale) for scale in ("quick", "paper")}  # the chapter's Config
WIDTHS = {scale: cfg.widths for scale, cfg in CFG.items()}


def values(offset: int, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """``(max, rms)``, each ``(widths, members)``: the first-order values at one seed offset (the chapter's seeds
    plus ``offset``, which :func:`companion.device.generator` would add as ``COMPANION_SEED``)."""
    from companion import widenet as wn

    cfg = CFG[scale]
    net = wn.Net("fc", cfg.act, cfg.c_res)
    top, rms = [], []
    for m in cfg.widths:
        params, X, _ = parameter_ball_draws(cfg, m, cfg.H_width, offset=offset, init_seed=cfg.seed + 1 + m)
        found = wn.gram_entry_ascent(params, X, cfg.D, net, refine=0)
        top.append(found["first_order"].cpu().numpy())
        rms.append(found["first_order_rms"].cpu().numpy())
    return np.stack(top), np.stack(rms)


def summary(widths, runs: np.ndarray, confidence: float = CFG["paper"].confidence) -> dict:
    """For ``runs`` ``(offsets, widths, members)``: the mean exponent, the share of offsets whose interval misses
    -1/2 and the share whose interval contains 0, and the local exponents of the mean log-value."""
    from companion import stats

    fits = [stats.member_slopes(widths, Y, confidence) for Y in runs]
    logs = np.log(runs).mean(axis=(0, 2))
    return {
        "mean": float(np.mean([f.value for f in fits])),
        "misses": float(np.mean([not f.contains(-0.5) for f in fits])),
        "accepts_control": float(np.mean([f.contains(0.0) for f in fits])),
        "local": (np.diff(logs) / np.diff(np.log(widths))).tolist(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_offsets_argument(ap)
    ap.add_argument("--scale", choices=sorted(WIDTHS), default="paper")
    ap.add_argument("--out", default=None, help="also save the values (npz: max, rms, offsets, widths)")
    args = ap.parse_args(argv)
    offsets = seed_offsets(args.offsets)
    top, rms = map(np.stack, zip(*(values(k, args.scale) for k in offsets)))
    widths = WIDTHS[args.scale]
    print(f"{args.scale} widths {widths}, seed offsets {offsets.start}-{offsets.stop - 1} ({len(offsets)}):")
    print("| summary | mean exponent | misses -1/2 | contains 0 | local exponents |")
    print("| --- | --- | --- | --- | --- |")
    for name, runs in (("max", top), ("rms", rms)):
        s = summary(widths, runs)
        local = ", ".join(f"{v:.3f}" for v in s["local"])
        print(f"| {name} | {s['mean']:.3f} | {s['misses']:.2%} | {s['accepts_control']:.2%} | {local} |")
    if args.out:
        np.savez(args.out, max=top, rms=rms, offsets=np.asarray(offsets), widths=np.asarray(widths))


if __name__ == "__main__":
    main()
