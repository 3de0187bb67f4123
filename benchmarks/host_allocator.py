"""The host allocator's setting (:mod:`companion.memory`) against glibc's defaults, in one run.

The setting is process-wide and made at import, so each side runs in a process of its own
(``COMPANION_HOST_MALLOC=default`` or ``reuse``); the two kinds of process alternate ``--rounds`` times and each
time is the minimum over them. Workloads: writing a fresh ``8 × 1024²`` float64 tensor (64 MiB; ``x.clone()``), and
one output Hessian-vector product of :ref:`ch-parameter-ball`'s fully connected network at width 1024, depth 2,
8 members, one input each (``widenet._output_hvp_fn``, the product its Lanczos runs repeat). The products of the
two sides are compared bit for bit.

Usage: ``python benchmarks/host_allocator.py [--rounds 3] [--reps 5]`` (also section ``host`` of
``benchmarks/run.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def measure(reps: int) -> dict:
    """Times (s, minimum over ``reps``) in this process, and a checksum of the product."""
    import torch

    from companion import device, memory, widenet

    net = widenet.Net("fc", "tanh", 1.0)
    gen = device.generator(0)
    params = widenet.init_params(10, 1024, 2, 8, generator=gen, device="cpu", dtype=torch.float64)
    x = device.randn((8, 1, 10), generator=gen, device="cpu", dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    hvp = widenet._output_hvp_fn(params, x, net)
    v = [device.randn(p.shape, generator=gen, device="cpu", dtype=torch.float64) for p in params]
    big = torch.ones(8, 1024, 1024, dtype=torch.float64)

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    out = hvp(v)
    return {
        "state": memory.state(),
        "fresh_64mib_write_s": best(big.clone),
        "output_hvp_s": best(lambda: hvp(v)),
        "checksum": [float(t.double().sum()) for t in out] + [float(t.double().abs().max()) for t in out],
    }


def compare(rounds: int = 3, reps: int = 5) -> dict:
    """Both settings, each in its own processes, alternating; returns the minimum times and their ratios."""
    results: dict[str, list[dict]] = {"default": [], "reuse": []}
    for _ in range(rounds):
        for mode in results:
            env = dict(os.environ, COMPANION_HOST_MALLOC=mode)
            cmd = [sys.executable, __file__, "--child", "--reps", str(reps)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    out: dict = {}
    for mode, runs in results.items():
        if any(r["state"] != mode for r in runs):
            raise RuntimeError(f"a {mode!r} process reported another setting: {[r['state'] for r in runs]}")
        for key in ("fresh_64mib_write_s", "output_hvp_s"):
            out[f"{mode}_{key}"] = min(r[key] for r in runs)
    for key in ("fresh_64mib_write_s", "output_hvp_s"):
        out[f"speedup_{key.removesuffix('_s')}"] = out[f"default_{key}"] / out[f"reuse_{key}"]
    checksums = {json.dumps(r["checksum"]) for runs in results.values() for r in runs}
    out["identical"] = len(checksums) == 1
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per setting (alternating)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per process (the minimum is kept)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.reps)))
        return
    res = compare(args.rounds, args.reps)
    for key in ("fresh_64mib_write", "output_hvp"):
        print(
            f"{key}: glibc defaults {res[f'default_{key}_s'] * 1e3:.1f} ms, reuse {res[f'reuse_{key}_s'] * 1e3:.1f} ms "
            f"({res[f'speedup_{key}']:.1f}x)"
        )
    print("products bit-identical across settings and processes:", res["identical"])


if __name__ == "__main__":
    main()
