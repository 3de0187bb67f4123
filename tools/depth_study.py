"""Chapter 13's depth rows at many seed offsets (``ch-parameter-ball``): does any verdict depend on the seed?

    python tools/depth_study.py --offsets 0 200 [--scale paper] [--depths 2 4 8 16] [--all] [--out values.npz]

By default the script recomputes the two residual Gram rows alone (fast: no Lanczos run, about 1 s per offset at
paper scale on two cores): ``parameter-ball.depth-res-gram-entry`` and ``depth-res-gram-first-order`` fit the power
exponent in ``H`` of ``H²√m max_ij |ΔG_H,ij|/D`` (every entry ascended directly, :func:`companion.widenet.
gram_entry_ascent`) and of ``H²√m max_ij ‖∇G_H,ij(θ0)‖`` (its first-order value, no search), with a 99.9 %
t-interval over the 8 members, and pass when the interval reaches down to 0 or below ("does not grow"); the control,
2, must lie above it. With ``--all`` it runs the chapter's whole depth sweep (:func:`companion.widenet.sweep_point`
with the chapter's flags, about 2 s per offset at quick scale) and tests every depth row as the chapter does:

* ``depth-fc-{hessian, jacobian, feature, layer-products}``: the semilog slope's interval lies above 0 (control 0);
* ``depth-res-{…}``: the interval reaches down to 0 or below (control: the fully connected network's rate);
* the two residual Gram rows as above.

Both use exactly the draws of the chapter's depth sweep (the chapter's seeds shifted by each offset, as
``COMPANION_SEED`` shifts them; offset 0 reproduces the chapter's records) and print, per row, the mean exponent,
how often the row fails, how often its control is not rejected, and the range of the intervals' ends.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from chapter_config import add_offsets_argument, config, parameter_ball_draws, parameter_ball_point, seed_offsets

CFG = {scale: config("13_parameter_ball", scale) for scale in ("quick", "paper")}  # the chapter's Config
CONTROL = 2.0  # the residual Gram rows' control: the exponent of a drift without the 1/H² (their registry entries)
PANELS = {  # the depth rows' quantities: key, divisor, row slug (as in the chapter's DEPTH_PANELS)
    "hessian": ("hess", "M"),
    "jacobian": ("J", None),
    "feature": ("feat_x", None),
    "layer-products": ("prod", None),
}


def values(offset: int, scale: str, depths=None) -> tuple[np.ndarray, np.ndarray]:
    """``(entry, first_order)``, each ``(depths, members)``: ``H²√m/D`` times the residual network's ascended
    entrywise drift and its first-order value, at one seed offset (the chapter's seeds plus ``offset``)."""
    from companion import widenet as wn

    cfg = CFG[scale]
    m, depths = cfg.m_depth, depths or cfg.depths
    net = wn.Net("res", cfg.act, cfg.c_res)
    entry, first = [], []
    for H in depths:
        params, X, _ = parameter_ball_draws(cfg, m, H, offset=offset, init_seed=cfg.seed + 100 + H)
        found = wn.gram_entry_ascent(params, X, cfg.D, net, refine=wn.ENTRY_REFINE)
        scale_H = H**2 * np.sqrt(m) / cfg.D
        entry.append(scale_H * found["entry"].cpu().numpy())
        first.append(scale_H * found["first_order"].cpu().numpy())
    return np.stack(entry), np.stack(first)


def constants(offset: int, scale: str, depths=None) -> dict:
    """Every depth row's constant, ``(depths, members)`` by ``(arch, slug)``, from the chapter's whole depth sweep at
    one seed offset; ``("res", "gram-entry")`` and ``("res", "gram-first-order")`` carry the factor ``H²``."""
    cfg = CFG[scale]
    m, depths = cfg.m_depth, depths or cfg.depths
    out, points = {}, {}
    for arch in ("fc", "res"):
        points[arch] = [
            parameter_ball_point(cfg, m, H, arch, offset=offset, init_seed=cfg.seed + 100 + H, taylor=False, products=True)
            for H in depths
        ]
        for slug, (key, div) in PANELS.items():
            Y = np.stack([np.asarray(p[key]) / (np.asarray(p[div]) if div else 1.0) for p in points[arch]])
            out[arch, slug] = Y * (1 if key in ("J", "prod") else math.sqrt(m) / (1 if div else cfg.D))
    H2 = np.asarray(depths, float)[:, None] ** 2 * math.sqrt(m) / cfg.D
    for slug, key in (("gram-entry", "gram_entry"), ("gram-first-order", "gram_entry_linear")):
        out["res", slug] = H2 * np.stack([np.asarray(p[key]) for p in points["res"]])
    return out


def verdicts(depths, consts: dict, confidence: float = CFG["paper"].confidence) -> dict:
    """Per row (``"depth-{arch}-{slug}"``): ``(estimate, holds, control rejected)``, as the chapter's claim check
    decides them."""
    from companion import stats

    out = {}
    rates = {k: stats.member_slopes(depths, Y, confidence, semilog=True) for k, Y in consts.items()}
    for slug in PANELS:
        f = rates["fc", slug]
        out[f"depth-fc-{slug}"] = (f, f.low > 0, not f.contains(0.0))
        r, wrong = rates["res", slug], f.value
        out[f"depth-res-{slug}"] = (r, r.low <= 0, not (r.low <= wrong <= max(r.high, 0.0)))
    for slug in ("gram-entry", "gram-first-order"):
        out[f"depth-res-{slug}"] = _gram_verdict(stats.member_slopes(depths, consts["res", slug], confidence))
    return out


def _gram_verdict(f) -> tuple:
    """A residual Gram row's ``(estimate, holds, control rejected)``: "does not grow" (the interval, extended down
    to any non-positive exponent, contains 0) against the control 2."""
    return f, f.low <= 0, CONTROL > max(f.high, 0.0)


def summary(depths, runs: np.ndarray, confidence: float = CFG["paper"].confidence) -> dict:
    """For ``runs`` ``(offsets, depths, members)`` of a residual Gram constant: the mean power exponent in ``H``, the
    share of offsets whose interval lies wholly above 0 (the row fails), the share whose interval reaches the
    control, and the extreme interval ends."""
    from companion import stats

    return _table_row(*zip(*(_gram_verdict(stats.member_slopes(depths, Y, confidence)) for Y in runs)))


def _table_row(fits, holds, rejects) -> dict:
    return {
        "mean": float(np.mean([f.value for f in fits])),
        "fails": float(np.mean([not h for h in holds])),
        "accepts_control": float(np.mean([not r for r in rejects])),
        "low": (min(f.low for f in fits), max(f.low for f in fits)),
        "high": (min(f.high for f in fits), max(f.high for f in fits)),
    }


def _print(name: str, s: dict) -> None:
    print(
        f"| {name} | {s['mean']:.3f} | {s['fails']:.2%} | {s['accepts_control']:.2%} | "
        f"{s['low'][0]:.3f} … {s['low'][1]:.3f} | {s['high'][0]:.3f} … {s['high'][1]:.3f} |"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_offsets_argument(ap)
    ap.add_argument("--scale", choices=sorted(CFG), default="paper")
    ap.add_argument("--depths", type=int, nargs="+", default=None, help="instead of the scale's depths")
    ap.add_argument("--all", action="store_true", help="every depth row, from the whole depth sweep")
    ap.add_argument("--out", default=None, help="also save the values (npz)")
    args = ap.parse_args(argv)
    offsets = seed_offsets(args.offsets)
    if args.depths is not None and (len(args.depths) < 2 or min(args.depths) < 2):
        raise ValueError(f"--depths needs at least two depths, each at least 2, got {args.depths}")
    depths = tuple(args.depths or CFG[args.scale].depths)
    print(f"{args.scale}: m = {CFG[args.scale].m_depth}, depths {depths}, seed offsets {offsets.start}-{offsets.stop - 1}:")
    print("| row | mean exponent | fails | control not rejected | lower ends | upper ends |")
    print("| --- | --- | --- | --- | --- | --- |")
    if args.all:
        runs = [verdicts(depths, constants(k, args.scale, depths)) for k in offsets]
        for row in runs[0]:
            fits, holds, rejects = zip(*(r[row] for r in runs))
            _print(row, _table_row(fits, holds, rejects))
        if args.out:
            est = {row: np.array([[r[row][0].value, r[row][0].low, r[row][0].high] for r in runs]) for row in runs[0]}
            np.savez(args.out, offsets=np.asarray(offsets), depths=np.asarray(depths), **est)
        return
    entry, first_order = map(np.stack, zip(*(values(k, args.scale, depths) for k in offsets)))
    for name, runs in (("depth-res-gram-entry", entry), ("depth-res-gram-first-order", first_order)):
        _print(name, summary(depths, runs))
    if args.out:
        np.savez(args.out, entry=entry, first_order=first_order, offsets=np.asarray(offsets), depths=np.asarray(depths))


if __name__ == "__main__":
    main()
