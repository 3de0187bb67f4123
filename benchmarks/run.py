"""Performance ratios of the companion, measured in one run on one machine (``make bench``).

Sections (see benchmarks/README.md for how to read the output):

1. ``engine``  — the batched engine (:func:`companion.gd.run` with :func:`companion.relunet.make_loss_and_grad`)
   against the peer a reader would write: a Python loop over seeds, each an ``nn.Module`` trained with
   ``torch.optim.SGD``, on paper B's k = 2 workload (d = 100, n = 2000, 512 seeds, float64, μ = 0.1,
   Xavier × σ initialisation as in Chapter 9). The peer runs a subset of the seeds for the full number of
   steps and is extrapolated linearly to all seeds (it is a loop: its cost per seed does not depend on the
   seed); the trained parameters of that subset are compared with the engine's to show both did the same
   computation. Also the engine's achieved matmul FLOP rate against this machine's dense GEMM rate,
   measured in the same run.
2. ``formulations`` — alternative layouts of the hot path (benchmarks/formulations.py), timed interleaved
   with the dense GEMM, as a fraction of the GEMM rate, with their agreement to relunet's output.
3. ``scaling`` (the default on CUDA) — ``gd.run`` on paper B's k = 2 workload for ensembles of ``--scaling-E``
   members (512 … 131072), as a fraction of the same device's square-GEMM rate measured in the same run,
   beside the workload's ceiling: its two GEMMs alone at their real shapes (``(kE × d)(d × n)`` and
   ``(kE × n)(n × d)``). Rows: the eager loop, the loop captured in a CUDA graph (``capture=True``), and the
   captured loop around :mod:`companion.fused`'s inductor-compiled hot path (``--fused-modes``). On the CPU
   only the eager row runs unless ``--fused-modes`` is given (inductor compiles for half a minute there).
4. ``small`` — the small-network regime (Chapter 4's runs of paper A's net at L = 2, 3, 4 with the Tracker, and
   Chapter 3's): per-step time of ``gd.run`` as the chapters call it, of ``gd.run(compile=True)`` (the steps
   between records as one compiled ``torch.while_loop``, compile time shown apart) and of a hand-written loop of
   the same step, interleaved, with the trajectories compared (benchmarks/README.md, section 4).
5. ``hessian`` — the top Hessian eigenvalue of paper A's network by Lanczos on Hessian-vector products
   (:func:`companion.curvature.top_eigenvalue`) against the dense Hessian (torch.func forward-over-reverse
   over all unit vectors, i.e. ``torch.func.hessian``'s computation, run in chunks to fit memory) followed by
   ``torch.linalg.eigvalsh``: time ratio and relative agreement.
6. ``host`` (CPU) — the host allocator's setting of :mod:`companion.memory` against glibc's defaults, each in
   processes of its own (benchmarks/host_allocator.py): a fresh 64 MiB tensor write and one output Hessian-vector
   product of Chapter 13's network at width 1024, with the products compared bit for bit.
7. ``hvp`` — Chapter 13's output Hessian-vector products: the R-operator written out for paper C's network
   (``widenet._rop_hvp_fn``, what its Lanczos runs use) against the generic forward-over-reverse and double-backward
   products, per product and per Lanczos run of 20 steps, with their agreement.

Every number printed next to a target is a ratio of two times (or rates) measured in this run. Times of
single operations are the minimum over repetitions, with the competing operations interleaved so that a
change of machine load hits both sides. The load average is printed at start and end: on a shared
machine the ratios move, so rerun on an idle one before comparing with the targets.

Usage: ``python benchmarks/run.py [--quick] [--device cuda] [--sections engine,formulations,scaling,small,hessian,host,hvp]
[--json out.json]``; ``--help`` lists the sizes that can be changed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import formulations  # noqa: E402  (benchmarks/formulations.py)

from companion import curvature, deepnet, gd, relunet, widenet  # noqa: E402
from companion import device as cdevice  # noqa: E402

TARGETS = {
    "engine_vs_peer": 50.0,
    "flop_fraction": 0.60,
    "lanczos_vs_dense": 100.0,
    "lanczos_agreement": 1e-8,
    # on one GPU (float64, against the same GPU's square GEMM): launch-bound small and memory-bound large ensembles
    "gpu_fraction_small": 0.20,
    "gpu_fraction_large": 0.40,
    "lanczos_vs_dense_cuda": 50.0,
}


# ------------------------------------------------------------------------------------------ timing
CLOCK = {"now": time.perf_counter}  # --clock cpu switches to process CPU time (see parse())


def _sync(dev: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)


def interleaved(fns: dict[str, Callable[[], object]], reps: int, dev: torch.device) -> dict[str, list[float]]:
    """Run every function once per round, ``reps`` rounds, after one warm-up round; seconds per call."""
    sync = _sync(dev)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rnd in range(reps + 1):
        for name, fn in fns.items():
            sync()
            t0 = CLOCK["now"]()
            fn()
            sync()
            if rnd:
                times[name].append(CLOCK["now"]() - t0)
    return times


def timed(fn: Callable[[], object], dev: torch.device) -> tuple[float, object]:
    sync = _sync(dev)
    sync()
    t0 = CLOCK["now"]()
    out = fn()
    sync()
    return CLOCK["now"]() - t0, out


def gemm_cases(dev: torch.device, dtype: torch.dtype) -> dict[str, tuple[Callable[[], object], int]]:
    """Square dense GEMMs ``C = A B`` with preallocated output: name -> (call, FLOPs)."""
    sizes = (512, 1024, 2048) if dev.type == "cpu" else (4096, 8192)
    g = torch.Generator(device=dev).manual_seed(0)
    cases = {}
    for s in sizes:
        a = torch.randn(s, s, generator=g, device=dev, dtype=dtype)
        b = torch.randn(s, s, generator=g, device=dev, dtype=dtype)
        c = torch.empty(s, s, device=dev, dtype=dtype)
        cases[f"gemm{s}"] = ((lambda a=a, b=b, c=c: torch.mm(a, b, out=c)), 2 * s**3)
    return cases


def gemm_peak(dev: torch.device, dtype: torch.dtype, reps: int) -> tuple[float, str]:
    """This machine's dense GEMM rate (FLOP/s): the best over a few square sizes of the fastest repetition."""
    cases = gemm_cases(dev, dtype)
    times = interleaved({k: f for k, (f, _) in cases.items()}, reps, dev)
    rates = {k: cases[k][1] / min(times[k]) for k in cases}
    best = max(rates, key=rates.get)
    return rates[best], best


# ------------------------------------------------------------------------------------------ the peer
class PeerNet(nn.Module):
    """Paper B's network as a reader writes it: ``x ↦ vᵀ ReLU(W x)`` with two bias-free ``nn.Linear``."""

    def __init__(self, d: int, k: int):
        super().__init__()
        self.hidden = nn.Linear(d, k, bias=False)
        self.out = nn.Linear(k, 1, bias=False)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x))).squeeze(-1)


def train_peer(W0, v0, X, y, steps: int, lr: float):
    """One seed, the textbook loop: ``zero_grad``, forward, ``(1/2n)Σ(f − y)²``, ``backward``, ``SGD.step``.

    ``W0 (k, d)``, ``v0 (k,)``; returns the trained ``(W, v)``."""
    net = PeerNet(W0.shape[1], W0.shape[0]).to(device=X.device, dtype=X.dtype)
    with torch.no_grad():
        net.hidden.weight.copy_(W0)
        net.out.weight.copy_(v0.unsqueeze(0))
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.5 * ((net(X) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return net.hidden.weight.detach(), net.out.weight.detach()[0]


# ------------------------------------------------------------------------------------------ sections
def workload(args, dev: torch.device, dtype: torch.dtype):
    """Paper B's k = 2 workload of Chapter 9: shared Gaussian data, a = e1, Xavier-normal × σ init."""
    g = cdevice.generator(args.seed)
    a = relunet.unit_target(args.d, device=dev, dtype=dtype)
    X, y = relunet.gaussian_data(args.n, args.d, a, generator=g, device=dev, dtype=dtype)
    W, v = relunet.xavier_init(args.k, args.d, args.seeds, args.sigma, generator=g, device=dev, dtype=dtype)
    return X, y, W, v


def section_engine(args, dev, dtype, out: dict) -> None:
    X, y, W, v = workload(args, dev, dtype)
    E, k, d, n, T = args.seeds, args.k, args.d, args.n, args.steps
    lg = relunet.make_loss_and_grad(X, y)
    print(
        f"\n## Engine vs the peer loop — paper B, k = {k}, d = {d}, n = {n}, {E} seeds, {T} steps, "
        f"{str(dtype).replace('torch.', '')}, μ = {args.lr}, σ = {args.sigma:g}"
    )
    gd.run(lg, [W, v], 3, args.lr, progress=False)  # warm-up
    peak_before, which_before = gemm_peak(dev, dtype, args.reps)
    t_engine, res = timed(lambda: gd.run(lg, [W, v], T, args.lr, progress=False), dev)
    peak_after, which_after = gemm_peak(dev, dtype, args.reps)
    peak = max(peak_before, peak_after)

    S = min(args.peer_seeds, E)
    train_peer(W[0], v[0], X, y, 3, args.lr)  # warm-up
    t_peer_subset, peer = timed(lambda: [train_peer(W[e], v[e], X, y, T, args.lr) for e in range(S)], dev)
    t_peer = t_peer_subset / S * E
    scale = torch.cat([res.params[0][:S].flatten(1), res.params[1][:S]], 1).abs().amax(1)
    diff = (
        torch.stack(
            [torch.cat([(pw - res.params[0][e]).flatten(), pv - res.params[1][e]]).abs().max() for e, (pw, pv) in enumerate(peer)]
        )
        / scale
    )
    agree = float(diff.max())

    flops = formulations.matmul_flops(n, d, k, E) * (T + 1)  # T + 1 gradient evaluations
    rate = flops / t_engine
    # the hot path alone, called back to back as the engine calls it (minimum over repetitions)
    params = [W.clone(), v.clone()]
    t_closure = min(interleaved({"closure": lambda: lg(params)}, args.reps, dev)["closure"])
    closure_rate = formulations.matmul_flops(n, d, k, E) / t_closure
    per_member_step_peer = t_peer_subset / (S * T)
    ceiling = per_member_step_peer / (formulations.matmul_flops(n, d, k, 1) / peak)
    speedup = t_peer / t_engine
    rows = [
        (
            f"engine speed-up over the peer loop (peer extrapolated from {S} of {E} seeds)",
            f"{speedup:.1f}x",
            f">= {TARGETS['engine_vs_peer']:.0f}x",
            speedup >= TARGETS["engine_vs_peer"],
        ),
        ("  ceiling: peer time / (matmul FLOPs at the dense GEMM rate)", f"{ceiling:.1f}x", "", None),
        (
            "engine matmul FLOP rate / dense GEMM rate (whole gd.run)",
            f"{rate / peak:.0%}",
            f">= {TARGETS['flop_fraction']:.0%}",
            rate / peak >= TARGETS["flop_fraction"],
        ),
        ("  hot path alone (loss_and_grad, back to back) / GEMM", f"{closure_rate / peak:.0%}", "", None),
        ("  engine bookkeeping share of gd.run time", f"{max(0.0, 1 - (T + 1) * t_closure / t_engine):.0%}", "", None),
        ("peer vs engine: max relative difference of trained parameters", f"{agree:.1e}", "same computation", agree < 1e-6),
    ]
    _table(rows)
    print(
        f"   dense {str(dtype).replace('torch.', '')} GEMM rate {peak / 1e9:.1f} GFLOP/s ({which_before}/{which_after}, "
        f"before/after {peak_before / 1e9:.1f}/{peak_after / 1e9:.1f}); engine {rate / 1e9:.1f} GFLOP/s; "
        f"peer {formulations.matmul_flops(n, d, k, 1) / per_member_step_peer / 1e9:.2f} GFLOP/s"
    )
    print(
        f"   FLOPs counted: forward Z = W Xᵀ and backward M = (mask ⊙ R) X, 4·n·d·k·E = "
        f"{formulations.matmul_flops(n, d, k, E) / 1e6:.0f} MFLOP per step; elementwise work not counted"
    )
    out["engine"] = {
        "speedup": speedup,
        "ceiling": ceiling,
        "flop_fraction": rate / peak,
        "closure_flop_fraction": closure_rate / peak,
        "peer_agreement": agree,
        "peak_gflops": peak / 1e9,
        "engine_gflops": rate / 1e9,
        "engine_s": t_engine,
        "peer_extrapolated_s": t_peer,
        "peer_seeds_run": S,
        "final_loss_median": float(res.history["loss"][-1].nanmedian()),
        "diverged": int(res.diverged.sum()),
    }


def section_formulations(args, dev, dtype, out: dict) -> None:
    X, y, W, v = workload(args, dev, dtype)
    W = W * 1e7 / args.sigma if args.sigma < 1e-6 else W  # a generic point (masks mixed)
    v = v * 1e7 / args.sigma if args.sigma < 1e-6 else v
    E, k, d, n = args.seeds, args.k, args.d, args.n
    print(
        f"\n## Formulations of the hot path (one loss-and-gradient call, {E} members; "
        f"% of the dense GEMM rate of the same dtype, interleaved)"
    )
    ref = relunet.loss_and_gradient_wv(W, v, X, y)
    cands: dict[str, tuple[Callable[[], object], torch.dtype]] = {
        "relunet.loss_and_gradient_wv (in use)": ((lambda: relunet.loss_and_gradient_wv(W, v, X, y)), dtype)
    }
    for name, fn in formulations.FORMULATIONS.items():
        cands[name] = ((lambda fn=fn: fn(W, v, X, y)), dtype)
    lo = torch.float32
    W32, v32, X32, y32 = (t.to(lo) for t in (W, v, X, y))
    cands["ekn_sign float32"] = ((lambda: formulations.ekn_sign(W32, v32, X32, y32)), lo)
    cands["relunet.loss_and_gradient_wv float32"] = ((lambda: relunet.loss_and_gradient_wv(W32, v32, X32, y32)), lo)
    g64, g32 = gemm_cases(dev, dtype), gemm_cases(dev, lo)
    gname = "gemm1024" if "gemm1024" in g64 else next(iter(g64))
    fns = {k_: f for k_, (f, _) in cands.items()}
    fns["GEMM " + str(dtype)] = g64[gname][0]
    fns["GEMM float32"] = g32[gname][0]
    times = interleaved(fns, args.reps, dev)
    peaks = {dtype: g64[gname][1] / min(times["GEMM " + str(dtype)]), lo: g32[gname][1] / min(times["GEMM float32"])}
    F = formulations.matmul_flops(n, d, k, E)
    base = min(times["relunet.loss_and_gradient_wv (in use)"])
    rows, res = [], {}
    for name, (fn, dt) in cands.items():
        o = fn()
        err = max(float((a.double() - b.double()).abs().max() / b.abs().max()) for a, b in zip(o, ref))
        frac = F / min(times[name]) / peaks[dt]
        rows.append((f"{name}", f"{frac:.0%}", f"{base / min(times[name]):.2f}x vs in use; rel. err {err:.0e}", None))
        res[name] = {"gemm_fraction": frac, "speed_vs_in_use": base / min(times[name]), "rel_err": err}
    _table(rows, head=("formulation", "% of GEMM", "notes", ""))
    print(
        f"   GEMM rates: {peaks[dtype] / 1e9:.1f} GFLOP/s ({str(dtype).replace('torch.', '')}), "
        f"{peaks[lo] / 1e9:.1f} GFLOP/s (float32), {gname}"
    )
    out["formulations"] = res


def section_scaling(args, dev, dtype, out: dict) -> None:
    """``gd.run``'s GEMM fraction against ensemble size, beside the workload's two-GEMM ceiling (see the docstring)."""
    from companion import fused

    k, d, n = args.k, args.d, args.n
    Es = [int(e) for e in args.scaling_E.split(",") if e.strip()]
    modes = [m for m in (args.fused_modes or "").split(",") if m.strip()]
    if dev.type == "cuda" and args.fused_modes is None:
        modes = ["default", "max-autotune-no-cudagraphs"]
    peak, which = gemm_peak(dev, dtype, max(3, args.reps // 3))
    print(
        f"\n## Scaling: gd.run on paper B (k = {k}, d = {d}, n = {n}, {str(dtype).replace('torch.', '')}, "
        f"μ = {args.lr}) as % of this device's square GEMM ({peak / 1e12:.2f} TFLOP/s, {which})"
    )
    head = (
        ["E", "ceiling (2 GEMMs)", "eager"]
        + (["captured"] if dev.type == "cuda" else [])
        + [f"{'captured + ' if dev.type == 'cuda' else ''}fused {m}" for m in modes]
        + ["ms/step (best)"]
    )
    print("   " + " | ".join(head))
    res = {"peak_tflops": peak / 1e12, "rows": []}
    g = cdevice.generator(args.seed)
    a = relunet.unit_target(d, device=dev, dtype=dtype)
    X, y = relunet.gaussian_data(n, d, a, generator=g, device=dev, dtype=dtype)
    for E in Es:
        W, v = relunet.xavier_init(k, d, E, args.sigma, generator=g, device=dev, dtype=dtype)
        F = formulations.matmul_flops(n, d, k, E)
        A = cdevice.randn((k * E, d), generator=g, device=dev, dtype=dtype)
        S = cdevice.randn((k * E, n), generator=g, device=dev, dtype=dtype)
        Z, M = torch.empty(k * E, n, device=dev, dtype=dtype), torch.empty(k * E, d, device=dev, dtype=dtype)
        XT = X.T.contiguous()
        gemms = {"g": lambda: (torch.mm(A, XT, out=Z), torch.mm(S, X, out=M))}
        t_gemms = min(interleaved(gemms, args.reps, dev)["g"])
        gemms = A = S = Z = M = None  # free the GEMM operands before the engine runs
        T = args.scaling_steps if E <= 8192 else max(10, args.scaling_steps // 4)
        runs = {"eager": (relunet.make_loss_and_grad(X, y), False)}
        if dev.type == "cuda":
            runs["captured"] = (relunet.make_loss_and_grad(X, y), True)
        for m in modes:
            runs[f"fused {m}"] = (fused.make_loss_and_grad(X, y, mode=m), dev.type == "cuda")
        row = {"E": E, "ceiling": F / t_gemms / peak, "steps": T}
        cells = [f"{E}", f"{row['ceiling']:.1%}"]
        best = math.inf
        for name, (lg, cap) in runs.items():
            gd.run(lg, [W, v], 3, args.lr, progress=False, capture=cap)  # warm-up (compile, capture)
            t = min(timed(lambda: gd.run(lg, [W, v], T, args.lr, progress=False, capture=cap), dev)[0] for _ in range(2))
            row[name] = F * (T + 1) / t / peak
            best = min(best, t / T)
            cells.append(f"{row[name]:.1%} ({row[name] / row['ceiling']:.0%} of ceiling)")
        cells.append(f"{best * 1e3:.2f}")
        print("   " + " | ".join(cells), flush=True)
        res["rows"].append(row)
        W = v = None  # free this size before the next
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if dev.type == "cuda":
        fr = {r["E"]: max(v for kk, v in r.items() if kk not in ("E", "ceiling", "steps")) for r in res["rows"]}
        small = [fr[E] for E in fr if E <= 512]
        large = [fr[E] for E in fr if E >= 32768]
        rows = []
        if small:
            rows.append(
                (
                    "best gd.run fraction at E <= 512",
                    f"{min(small):.0%}",
                    f">= {TARGETS['gpu_fraction_small']:.0%}",
                    min(small) >= TARGETS["gpu_fraction_small"],
                )
            )
        if large:
            rows.append(
                (
                    "best gd.run fraction at E >= 32768",
                    f"{min(large):.0%}",
                    f">= {TARGETS['gpu_fraction_large']:.0%}",
                    min(large) >= TARGETS["gpu_fraction_large"],
                )
            )
        if rows:
            _table(rows)
    print("   FLOPs counted: the two GEMMs, 4·n·d·k·E per loss-and-gradient, T + 1 evaluations per run of T steps")
    out["scaling"] = res


# ------------------------------------------------------------------------------ small networks, many steps
def small_workloads(args, dev, dtype) -> dict:
    """The small-network regime: Chapter 4's runs (paper A's net ``[2, 3, …, 3, 1]`` at L = 2, 3, 4, sigmoid, n = 8,
    target 1.5, 16 initialisations at scale 0.3 each with ``κη_t`` and ``η_t``, the Tracker as the step, its
    observers and eq. (14) recorded at 60 log-spaced iterations) and Chapter 3's (``[4, 6, …, 6, 1]``, n = 32, the
    four smooth activations blockwise, each on its own data, 16 seeds × init scales 0.5, 1, 2, 4 per activation,
    the paper's ``η_t``, 30 records). Returns ``name -> (closure, params, tracker factory, observers factory, L,
    records)``."""
    from companion import activations, assumptions, descent, smoothness

    out = {}
    for L in [int(x) for x in args.small_depths.split(",") if x.strip()]:
        gen = cdevice.generator(L)  # Chapter 4 seeds its depth L with seed + L (seed 0)
        X = deepnet.ball_data(8, 2, generator=gen, device=dev, dtype=dtype)
        y = torch.full((8,), 1.5, dtype=dtype, device=dev)
        w = deepnet.init_params([2] + [3] * (L - 1) + [1], 16, 0.3, generator=gen, device=dev, dtype=dtype)
        params = [torch.cat([a, a]) for a in w]
        kappa = torch.cat([torch.full((16,), {2: 1e3, 3: 1e5, 4: 1e7}[L]), torch.ones(16)]).to(device=dev, dtype=dtype)

        def tracker(L=L, params=params, kappa=kappa):
            return descent.Tracker(L, deepnet.d_max(params), kappa=kappa, tol=2 * 8 * 2.0**-52)

        def obs(tr, X=X):
            return {**tr.observers(), "eq14": lambda p, l, g: smoothness.equation_14(p, X, "sigmoid").ratio.amax(1)}

        out[f"ch-rate L={L} (E=32)"] = (descent.make_loss_and_grad(params, X, y, "sigmoid"), params, tracker, obs, L, 60)
    for L in [int(x) for x in args.small_descent_depths.split(",") if x.strip()]:
        gen = cdevice.generator(100 + L)
        acts = activations.SMOOTH
        blocks = []
        for _ in acts:
            X = deepnet.ball_data(32, 4, generator=gen, device=dev, dtype=dtype)
            y = 0.5 * cdevice.randn((32,), generator=gen, device=dev, dtype=dtype)
            ws = [
                deepnet.init_params([4] + [6] * (L - 1) + [1], 16, s_, generator=gen, device=dev, dtype=dtype)
                for s_ in (0.5, 1.0, 2.0, 4.0)
            ]
            blocks.append(([torch.cat(z) for z in zip(*ws)], X, y))
        B = blocks[0][0][0].shape[0]
        params = [torch.cat(z) for z in zip(*[b[0] for b in blocks])]
        X = torch.cat([b[1].expand(B, -1, -1) for b in blocks])
        y = torch.cat([b[2].expand(B, -1) for b in blocks])

        def tracker(L=L, params=params):
            return descent.Tracker(L, deepnet.d_max(params), kappa=1.0, tol=2 * 32 * 2.0**-52)

        f = descent.make_loss_and_grad(params, X, y, assumptions.blockwise_activation(acts, B))
        out[f"ch-descent L={L} (E={params[0].shape[0]})"] = (f, params, tracker, lambda tr: tr.observers(), L, 30)
    return out


def hand_loop(f, params, steps: int, L: int, kappa, log_rho: float):
    """The same step written out as a reader would: the closure, Lemma 4.7's ``κη_t`` and Theorem 4.8's running
    quantities (the Tracker's formulas), ``θ ← θ − η g``; no divergence bookkeeping, no records."""
    ps = [p.clone() for p in params]
    E = ps[0].shape[0]
    powers = torch.arange(2 * L - 1, device=ps[0].device, dtype=ps[0].dtype)
    scale = torch.as_tensor(kappa).to(ps[0]) * math.exp(-log_rho)
    views = [(E,) + (1,) * (p.ndim - 1) for p in ps]
    min_g2 = sum_eta = None
    for _ in range(steps):
        loss, grads = f(ps)
        flat_g = torch.cat([g.reshape(E, -1) for g in grads], 1)
        g2 = torch.linalg.vecdot(flat_g, flat_g)
        a = torch.linalg.vector_norm(torch.cat([w.reshape(E, -1) for w in ps], 1), dim=1)
        eta = scale / ((1 + torch.sqrt(loss.clamp_min(0))) * torch.pow(a.unsqueeze(1), powers).sum(1))
        min_g2 = g2 if min_g2 is None else torch.minimum(min_g2, g2)
        sum_eta = eta if sum_eta is None else sum_eta + eta
        ps = [torch.addcmul(p, eta.view(v), g, value=-1) for p, g, v in zip(ps, grads, views)]
    return ps, {"min_g2": min_g2, "sum_eta": sum_eta}


def section_small(args, dev, dtype, out: dict) -> None:
    """``gd.run`` today (eager), ``gd.run(compile=True)`` and a hand-written loop on the small-network workloads,
    interleaved, per step; trajectories compared."""
    T, R = args.small_steps, args.small_rounds
    print(
        f"\n## Small networks, many steps: per-step time of gd.run (eager, today) / gd.run(compile=True) / a hand-written"
        f" loop — {T} steps per run, best of {R} interleaved rounds; compile time excluded from the per-step time and"
        " shown apart"
    )
    res = {}
    rows = []
    for name, (f, params, tracker, obs, L, records) in small_workloads(args, dev, dtype).items():
        sync = _sync(dev)
        results = {}

        def engine(compile_, f=f, params=params, tracker=tracker, obs=obs, records=records, key=None):
            tr = tracker()
            sync()
            t0 = CLOCK["now"]()
            r = gd.run(f, params, T, tr, record_at=gd.log_spaced(T, records), observers=obs(tr), progress=False, compile=compile_)
            sync()
            cs = r.meta.get("compile_cpu_s" if CLOCK["now"] is time.process_time else "compile_s", 0.0)
            results[key] = (r, tr)
            return CLOCK["now"]() - t0 - cs, cs

        def hand(f=f, params=params, tracker=tracker, L=L):
            tr = tracker()
            sync()
            t0 = CLOCK["now"]()
            ps, st = hand_loop(f, params, T, L, tr.kappa, tr.log_rho)
            sync()
            results["hand"] = (ps, st)
            return CLOCK["now"]() - t0, 0.0

        fns = {"eager": lambda: engine(False, key="eager"), "compiled": lambda: engine(True, key="compiled"), "hand": hand}
        times: dict[str, list[float]] = {k: [] for k in fns}
        compile_s: list[float] = []
        for _ in range(R):
            for k, fn in fns.items():
                dt, cs = fn()
                times[k].append(dt / T)
                if k == "compiled":
                    compile_s.append(cs)
        best = {k: min(v) for k, v in times.items()}
        (re, te), (rc, tc), (ph, sh) = results["eager"], results["compiled"], results["hand"]

        def rel(a, b):
            return float(((a - b).abs() / b.abs().clamp_min(1e-300)).max())

        d_params = max(rel(a, b) for a, b in zip(rc.params, re.params))
        d_loss = rel(rc.history["loss"], re.history["loss"])
        d_sum = rel(tc.state["sum_eta"], te.state["sum_eta"])
        same_counts = all(torch.equal(tc.state[k], te.state[k]) for k in ("violations", "ambiguous")) and torch.equal(
            rc.diverged_at, re.diverged_at
        )
        d_hand = max(rel(a, b) for a, b in zip(ph, re.params))
        d_hand_sum = rel(sh["sum_eta"], te.state["sum_eta"])
        speed = best["eager"] / best["compiled"]
        rows.append(
            (
                f"{name}: eager {best['eager'] * 1e6:.0f} us/step",
                f"{speed:.1f}x",
                f"compiled >= 5x; hand loop {best['eager'] / best['hand']:.2f}x",
                speed >= 5.0,
            )
        )
        print(
            f"   {name}: per step eager {best['eager'] * 1e6:.0f} us, compiled {best['compiled'] * 1e6:.0f} us "
            f"({speed:.2f}x), hand-written {best['hand'] * 1e6:.0f} us ({best['eager'] / best['hand']:.2f}x)\n"
            f"   {name}: compiled vs eager: max rel. diff params {d_params:.1e}, loss history {d_loss:.1e}, sum eta "
            f"{d_sum:.1e}; violations/ambiguous/divergence {'identical' if same_counts else 'DIFFER'}; compile "
            f"{min(compile_s):.1f}-{max(compile_s):.1f} s per run | hand vs eager: params {d_hand:.1e}, sum eta "
            f"{d_hand_sum:.1e}",
            flush=True,
        )
        res[name] = {
            "us_per_step": {k: v * 1e6 for k, v in best.items()},
            "compiled_speedup": speed,
            "hand_speedup": best["eager"] / best["hand"],
            "compile_s": compile_s,
            "compiled_vs_eager": {"params": d_params, "loss": d_loss, "sum_eta": d_sum, "counts_identical": same_counts},
            "hand_vs_eager": {"params": d_hand, "sum_eta": d_hand_sum},
        }
    _table(rows, head=("workload", "compiled/eager", "target; the hand-written loop's speed-up over eager", ""))
    out["small"] = res


def hessian_width_auto(args, dev, dtype) -> int:
    """The largest hidden width ``h`` (``P = d·h + h² + h``) whose dense Hessian fits: three ``P × P`` matrices
    (the Hessian, its transpose while symmetrising, ``eigvalsh``'s workspace) in 70 % of free device memory,
    and ``P <= --hessian-max-p``."""
    free = torch.cuda.mem_get_info(dev)[0] if dev.type == "cuda" else 8 * 2**30
    item = torch.finfo(dtype).bits // 8
    h = 1
    while True:
        P = args.hessian_d * (h + 1) + (h + 1) ** 2 + (h + 1)
        if 3 * P * P * item > 0.7 * free or P > args.hessian_max_p:
            return h
        h += 1


def section_hessian(args, dev, dtype, out: dict) -> None:
    h = hessian_width_auto(args, dev, dtype) if args.hessian_width == "auto" else int(args.hessian_width)
    widths = [args.hessian_d, h, h, 1]
    g = cdevice.generator(args.seed)
    params = deepnet.init_params(widths, 1, generator=g, device=dev, dtype=dtype)
    X = deepnet.ball_data(args.hessian_n, args.hessian_d, generator=g, device=dev, dtype=dtype)
    y = cdevice.randn(args.hessian_n, generator=g, device=dev, dtype=dtype)
    f = curvature.deepnet_loss_fn(params, X, y, "tanh")
    theta = curvature.flatten(params)
    P = theta.shape[1]
    print(
        f"\n## Top Hessian eigenvalue: Lanczos on HVPs vs dense Hessian + eigvalsh — paper A's net "
        f"{widths}, tanh, n = {args.hessian_n}, P = {P} parameters, {str(dtype).replace('torch.', '')}"
    )
    curvature.top_eigenvalue(f, theta, steps=3)  # warm-up
    t_lan, lam = timed(lambda: curvature.top_eigenvalue(f, theta, steps=args.lanczos_steps), dev)
    lam = float(lam[0])

    single = lambda th: f(th.unsqueeze(0))[0]  # noqa: E731
    hv = lambda u: torch.func.jvp(torch.func.grad(single), (theta[0],), (u,))[1]  # noqa: E731

    def dense() -> float:
        H = torch.empty(P, P, device=dev, dtype=dtype)
        c = args.hessian_chunk
        for i in range(0, P, c):
            m = min(c, P - i)
            basis = torch.zeros(m, P, device=dev, dtype=dtype)
            basis[torch.arange(m, device=dev), torch.arange(i, i + m, device=dev)] = 1.0
            H[i : i + m] = torch.func.vmap(hv)(basis)
        H = H.add_(H.T.clone()).mul_(0.5)
        return float(torch.linalg.eigvalsh(H)[-1])

    t_dense, lam_dense = timed(dense, dev)
    ratio, rel = t_dense / t_lan, abs(lam - lam_dense) / abs(lam_dense)
    target = TARGETS["lanczos_vs_dense_cuda" if dev.type == "cuda" else "lanczos_vs_dense"]
    _table(
        [
            ("dense time / Lanczos time", f"{ratio:.0f}x", f">= {target:.0f}x", ratio >= target),
            (
                "|λ_Lanczos − λ_dense| / |λ_dense|",
                f"{rel:.1e}",
                f"<= {TARGETS['lanczos_agreement']:.0e}",
                rel <= TARGETS["lanczos_agreement"],
            ),
        ]
    )
    print(f"   λ_max = {lam_dense:.12g}; Lanczos {args.lanczos_steps} steps (full reorthogonalisation)")
    print(f"   times: dense {t_dense:.2f} s, Lanczos {t_lan:.3f} s")
    out["hessian"] = {
        "P": P,
        "t_dense": t_dense,
        "t_lanczos": t_lan,
        "ratio": ratio,
        "rel_err": rel,
        "lambda_dense": lam_dense,
        "lambda_lanczos": lam,
    }


def section_host(args, dev, dtype, out: dict) -> None:
    import host_allocator  # benchmarks/host_allocator.py

    print("\n## Host allocator: companion.memory's reuse of freed memory against glibc's defaults (CPU)", flush=True)
    res = host_allocator.compare(rounds=1 if args.quick else 3, reps=2 if args.quick else 5)
    _table(
        [
            ("fresh 64 MiB write: defaults / reuse", f"{res['speedup_fresh_64mib_write']:.1f}x", "", None),
            ("output HVP, m = 1024: defaults / reuse", f"{res['speedup_output_hvp']:.1f}x", "", None),
        ]
    )
    print(
        f"   times: write {res['default_fresh_64mib_write_s'] * 1e3:.1f} / {res['reuse_fresh_64mib_write_s'] * 1e3:.1f} ms, "
        f"HVP {res['default_output_hvp_s'] * 1e3:.0f} / {res['reuse_output_hvp_s'] * 1e3:.0f} ms; products bit-identical: "
        f"{res['identical']}"
    )
    out["host"] = res


def section_hvp(args, dev, dtype, out: dict) -> None:
    """Chapter 13's output Hessian-vector products: the R-operator written out for paper C's network (what the Lanczos
    runs use) against the generic forward-over-reverse and double-backward products, per product (the forward pass at
    θ, which the R-operator computes once per Lanczos run, excluded) and per Lanczos run of 20 steps."""
    from torch.func import grad, jvp

    print("\n## Output Hessian-vector products: R-operator vs generic autodiff (Chapter 13's network)", flush=True)
    net = widenet.Net("fc", "tanh", 1.0)
    rows, res = [], {}
    for m in (64, 256) if args.quick else (64, 256, 1024):
        g = cdevice.generator(args.seed)
        params = widenet.init_params(10, m, 2, 8, generator=g, device=dev, dtype=dtype)
        x = cdevice.randn((8, 1, 10), generator=g, device=dev, dtype=dtype)
        x = x / x.norm(dim=-1, keepdim=True)
        v = [cdevice.randn(p.shape, generator=g, device=dev, dtype=dtype) for p in params]
        scalar = lambda p: widenet._forward(p, x, net)[0].sum()  # noqa: E731
        products = {
            "rop": widenet._output_hvp_fn(params, x, net),
            "func": lambda u: list(jvp(grad(scalar), (list(params),), (list(u),))[1]),
            "autograd": lambda u: widenet._hvp(scalar, params, u),
        }
        times = interleaved({k: (lambda f=f: f(v)) for k, f in products.items()}, 2 if args.quick else 5, dev)
        best = {k: min(t) for k, t in times.items()}
        ref = products["autograd"](v)
        diff = max(float((a - b).abs().max() / b.abs().max()) for k in ("rop", "func") for a, b in zip(products[k](v), ref))
        lanczos = {
            k: (lambda f=f: widenet._operator_norm(params, f, 20, cdevice.generator(1)).norm)
            for k, f in products.items()
            if k != "autograd"
        }
        lt = interleaved(lanczos, 1 if args.quick else 2, dev)
        norms = {k: f() for k, f in lanczos.items()}
        lrel = float(((norms["rop"] - norms["func"]).abs() / norms["func"]).max())
        res[m] = {**{f"{k}_s": t for k, t in best.items()}, "max_rel_diff": diff, "lanczos_rel_diff": lrel}
        res[m].update({f"lanczos_{k}_s": min(t) for k, t in lt.items()})
        rows += [
            (f"m = {m}: product, forward-over-reverse / R-op", f"{best['func'] / best['rop']:.1f}x", "", None),
            (f"m = {m}: product, double backward / R-op", f"{best['autograd'] / best['rop']:.1f}x", "", None),
            (f"m = {m}: Lanczos 20 steps, f-o-r / R-op", f"{min(lt['func']) / min(lt['rop']):.1f}x", "", None),
        ]
        print(
            f"   m = {m}: product {best['rop'] * 1e3:.1f} / {best['func'] * 1e3:.1f} / {best['autograd'] * 1e3:.1f} ms "
            f"(R-op / f-o-r / double backward), largest relative difference {diff:.1e}; Lanczos "
            f"{min(lt['rop']):.2f} / {min(lt['func']):.2f} s, norms agree to {lrel:.1e}",
            flush=True,
        )
    _table(rows)
    out["hvp"] = res


def section_chapters(args, dev, dtype, out: dict) -> None:
    """Item 4: per-chapter wall times against their budgets (benchmarks/chapter_times.py): the whole quick test
    command, then the times the last ``make book`` recorded (paper scale), if there is such a build."""
    import subprocess

    here = Path(__file__).resolve().parent
    print("\n## 4. Wall time per chapter / budget (benchmarks/chapter_times.py)", flush=True)
    subprocess.run([sys.executable, str(here / "chapter_times.py"), "quick"], check=False)
    cache = here.parent / "_build" / ".jupyter_cache"
    if cache.exists():
        subprocess.run(
            [sys.executable, str(here / "chapter_times.py"), "cache", "--scale", os.environ.get("COMPANION_SCALE", "paper")],
            check=False,
        )
    else:
        print("   no book build cache: run `make book`, then `python benchmarks/chapter_times.py cache`")


# ------------------------------------------------------------------------------------------ output
def _table(rows, head=("measure", "ratio", "target", "")) -> None:
    w0 = max(len(head[0]), *(len(r[0]) for r in rows))
    w1 = max(len(head[1]), *(len(r[1]) for r in rows))
    w2 = max(len(head[2]), *(len(r[2]) for r in rows))
    print(f"   {head[0]:<{w0}}  {head[1]:>{w1}}  {head[2]:<{w2}}")
    for name, val, target, ok in rows:
        verdict = "" if ok is None else ("MET" if ok else "MISSED")
        print(f"   {name:<{w0}}  {val:>{w1}}  {target:<{w2}}  {verdict}")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every section (~1 min)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: companion's policy, CUDA when available)")
    p.add_argument(
        "--sections",
        default=None,
        help="comma-separated: engine, formulations, scaling, small (small networks, many steps), hessian, host "
        "(the host allocator, CPU), hvp (Chapter 13's Hessian-vector products), chapters "
        "(the quick test command "
        "per chapter and the last book build's times; ~10 min more, not in the default). Default: "
        "engine,formulations,small,hessian,host,hvp on the CPU; engine,scaling,small,hessian,hvp on CUDA",
    )
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument(
        "--dtype",
        default="float64",
        choices=["float64", "float32"],
        help="dtype of the engine, scaling and hessian sections, and of the GEMM they are compared with",
    )
    p.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "cpu"],
        help="wall: elapsed time (default); cpu: this process's CPU time, for a loaded shared machine "
        "with --threads 1 (CPU only)",
    )
    p.add_argument("--json", default=None, help="also write the measured numbers to this JSON file")
    p.add_argument("--seeds", type=int, default=512)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--sigma", type=float, default=1e-8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peer-seeds", type=int, default=8, help="seeds the peer loop runs (then extrapolated)")
    p.add_argument("--reps", type=int, default=15, help="repetitions of each interleaved timing")
    p.add_argument(
        "--hessian-width",
        default=None,
        help="hidden width h: P = 100h + h² + h (h=100: 20,100); 'auto': the largest whose dense Hessian "
        "fits in memory (default: 100 on the CPU, auto on CUDA)",
    )
    p.add_argument("--hessian-max-p", type=int, default=70_000, help="cap on P for --hessian-width auto")
    p.add_argument("--scaling-E", default="512,4096,32768,131072", help="ensemble sizes of the scaling section")
    p.add_argument("--scaling-steps", type=int, default=100, help="GD steps per timed run (a quarter above E = 8192)")
    p.add_argument(
        "--fused-modes",
        default=None,
        help="torch.compile modes of companion.fused to time in the scaling section (comma-separated; "
        "default on CUDA: default,max-autotune-no-cudagraphs; on the CPU: none)",
    )
    p.add_argument("--small-depths", default="2,3,4", help="depths L of the small section's Chapter 4 workload")
    p.add_argument("--small-descent-depths", default="3", help="depths L of the small section's Chapter 3 workload")
    p.add_argument("--small-steps", type=int, default=3000, help="GD steps per timed run of the small section")
    p.add_argument("--small-rounds", type=int, default=3, help="interleaved rounds of the small section")
    p.add_argument("--hessian-d", type=int, default=100)
    p.add_argument("--hessian-n", type=int, default=200)
    p.add_argument("--hessian-chunk", type=int, default=512, help="unit vectors per vmap chunk of the dense Hessian")
    p.add_argument("--lanczos-steps", type=int, default=60)
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.peer_seeds, args.reps = min(args.steps, 100), min(args.peer_seeds, 2), min(args.reps, 5)
        args.hessian_width = "30" if args.hessian_width in (None, "auto") else str(min(int(args.hessian_width), 30))
        args.scaling_E = ",".join(e for e in args.scaling_E.split(",") if int(e) <= 4096) or "512"
        args.scaling_steps = min(args.scaling_steps, 20)
        args.small_steps, args.small_rounds = min(args.small_steps, 300), min(args.small_rounds, 1)
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, dtype = cdevice.resolve(args.device, args.dtype)
    if args.sections is None:
        args.sections = "engine,scaling,small,hessian,hvp" if dev.type == "cuda" else "engine,formulations,small,hessian,host,hvp"
    if args.hessian_width is None:
        args.hessian_width = "auto" if dev.type == "cuda" else "100"
    if args.clock == "cpu":
        if dev.type != "cpu" or torch.get_num_threads() != 1:
            raise SystemExit("--clock cpu needs --device cpu and --threads 1 (CPU time of one thread is its compute time)")
        CLOCK["now"] = time.process_time
    out: dict = {"args": vars(args), "device": str(dev), "torch": torch.__version__, "threads": torch.get_num_threads()}
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or platform.machine())
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(
        f"# companion benchmarks — device {dev} ({name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, {args.clock} clock; load average at start {load0[0]:.2f}"
        + (" (QUICK smoke sizes: not the benchmark)" if args.quick else "")
    )
    t0 = time.perf_counter()
    for sec in [s.strip() for s in args.sections.split(",") if s.strip()]:
        {
            "engine": section_engine,
            "formulations": section_formulations,
            "scaling": section_scaling,
            "hessian": section_hessian,
            "chapters": section_chapters,
            "small": section_small,
            "host": section_host,
            "hvp": section_hvp,
        }[sec](args, dev, dtype, out)
    load1 = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    print(
        f"\nload average at end {load1[0]:.2f} (1 min), {load1[1]:.2f} (5 min) on {os.cpu_count()} CPUs; "
        f"total {time.perf_counter() - t0:.0f} s"
    )
    out["load"] = [load0[0], load1[0], load1[1]]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
