"""CPU/GPU agreement of every module that creates tensors (the engine's CPU and CUDA paths: tests/unit/test_gd.py).

Tests marked ``gpu`` need CUDA and are skipped without it (tests/conftest.py); ``benchmarks/gpu_check.sh``
runs the whole suite on a CUDA machine. The randomness policy (:mod:`companion.device`) draws every random
tensor on the CPU and moves it, so one seed gives **bit-identical** float64 draws on both devices: the
sampler tests assert ``torch.equal``. Computations from identical inputs agree to rounding: the thresholds
below are a few hundred float64 ulps times the condition of the computation (reduction order differs
between devices), not tuned.

The unmarked tests run everywhere: every sampler puts its result on the requested device (a ``meta`` stand-in).
"""

from __future__ import annotations

import pytest
import torch
from comparisons import close, cpu_gen  # noqa: E402

from companion import concentration, curvature, deepnet, device, population, relunet, widenet

F64 = torch.float64
CUDA = torch.device("cuda")


def flat(out) -> list[torch.Tensor]:
    """The tensors of a sampler's output (a tensor, a tuple/list of tensors, or a dict of them), in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for k in sorted(out) for v in flat(out[k])]
    return [t for o in out for t in flat(o)]


def paper_b_problem(E=48, k=2, d=20, n=300, sigma=1.0, per_member=False, r=None):
    g = cpu_gen()
    target = (
        relunet.unit_target(d, device="cpu", dtype=F64)
        if r is None
        else relunet.orthonormal_rows(r, d, generator=g, device="cpu", dtype=F64)
    )
    X, Y = relunet.gaussian_data(n, d, target, ensemble=E if per_member else None, generator=g, device="cpu", dtype=F64)
    W, V = relunet.xavier_init(k, d, E, sigma, r=r, generator=g, device="cpu", dtype=F64)
    return X, Y, W, V


# Every sampler of the package: (generator, device) -> tensor(s). Drawn from one seed on two devices they
# must be bit-identical (randomness policy).
SAMPLERS = {
    "device.randn": lambda g, dev: device.randn((5, 7), generator=g, device=dev, dtype=F64),
    "device.rand": lambda g, dev: device.rand((5, 7), generator=g, device=dev, dtype=F64),
    "device.uniform": lambda g, dev: device.uniform((9,), -2.0, 3.0, generator=g, device=dev, dtype=F64),
    "device.log_uniform": lambda g, dev: device.log_uniform((9,), 1e-3, 10.0, generator=g, device=dev, dtype=F64),
    "device.randint": lambda g, dev: device.randint(0, 100, (11,), generator=g, device=dev),
    "device.randperm": lambda g, dev: device.randperm(13, generator=g, device=dev),
    "deepnet.init_params": lambda g, dev: deepnet.init_params([6, 5, 1], 4, generator=g, device=dev, dtype=F64),
    "deepnet.ball_data": lambda g, dev: deepnet.ball_data(30, 6, generator=g, device=dev, dtype=F64),
    "relunet.orthonormal_rows": lambda g, dev: relunet.orthonormal_rows(3, 8, generator=g, device=dev, dtype=F64),
    "relunet.gaussian_data": lambda g, dev: relunet.gaussian_data(
        40, 8, relunet.unit_target(8, device=dev, dtype=F64), generator=g, device=dev, dtype=F64
    ),
    "relunet.gaussian_data_per_member": lambda g, dev: relunet.gaussian_data(
        40, 8, relunet.unit_target(8, device=dev, dtype=F64), ensemble=3, generator=g, device=dev, dtype=F64
    ),
    "relunet.xavier_init": lambda g, dev: relunet.xavier_init(2, 8, 5, 0.5, generator=g, device=dev, dtype=F64),
    "relunet.gaussian_init": lambda g, dev: relunet.gaussian_init(3, 8, 5, 0.5, generator=g, device=dev, dtype=F64),
    "relunet.theorem2_init": lambda g, dev: relunet.theorem2_init(8, 5, 0.5, generator=g, device=dev, dtype=F64),
    "widenet.init_params": lambda g, dev: widenet.init_params(5, 16, 2, 3, generator=g, device=dev, dtype=F64),
    "widenet.sphere_inputs": lambda g, dev: widenet.sphere_inputs(12, 5, generator=g, device=dev, dtype=F64),
    "widenet.random_direction": lambda g, dev: widenet.random_direction(
        widenet.init_params(5, 16, 2, 3, generator=cpu_gen(1), device=dev, dtype=F64), 0.5, generator=g
    ),
    "concentration.random_pairs": lambda g, dev: concentration.random_pairs(
        10, 6, generator=g, like=torch.zeros(1, dtype=F64, device=dev)
    ),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_draw_on_cpu_and_move(name):
    """Same seed, same numbers: twice on the CPU bit-identical; with a ``meta`` target device the result lands
    there (the draw itself is made on the CPU, so a CPU generator works for every target)."""
    a = flat(SAMPLERS[name](cpu_gen(3), torch.device("cpu")))
    b = flat(SAMPLERS[name](cpu_gen(3), torch.device("cpu")))
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    if name in ("widenet.random_direction", "relunet.gaussian_data", "relunet.gaussian_data_per_member"):
        return  # validate values on the target device
    m = flat(SAMPLERS[name](cpu_gen(3), torch.device("meta")))
    assert all(t.device.type == "meta" for t in m) and [t.shape for t in m] == [t.shape for t in a]


# ------------------------------------------------------------------------------------------ CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_bit_identical_on_cuda(name):
    a = flat(SAMPLERS[name](cpu_gen(3), torch.device("cpu")))
    b = flat(SAMPLERS[name](cpu_gen(3), CUDA))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert y.device.type == "cuda"
        if name.startswith(
            (
                "relunet.orthonormal_rows",
                "relunet.theorem2",
                "widenet.sphere",
                "widenet.random_dir",
                "concentration.random_pairs",
                "deepnet.ball_data",
                "device.log_uniform",
            )
        ):
            close(y, x, rtol=1e-14)  # a normalisation/exp after the draw: rounding only
        else:
            assert torch.equal(y.cpu(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("per_member", [False, True], ids=["shared_data", "per_member_data"])
@pytest.mark.parametrize("r", [None, 3], ids=["one_output", "three_outputs"])
def test_relunet_loss_and_grad_cuda_matches_cpu(per_member, r):
    X, Y, W, V = paper_b_problem(k=2 if r is None else 2 * r, per_member=per_member, r=r)
    ref = relunet.loss_and_gradient_wv(W, V, X, Y)
    got = relunet.loss_and_gradient_wv(*(t.to(CUDA) for t in (W, V, X, Y)))
    for a, b in zip(got, ref):
        assert a.device.type == CUDA.type
        close(a, b)


@pytest.mark.gpu
def test_deepnet_cuda_matches_cpu():
    g = cpu_gen()
    X = deepnet.ball_data(64, 10, generator=g, device="cpu", dtype=F64)
    y = 0.3 * device.randn(64, generator=g, device="cpu", dtype=F64)
    params = deepnet.init_params([10, 12, 12, 1], 8, generator=g, device="cpu", dtype=F64)
    for act in ("tanh", "softplus", "sigmoid", "linear"):
        loss, grads = deepnet.loss_and_gradient(params, X, y, act)
        lc, gc = deepnet.loss_and_gradient([p.to(CUDA) for p in params], X.to(CUDA), y.to(CUDA), act)
        close(lc, loss)
        for a, b in zip(gc, grads):
            close(a, b)


@pytest.mark.gpu
def test_curvature_cuda_matches_cpu():
    g = cpu_gen()
    X = deepnet.ball_data(50, 8, generator=g, device="cpu", dtype=F64)
    y = 0.3 * device.randn(50, generator=g, device="cpu", dtype=F64)
    params = deepnet.init_params([8, 10, 1], 3, generator=g, device="cpu", dtype=F64)
    theta = curvature.flatten(params)
    f = curvature.deepnet_loss_fn(params, X, y, "tanh")
    fc = curvature.deepnet_loss_fn([p.to(CUDA) for p in params], X.to(CUDA), y.to(CUDA), "tanh")
    dense = curvature.hessian(f, theta)
    close(curvature.hessian(fc, theta.to(CUDA)), dense, rtol=1e-11)
    top = torch.linalg.eigvalsh(dense)[:, -1]
    lam = curvature.top_eigenvalue(fc, theta.to(CUDA), steps=theta.shape[1])
    assert lam.device.type == CUDA.type
    close(lam, top, rtol=1e-8)
    # the Lanczos start vector is drawn on the CPU: the same Ritz values on both devices
    A = dense[0]
    ritz_cpu = curvature.lanczos(lambda q: q @ A, 1, A.shape[0], 12, generator=cpu_gen(2), dtype=F64)
    Ac = A.to(CUDA)
    ritz_gpu = curvature.lanczos(lambda q: q @ Ac, 1, A.shape[0], 12, generator=cpu_gen(2), device=CUDA, dtype=F64)
    close(ritz_gpu, ritz_cpu, rtol=1e-9)


@pytest.mark.gpu
def test_population_cuda_matches_cpu():
    g = cpu_gen()
    d, k = 7, 3
    a = relunet.unit_target(d, device="cpu", dtype=F64)
    W = device.randn((5, k, d), generator=g, device="cpu", dtype=F64)
    v = device.randn((5, k), generator=g, device="cpu", dtype=F64)
    Wc, vc, ac = W.to(CUDA), v.to(CUDA), a.to(CUDA)
    close(population.loss(Wc, vc, ac), population.loss(W, v, a))
    for x, y in zip(population.gradient(Wc, vc, ac), population.gradient(W, v, a)):
        close(x, y)
    close(population.hessian(Wc, vc, ac), population.hessian(W, v, a), rtol=1e-10)
    for x, y in zip(population.loss_and_gradient_wv(Wc, vc, ac), population.loss_and_gradient_wv(W, v, a)):
        close(x, y)
    for x, y in zip(population.make_loss_and_grad(ac)([Wc, vc])[1], population.make_loss_and_grad(a)([W, v])[1]):
        close(x, y)
    fn = lambda x: torch.relu(x[:, :2]) ** 2  # noqa: E731
    m_cpu, s_cpu = population.mc_mean(fn, d, 5000, generator=cpu_gen(4), batch=1000, device="cpu")
    m_gpu, s_gpu = population.mc_mean(fn, d, 5000, generator=cpu_gen(4), batch=1000, device=CUDA)
    close(m_gpu, m_cpu, rtol=1e-12)
    close(s_gpu, s_cpu, rtol=1e-9)


@pytest.mark.gpu
def test_widenet_cuda_matches_cpu():
    params = widenet.init_params(5, 32, 3, 2, generator=cpu_gen(), device="cpu", dtype=F64)
    X = widenet.sphere_inputs(9, 5, generator=cpu_gen(1), device="cpu", dtype=F64)
    pc = [v.to(CUDA) for v in params]
    for arch in ("fc", "res"):
        net = widenet.Net(arch=arch)
        close(widenet.forward(pc, X.to(CUDA), net), widenet.forward(params, X, net))
        close(widenet.ntk(pc, X.to(CUDA), net), widenet.ntk(params, X, net), rtol=1e-10)
        close(widenet.jacobian_norm(pc, X.to(CUDA), net), widenet.jacobian_norm(params, X, net), rtol=1e-10)


@pytest.mark.gpu
def test_concentration_cuda_matches_cpu():
    X = device.randn((200, 6), generator=cpu_gen(), device="cpu", dtype=F64)
    u, w = concentration.random_pairs(16, 6, generator=cpu_gen(1), like=X)
    close(concentration.deviation(X.to(CUDA), u.to(CUDA), w.to(CUDA)), concentration.deviation(X, u, w), rtol=1e-10)
    close(
        concentration.random_search(X.to(CUDA), 64, generator=cpu_gen(2)),
        concentration.random_search(X, 64, generator=cpu_gen(2)),
        rtol=1e-10,
    )


@pytest.mark.gpu
def test_smoothness_and_search_cuda_match_cpu():
    from companion import search, smoothness

    g = cpu_gen()
    widths = [5, 6, 6, 1]
    X = deepnet.ball_data(20, 5, generator=g, device="cpu", dtype=F64)
    y = 0.3 * torch.tanh(X[:, 0])
    p1 = deepnet.init_params(widths, 4, generator=g, device="cpu", dtype=F64)
    p2 = [p + 0.01 * device.randn(p.shape, generator=g, device="cpu", dtype=F64) for p in p1]
    ref = smoothness.lemma_4_5(p1, p2, X, y, "tanh")
    got = smoothness.lemma_4_5([p.to(CUDA) for p in p1], [p.to(CUDA) for p in p2], X.to(CUDA), y.to(CUDA), "tanh")
    close(got.lhs, ref.lhs, rtol=1e-10)
    close(got.rhs, ref.rhs, rtol=1e-10)
    q1, q2 = search.random_pairs(widths, 6, generator=cpu_gen(5), device="cpu", dtype=F64)
    r1, r2 = search.random_pairs(widths, 6, generator=cpu_gen(5), device=CUDA, dtype=F64)
    for a, b in zip(r1 + r2, q1 + q2):
        close(a, b, rtol=1e-14)
