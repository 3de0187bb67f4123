"""The whole-ball Gram rows of ``ch-parameter-ball``: the fixed-point search against the converged supremum.

    python tools/ball_search.py [--offset 0] [--m-radius 128] [--widths 64 128 256 512] [--steps 3000]

Until 2026-12-06 the whole-ball rows (``parameter-ball.radius-ball-gram-form``, ``width-fc-gram-form``, now retired)
took at every point of their sweeps (``D = 1 … √m/4`` at one width, ``D = √m/4`` across the widths) the largest
drift that :func:`companion.widenet.gram_entry_ascent` finds (first-order direction, then two fixed-point steps).
This script runs, on the same draws (the chapter's seeds at the given offset), the monotone ascent
:func:`companion.gramsearch.gram_entry_supremum` with quasi-Newton steps to a relative stationarity of ``1e-4``,
which the rows that replaced them use, and prints at every point the fixed-point search's value over the supremum
(per member), the supremum's member mean, the maximisers' largest stationarity and the steps taken; then the
exponents of both in ``D`` (the ball) and in ``m`` (the edge), as :func:`companion.stats.member_slopes` fits them on
the page. Its output at quick offset 0 is the evidence quoted in those rows' retirement.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from chapter_config import config, parameter_ball_draws

from companion import gramsearch, stats
from companion import widenet as wn

CFG = config("13_parameter_ball", "paper")  # the chapter's Config: n, d, members, H_width are the same at both scales


def point(m, D, offset, init_seed, steps, net):
    """The sweep's search and the supremum at one width and radius, on the chapter's draws at seed ``offset``
    (``init_seed``: the chapter's): per-member arrays and the search's record."""
    params, X, _ = parameter_ball_draws(CFG, m, CFG.H_width, offset=offset, init_seed=init_seed)
    params = [p.detach() for p in params]
    start = time.perf_counter()
    sup = gramsearch.gram_entry_supremum(params, X, D, net, steps=steps, tol=1e-4, quasi_newton=True)
    seconds = time.perf_counter() - start
    sweep = wn.gram_entry_ascent(params, X, D, net)["entry"]
    return sweep.numpy(), sup["entry"].numpy(), float(sup["stationarity"].max()), sup["steps"], seconds


def report(label, xs, rows, confidence):
    print(f"| {label} | sweep / supremum (members) | supremum, member mean | stationarity | steps | s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for x, (sweep, sup, stat, steps, sec) in zip(xs, rows):
        ratio = sweep / sup
        print(f"| {x:.4g} | {ratio.min():.3f}–{ratio.max():.3f} | {sup.mean():.4f} | {stat:.1e} | {steps} | {sec:.0f} |")
    for name, k in (("sweep", 0), ("supremum", 1)):
        print(f"exponent in {label} of the {name}: {stats.member_slopes(xs, np.stack([r[k] for r in rows]), confidence)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offset", type=int, default=0, help="the seed offset (COMPANION_SEED of the chapter)")
    ap.add_argument("--m-radius", type=int, default=128, help="the ball sweep's width (quick 128, paper 512)")
    ap.add_argument("--widths", type=int, nargs="*", default=[64, 128, 256], help="the edge sweep's widths")
    ap.add_argument("--points", type=int, default=4, help="radii of the ball sweep")
    ap.add_argument("--edge", type=float, default=0.25, help="D/sqrt(m) at the edge of the ball")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--confidence", type=float, default=0.999)
    args = ap.parse_args(argv)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _sweeps(args)
    finally:
        torch.set_default_dtype(previous)


def _sweeps(args: argparse.Namespace) -> None:
    """The ball sweep and the width sweep that :func:`main` asked for, in float64."""
    net, off, m = wn.Net("fc", CFG.act, CFG.c_res), args.offset, args.m_radius
    if args.points:
        radii = np.geomspace(1.0, math.sqrt(m) * args.edge, args.points)
        rows = [point(m, D, off, CFG.seed + 7, args.steps, net) for D in radii]
        print(f"fc, m = {m}, seed offset {off}, the ball D = 1 … sqrt(m)/4:")
        report("D", radii, rows, args.confidence)
    if args.widths:
        rows = [point(w, math.sqrt(w) * args.edge, off, CFG.seed + 1 + w, args.steps, net) for w in args.widths]
        print(f"fc, seed offset {off}, the edge D = {args.edge} sqrt(m):")
        report("m", np.array(args.widths, dtype=float), rows, args.confidence)


if __name__ == "__main__":
    main()
