"""Chapter 12's line search (``ch-uniform-concentration``): how much more do many more restarts find?

    python tools/restart_study.py [--dims 10 20 40] [--ratio 16] [--chains 2048] [--sets 3] [--seed 12345]

The two-sided row on the exponent of ``δ̂`` in ``d`` (``uniform-concentration.d-two-sided``, retired) needed the
line search :func:`companion.concentration.line_search_sup` converged at every ``d``. This script measures, on
synthetic data sets ``X ~ N(0, I_d)`` of ``n = ratio · d`` points drawn from ``--seed``, the search with the
chapter's budget rule (:func:`companion.concentration.line_search_rounds`: ``10 + d/2`` rounds) and ``--chains``
chains in one batch, and prints for each data set the best value of the first ``c`` chains over the best of all, for
``c = 8, 32, 128, …`` (the chapter's budget is 8 chains), and the gain of the last quadrupling of the chains. A
search converged by restarts would show ratios of 1 well before the last column and a gain near 1 at every ``d``.

Why it does not: for a fixed ``z`` the empirical part of ``zᵀ(M̂ − M)z`` sums the weights ``(x_iᵀz)²`` of the points
in the wedge ``{x : xᵀw ≥ 0, xᵀw* ≥ 0}``, a weighted relative of the densest-hemisphere problem (the most points in
one half-space through the origin), which is NP-complete when ``d`` is part of the input (D. S. Johnson and
F. P. Preparata, Theoretical Computer Science 6 (1978) 93–107). Restarts sample local maxima whose number grows with
``n`` and ``d``; the table shows how far from a plateau the chapter's budget is.
"""

from __future__ import annotations

import argparse
import time

import torch

from companion import concentration as cc
from companion import device


def chain_counts(chains: int) -> list[int]:
    """The numbers of chains compared: the chapter's budget (``LINE_SEARCH_BUDGET[0]``), four times it, … up to
    ``chains``."""
    base = cc.LINE_SEARCH_BUDGET[0]
    return [base * 4**k for k in range(20) if base * 4**k <= chains]


def study(d: int, ratio: int, chains: int, generator: torch.Generator) -> tuple[dict[int, float], float, float]:
    """One data set at dimension ``d``: the best of the first ``c`` chains over the best of all (``c`` = 8, 32, …
    up to ``chains``), the best value, and the seconds the search took."""
    X = device.randn((ratio * d, d), generator=generator, dtype=torch.float64)
    start = time.perf_counter()
    values = cc.line_search_sup(X, chains=chains, rounds=cc.line_search_rounds(d), generator=generator)["values"]
    seconds = time.perf_counter() - start
    best = float(values.max())
    return {c: float(values[:c].max()) / best for c in chain_counts(chains)}, best, seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--ratio", type=int, default=16, help="n/d (the chapter's budget_ratio)")
    ap.add_argument("--chains", type=int, default=2048, help="the most chains, 8 times a power of 4")
    ap.add_argument("--sets", type=int, default=3, help="data sets per d")
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args(argv)
    base, r0, per_dim = cc.LINE_SEARCH_BUDGET
    if args.chains < 4 * base:
        raise ValueError(f"--chains must be at least {4 * base} (the budget's {base} and one quadrupling), got {args.chains}")
    gen = device.generator(args.seed)
    counts = chain_counts(args.chains)
    print(
        f"n/d = {args.ratio}, rounds {r0:g} + {per_dim:g} d (line_search_rounds), "
        f"best of the first c chains over the best of {counts[-1]}:"
    )
    print("| d | set | " + " | ".join(f"c = {c}" for c in counts) + " | last quadrupling | best | s |")
    print("|" + " --- |" * (len(counts) + 5))
    for d in args.dims:
        for s in range(args.sets):
            ratios, best, seconds = study(d, args.ratio, counts[-1], gen)
            gain = 1 / ratios[counts[-2]]
            cells = " | ".join(f"{ratios[c]:.3f}" for c in counts)
            print(f"| {d} | {s} | {cells} | +{100 * (gain - 1):.1f} % | {best:.4f} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
