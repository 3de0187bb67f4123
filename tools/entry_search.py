"""Compare the entrywise Gram search of ``ch-parameter-ball`` with a monotone ascent on the same draws.

    python tools/entry_search.py --offset 2 --width 64 [--steps 40] [--arch fc]

:func:`companion.widenet.gram_entry_ascent` starts each entry ``G_H,ij`` (both signs) at its first-order direction
``± D ∇G_ij/‖∇G_ij‖`` and then iterates the fixed-point map ``h ↦ D ∇G_ij(θ0 + h)/‖∇G_ij(θ0 + h)‖``, keeping
the best value seen. That map is not an ascent: for some entries its orbit jumps around (values spread by a factor
of five from step to step), and more steps sample more of the orbit. This script runs, from the same first-order
directions, a Riemannian gradient ascent on the sphere ``‖h‖ = D`` with Armijo backtracking (each accepted step
increases the entry's drift), the directions carried in the same factored form (their rank grows by two per
step and is compressed back to its numerical rank), and prints per member:

* the ascent's best drift over the first-order value ``D max_ij ‖∇G_ij(θ0)‖``;
* the chapter's search (``refine`` = 2 and 128 steps) over the ascent's best.

It is slow (about 30 s at ``m = 64`` and 150 s at ``m = 512`` for 40 steps on two cores). The chapter runs the same
ascent in the coordinates each entry depends on (:func:`companion.gramsearch.gram_entry_supremum`, a few seconds per
width); this script is the independent check in the full parameter space: at ``m = 16`` and ``32`` the two find
the same suprema to four digits.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from chapter_config import config, parameter_ball_draws

from companion import widenet as wn

CFG = config("13_parameter_ball", "paper")  # the chapter's Config: n, d, members, H_width are the same at both scales


def inner(h1, h2):
    """⟨h1, h2⟩ per member and entry, ``(E, K)``, for factored directions ``([(U, V), …], da)``."""
    (f1, a1), (f2, a2) = h1, h2
    s = (a1 * a2).sum(-1)
    for (U1, V1), (U2, V2) in zip(f1, f2):
        s = s + ((U1.transpose(-1, -2) @ U2) * (V1.transpose(-1, -2) @ V2)).sum((-1, -2))
    return s


def combine(c1, h1, c2, h2):
    """``c1 h1 + c2 h2`` (``c1, c2``: ``(E, K)``), by concatenating the factors."""
    (f1, a1), (f2, a2) = h1, h2
    f = [
        (torch.cat([U1 * c1[..., None, None], U2 * c2[..., None, None]], -1), torch.cat([V1, V2], -1))
        for (U1, V1), (U2, V2) in zip(f1, f2)
    ]
    return f, a1 * c1[..., None] + a2 * c2[..., None]


def compress(h, rtol=1e-13):
    """The same direction with each factor pair cut to its numerical rank (QR of both factors, SVD of the core)."""
    f, a = h
    out = []
    for U, V in f:
        Qu, Ru = torch.linalg.qr(U)
        Qv, Rv = torch.linalg.qr(V)
        P, S, Qt = torch.linalg.svd(Ru @ Rv.transpose(-1, -2))
        keep = max(1, int((S > rtol * S[..., :1]).sum(-1).max()))
        out.append(((Qu @ P[..., :keep]) * S[..., None, :keep], Qv @ Qt.transpose(-1, -2)[..., :keep]))
    return out, a


def ascend(params, Xp, g0, net, D, sign, steps, armijo=1e-4, halvings=30):
    """Riemannian gradient ascent of ``sign (G_ij(θ0 + h) − G_ij(θ0))`` on ``‖h‖ = D`` for every entry at once,
    from the first-order direction. Returns the value after each step, ``(steps + 1, E, K)`` (non-decreasing)."""
    h = wn._scaled(*wn._pair_entry_gradients(params, Xp, net), sign * D)
    phi = sign * (wn._pair_entries(params, Xp, net, h)[0] - g0)
    alpha = torch.ones_like(phi)  # the geodesic step, in units of D
    history = [phi.clone()]
    for _ in range(steps):
        f, ga, _ = wn._pair_entry_gradients(params, Xp, net, h)
        g = ([(U * sign, V) for U, V in f], ga * sign)
        gh = inner(g, h)
        r = combine(torch.ones_like(gh), g, -gh / D**2, h)  # the gradient's tangential part
        rnorm = inner(r, r).clamp_min(0).sqrt()
        stationary = rnorm * D <= 1e-12 * phi.abs()  # nothing left to climb: no step
        for _ in range(halvings):
            step = torch.where(stationary, 0.0, alpha * D / rnorm.clamp_min(1e-150))
            cand = combine(torch.ones_like(gh), h, step, r)
            cand = combine(D / inner(cand, cand).sqrt(), cand, torch.zeros_like(gh), h)
            val = sign * (wn._pair_entries(params, Xp, net, cand)[0] - g0)
            ok = (val >= phi + armijo * step * rnorm**2) & ~stationary
            if bool((ok | stationary).all()):
                break
            alpha = torch.where(ok, alpha, alpha / 2)
        take = ok.to(phi.dtype)
        h = compress(combine(1 - take, h, take, cand))
        phi = torch.where(ok, val, phi)
        alpha = torch.where(ok, (2 * alpha).clamp_max(1.0), alpha)
        history.append(phi.clone())
    return torch.stack(history)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offset", type=int, default=0, help="the seed offset (COMPANION_SEED of the chapter)")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--arch", choices=("fc", "res"), default="fc")
    ap.add_argument("--D", type=float, default=1.0)
    args = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    net = wn.Net(args.arch, CFG.act, CFG.c_res)
    m, off = args.width, args.offset
    params, X, _ = parameter_ball_draws(CFG, m, CFG.H_width, offset=off, init_seed=CFG.seed + 1 + m)
    params = [p.detach() for p in params]
    rows, cols = torch.triu_indices(X.shape[1], X.shape[1])
    Xp = torch.stack([X[:, rows], X[:, cols]], 2)
    g0 = wn._pair_entries(params, Xp, net)[0]
    runs = [ascend(params, Xp, g0, net, args.D, s, args.steps) for s in (1.0, -1.0)]
    best = torch.maximum(runs[0][-1], runs[1][-1]).amax(-1)
    first_order = wn.gram_entry_ascent(params, X, args.D, net, refine=0)["first_order"]
    chapter = wn.gram_entry_ascent(params, X, args.D, net, refine=128)["steps"]
    fmt = lambda t: np.array2string(t.numpy(), precision=4)  # noqa: E731
    print(f"{args.arch}, m = {m}, seed offset {off}, D = {args.D}, {args.steps} ascent steps; per member:")
    print("  ascent / first-order value:  ", fmt(best / first_order))
    print("  chapter, 2 steps / ascent:   ", fmt(chapter[2] / best))
    print("  chapter, 128 steps / ascent: ", fmt(chapter[-1] / best))


if __name__ == "__main__":
    main()
