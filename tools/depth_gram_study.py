"""Chapter 13's residual Gram constant against the depth at many seed offsets (``ch-parameter-ball``).

    python tools/depth_gram_study.py --offsets 0 100 [--scale paper] [--out values.npz]

The rows ``parameter-ball.depth-res-gram-entry`` and ``parameter-ball.depth-res-gram-first-order`` fit the power
exponent in ``H`` of ``H²√m max_ij |ΔG_H,ij|/D`` (every entry ascended directly, :func:`companion.widenet.
gram_entry_ascent`) and of ``H²√m max_ij ‖∇G_H,ij(θ0)‖`` (its first-order value, no search) with a 99.9 % t-interval
over the 8 members, and pass when the interval reaches down to 0 or below ("does not grow"); the control, 2, must lie
above it. This script recomputes those values alone, on exactly the draws of the chapter's depth sweep
(:func:`companion.widenet.sweep_draws` with the chapter's seeds shifted by each offset, as ``COMPANION_SEED`` shifts
them), and prints for each row the mean exponent, how often the row fails, how often the control is not rejected,
and the range of the intervals' ends. One offset costs about 1 s at paper scale on two cores.
"""

from __future__ import annotations

import argparse

import numpy as np

SCALES = {"quick": dict(m=64, depths=(2, 4, 8)), "paper": dict(m=256, depths=(2, 4, 8, 16))}
CHAPTER = dict(n=8, d=10, members=8, D=1.0, c_res=1.0, confidence=0.999, control=2.0)  # the chapter's Config


def values(offset: int, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """``(entry, first_order)``, each ``(depths, members)``: ``H²√m/D`` times the ascended entrywise drift and its
    first-order value, at one seed offset (the chapter's seeds plus ``offset``)."""
    from companion import widenet as wn

    m, depths = SCALES[scale]["m"], SCALES[scale]["depths"]
    net = wn.Net("res", "tanh", CHAPTER["c_res"])
    entry, first = [], []
    for H in depths:
        params, X, _ = wn.sweep_draws(
            m,
            H,
            n=CHAPTER["n"],
            d=CHAPTER["d"],
            members=CHAPTER["members"],
            data_seed=offset,
            init_seed=offset + 100 + H,
        )
        found = wn.gram_entry_ascent(params, X, CHAPTER["D"], net, refine=wn.ENTRY_REFINE)
        scale_H = H**2 * np.sqrt(m) / CHAPTER["D"]
        entry.append(scale_H * found["entry"].cpu().numpy())
        first.append(scale_H * found["first_order"].cpu().numpy())
    return np.stack(entry), np.stack(first)


def summary(depths, runs: np.ndarray, confidence: float = CHAPTER["confidence"]) -> dict:
    """For ``runs`` ``(offsets, depths, members)``: the mean power exponent in ``H``, the share of offsets whose
    interval lies wholly above 0 (the row fails), the share whose interval reaches the control, and the extreme
    interval ends."""
    from companion import stats

    fits = [stats.member_slopes(depths, Y, confidence) for Y in runs]
    return {
        "mean": float(np.mean([f.value for f in fits])),
        "fails": float(np.mean([f.low > 0 for f in fits])),
        "accepts_control": float(np.mean([f.high >= CHAPTER["control"] for f in fits])),
        "low": (min(f.low for f in fits), max(f.low for f in fits)),
        "high": (min(f.high for f in fits), max(f.high for f in fits)),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=int, nargs=2, default=[0, 20], metavar=("FIRST", "STOP"))
    ap.add_argument("--scale", choices=sorted(SCALES), default="paper")
    ap.add_argument("--out", default=None, help="also save the values (npz: entry, first_order, offsets, depths)")
    args = ap.parse_args(argv)
    first, stop = args.offsets
    if not 0 <= first < stop:
        raise ValueError(f"--offsets must be FIRST < STOP, both non-negative, got {first} {stop}")
    offsets = range(first, stop)
    entry, first_order = map(np.stack, zip(*(values(k, args.scale) for k in offsets)))
    depths = SCALES[args.scale]["depths"]
    print(f"{args.scale}: m = {SCALES[args.scale]['m']}, depths {depths}, seed offsets {first}-{stop - 1}:")
    print("| row | mean exponent | fails | control not rejected | lower ends | upper ends |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in (("depth-res-gram-entry", entry), ("depth-res-gram-first-order", first_order)):
        s = summary(depths, runs)
        print(
            f"| {name} | {s['mean']:.3f} | {s['fails']:.2%} | {s['accepts_control']:.2%} | "
            f"{s['low'][0]:.3f} … {s['low'][1]:.3f} | {s['high'][0]:.3f} … {s['high'][1]:.3f} |"
        )
    if args.out:
        np.savez(args.out, entry=entry, first_order=first_order, offsets=np.asarray(offsets), depths=np.asarray(depths))


if __name__ == "__main__":
    main()
