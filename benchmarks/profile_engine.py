"""torch.profiler table of the engine on paper B's k = 2 workload (the profile behind benchmarks/README.md).

``python benchmarks/profile_engine.py [--steps 20] [--seeds 512] [--threads 1] [--device cpu] [--capture]
[--fused MODE]`` prints the
operators sorted by self time for ``steps`` steps of ``gd.run`` with ``relunet.make_loss_and_grad``
(after a warm-up run), so that the share of the two GEMMs, of the elementwise passes and of the engine's own
bookkeeping can be read off. ``--capture`` profiles the CUDA-graph path of ``gd.run`` (one graph launch per
step), ``--fused MODE`` the :mod:`companion.fused` closure compiled with that ``torch.compile`` mode.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from companion import device as cdevice
from companion import gd, relunet


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, default=512)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=18)
    p.add_argument("--capture", action="store_true", help="gd.run(capture=True) (CUDA)")
    p.add_argument("--fused", default=None, help="time companion.fused compiled with this torch.compile mode")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, dt = cdevice.resolve(args.device, torch.float64)
    g = cdevice.generator(0)
    a = relunet.unit_target(args.d, device=dev, dtype=dt)
    X, y = relunet.gaussian_data(args.n, args.d, a, generator=g, device=dev, dtype=dt)
    W, v = relunet.xavier_init(2, args.d, args.seeds, 1.0, generator=g, device=dev, dtype=dt)
    if args.fused:
        from companion import fused

        lg = fused.make_loss_and_grad(X, y, mode=args.fused)
    else:
        lg = relunet.make_loss_and_grad(X, y)
    cap = True if args.capture else False
    gd.run(lg, [W, v], 3, 0.1, progress=False, capture=cap)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        gd.run(lg, [W, v], args.steps, 0.1, progress=False, capture=cap)
    key = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    print(
        f"gd.run, {args.steps} steps, E = {args.seeds}, n = {args.n}, d = {args.d}, k = 2, {dev}, "
        f"{torch.get_num_threads()} threads, captured {cap}, closure {'fused ' + args.fused if args.fused else 'relunet'}"
    )
    print(prof.key_averages().table(sort_by=key, row_limit=args.rows))


if __name__ == "__main__":
    main()
