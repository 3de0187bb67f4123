"""Paper C's width-m fully connected and residual networks, and what changes inside the parameter ball
(Chapter 13).

The networks (paper C, following Du, Lee, Li, Wang, Zhai 2019), for an input ``x ∈ R^d`` on the sphere:

* first layer (both architectures): ``x_1 = (√c_σ/√m) σ(W_1 x)``, ``W_1 ∈ R^{m×d}``;
* fully connected, ``h ≥ 2``: ``x_h = (√c_σ/√m) σ(W_h x_{h−1})``, ``W_h ∈ R^{m×m}``;
* residual, ``h ≥ 2``: ``x_h = x_{h−1} + (c_res/(H√m)) σ(W_h x_{h−1})``;
* output ``f(x) = aᵀ x_H`` with ``a ∈ R^m``, ``‖a‖ ≈ √m``.

``c_σ = 1/E[σ(g)²]`` (``g ~ N(0, 1)``) keeps the feature norms of order one; every entry of every ``W_h`` and of
``a`` is ``N(0, 1)`` at initialisation. In the notation of the paper, ``s_h = √c_σ`` for the first layer and for
fully connected layers, ``s_h = c_res/H`` for residual layers ``h ≥ 2``.

Parameters are a dict ``{"W1": (E, m, d), "W2": (E, m, m), …, "WH": (E, m, m), "a": (E, m)}`` with a leading
ensemble axis ``E``. Members are independent, so derivatives of the ensemble *sum* of a per-member scalar give
per-member derivatives; that is how :mod:`torch.func` (``grad``) is applied below without ``vmap``.
The output Hessian is only ever touched through Hessian-vector products (double backward by default,
``torch.func`` forward-over-reverse on request — equal, tested; the first has far less per-call overhead on a CPU),
and its spectral norm comes from a low-memory batched Lanczos iteration (:func:`lanczos_extremes`; cross-checked
against :func:`companion.curvature.lanczos`, which stores the whole Krylov basis — gigabytes at m = 4096):
nothing of size ``P × P`` is ever formed. Jacobians are never formed either: each output gradient with respect
to ``W_h`` is the rank-one matrix ``u_{h,i} x_{h−1,i}ᵀ``, so Gram matrices and ``J h`` come from one backward pass.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import grad, jvp

from . import activations, device, validation
from .device import randn

ARCHS = ("fc", "res")
Params = dict


# ----------------------------------------------------------------------------------------------- set-up
@functools.lru_cache(maxsize=None)
def _c_sigma_by_name(name: str) -> float:
    a = activations.get(name)
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    vals = a.fn(torch.as_tensor(nodes, dtype=torch.float64)).numpy()
    return float(1.0 / (np.sum(weights * vals ** 2) / math.sqrt(2 * math.pi)))


def c_sigma(act: str | activations.Activation) -> float:
    """``c_σ = 1 / E[σ(g)²]``, ``g ~ N(0, 1)``, by 200-point Gauss–Hermite quadrature (paper C's scaling,
    Chapter 13). For tanh ≈ 2.54, for softplus ≈ 1.07."""
    return _c_sigma_by_name(activations.get(act).name)


def _check_arch(arch: str) -> str:
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    return arch


def _smooth_activation(act) -> activations.Activation:
    a = activations.get(act)
    if not a.smooth or a.d2 is None:
        raise ValueError(f"paper C needs a smooth activation (σ' bounded and Lipschitz); {a.name!r} is not")
    return a


def depth(params: Params) -> int:
    """Number of weight layers ``H`` of a parameter dict."""
    return sum(1 for k in params if k.startswith("W"))


def check_params(params: Params) -> tuple[int, int, int, int]:
    """Validate a parameter dict; return ``(E, m, d, H)``. Raises ``ValueError`` on a malformed dict."""
    if not isinstance(params, dict) or "a" not in params or "W1" not in params:
        raise ValueError("params must be a dict with keys 'W1', …, 'WH', 'a'")
    H = depth(params)
    expected = {f"W{h}" for h in range(1, H + 1)} | {"a"}
    if set(params) != expected:
        raise ValueError(f"params keys must be {sorted(expected)}, got {sorted(params)}")
    W1 = validation.tensor("W1", params["W1"], ndim=3)
    E, m, d = W1.shape
    validation.tensor("a", params["a"], ndim=2)
    if params["a"].shape != (E, m):
        raise ValueError(f"a must have shape {(E, m)}, got {tuple(params['a'].shape)}")
    for h in range(2, H + 1):
        W = validation.tensor(f"W{h}", params[f"W{h}"], ndim=3)
        if W.shape != (E, m, m):
            raise ValueError(f"W{h} must have shape {(E, m, m)}, got {tuple(W.shape)}")
    return E, m, d, H


def init_params(d: int, m: int, H: int, ensemble: int = 1, *, generator: torch.Generator | None = None,
                device_=None, dtype=None) -> Params:
    """Gaussian initialisation θ0 (paper C / Du et al.): every entry of ``W_h`` and ``a`` is ``N(0, 1)``,
    so ``‖a‖ ≈ √m`` (Chapter 13). Returns ``{"W1": (E, m, d), "W2".."WH": (E, m, m), "a": (E, m)}``."""
    for name, v in (("d", d), ("m", m), ("H", H), ("ensemble", ensemble)):
        validation.positive_int(name, v)
    dev, dt = device.resolve(device_, dtype)
    p = {"W1": randn((ensemble, m, d), generator=generator, device=dev, dtype=dt)}
    for h in range(2, H + 1):
        p[f"W{h}"] = randn((ensemble, m, m), generator=generator, device=dev, dtype=dt)
    p["a"] = randn((ensemble, m), generator=generator, device=dev, dtype=dt)
    return p


def sphere_inputs(n: int, d: int, *, generator: torch.Generator | None = None, device_=None, dtype=None) -> Tensor:
    """``n`` inputs drawn uniformly on the unit sphere of ``R^d``, shape ``(n, d)`` (Chapter 13)."""
    validation.positive_int("n", n)
    validation.positive_int("d", d)
    dev, dt = device.resolve(device_, dtype)
    X = randn((n, d), generator=generator, device=dev, dtype=dt)
    return X / X.norm(dim=1, keepdim=True)


# ------------------------------------------------------------------------------------------ forward pass
@dataclass(frozen=True)
class Net:
    """Which network: ``arch`` in ``("fc", "res")``, a smooth activation, and the residual constant."""

    arch: str = "fc"
    act: str = "tanh"
    c_res: float = 1.0

    def __post_init__(self):
        _check_arch(self.arch)
        _smooth_activation(self.act)
        validation.nonnegative("c_res", self.c_res)
        c_sigma(self.act)  # computed (and cached) here, outside any torch.func transform

    def scales(self, H: int) -> list[float]:
        """``[s_1, …, s_H]``: ``√c_σ`` for layer 1 and fully connected layers, ``c_res/H`` for residual ``h ≥ 2``."""
        cs = math.sqrt(c_sigma(self.act))
        return [cs if (h == 1 or self.arch == "fc") else self.c_res / H for h in range(1, H + 1)]


def _check_X(X: Tensor, d: int) -> Tensor:
    validation.tensor("X", X, ndim=2)
    if X.shape[1] != d:
        raise ValueError(f"X must have shape (n, {d}), got {tuple(X.shape)}")
    return X


def _forward(params: Params, X: Tensor, net: Net, taps: dict | None = None, xtaps: dict | None = None):
    """Internal forward pass. Returns ``(f (E, n), xs, zs)`` with ``xs = [x_0 .. x_H]`` (each ``(E, n, ·)``) and
    ``zs = [z_1 .. z_H]`` (``(E, n, m)``); ``taps[h]`` (``(E, n, m)``, zeros) is added to ``z_h`` so that the
    gradient with respect to a tap is the per-sample ``∂f_i/∂z_h``; likewise ``xtaps[h]`` added to ``x_h``."""
    H = depth(params)
    act = activations.get(net.act)
    m = params["a"].shape[-1]
    s = net.scales(H)
    x = X.expand(params["a"].shape[0], *X.shape)
    xs, zs = [x], []
    for h in range(1, H + 1):
        z = x @ params[f"W{h}"].transpose(-1, -2)
        if taps is not None:
            z = z + taps[h]
        zs.append(z)
        out = (s[h - 1] / math.sqrt(m)) * act.fn(z)
        x = out if (h == 1 or net.arch == "fc") else x + out
        if xtaps is not None:
            x = x + xtaps[h]
        xs.append(x)
    f = (x * params["a"].unsqueeze(-2)).sum(-1)
    return f, xs, zs


def forward(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """Network outputs ``f(x_i) = aᵀ x_H(x_i)`` for every member, shape ``(E, n)`` (paper C; Chapter 13).

    ``params`` as from :func:`init_params`; ``X``: ``(n, d)``."""
    _, _, d, _ = check_params(params)
    _check_X(X, d)
    return _forward(params, X, net)[0]


# ------------------------------------------------------------------------------ Jacobian and Gram matrices
def _preactivation_grads(params: Params, X: Tensor, net: Net):
    """Per-sample ``u_h = ∂f_i/∂z_h`` (``(E, n, m)`` each) with the features; one backward pass of ``Σ_{e,i} f``."""
    E, m, _, H = check_params(params)
    taps = {h: torch.zeros(E, X.shape[0], m, dtype=X.dtype, device=X.device) for h in range(1, H + 1)}

    def total(t):
        f, xs, zs = _forward(params, X, net, t)
        return f.sum(), (xs, zs)

    us, (xs, zs) = grad(total, has_aux=True)(taps)
    return [us[h] for h in range(1, H + 1)], xs, zs


def backward_vectors(params: Params, X: Tensor, net: Net = Net()) -> list[Tensor]:
    """Paper C's backward vectors ``b_h = ∂f/∂x_h`` per sample, ``[b_1 … b_H]`` each ``(E, n, m)``; ``b_H = a``
    (Chapter 13). Their sup-norm ``M = max_h ‖b_h(θ0)‖_∞`` enters the Hessian and Taylor bounds ``T M (1+D)/√m``:
    for Gaussian ``a`` it grows like ``√(2 log m)``."""
    E, m, d, H = check_params(params)
    _check_X(X, d)
    xt = {h: torch.zeros(E, X.shape[0], m, dtype=X.dtype, device=X.device) for h in range(1, H + 1)}
    bs = grad(lambda t: _forward(params, X, net, None, t)[0].sum())(xt)
    return [bs[h] for h in range(1, H + 1)]


def backward_sup_norm(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """``M = max_{h, i} ‖b_h(x_i)‖_∞`` per member, ``(E,)`` (paper C's ``M``; Chapter 13)."""
    return torch.stack([b.abs().flatten(1).max(1).values for b in backward_vectors(params, X, net)], 0).max(0).values


def layer_grams(params: Params, X: Tensor, net: Net = Net()) -> dict:
    """Gram matrices of the output gradients, layer by layer (paper C, Chapter 13): for each ``W_h``,
    ``K_h[i, j] = ⟨∂f_i/∂W_h, ∂f_j/∂W_h⟩ = ⟨u_{h,i}, u_{h,j}⟩ ⟨x_{h−1,i}, x_{h−1,j}⟩`` (each gradient is the
    rank-one matrix ``u_{h,i} x_{h−1,i}ᵀ``), and ``K_a = X_H X_Hᵀ``. Returns ``{"W1": (E, n, n), …, "a": (E, n, n)}``;
    their sum is the tangent kernel ``J Jᵀ``. No Jacobian of size ``n × P`` is formed."""
    _, _, d, H = check_params(params)
    _check_X(X, d)
    us, xs, _ = _preactivation_grads(params, X, net)
    out = {}
    for h in range(1, H + 1):
        out[f"W{h}"] = (us[h - 1] @ us[h - 1].transpose(-1, -2)) * (xs[h - 1] @ xs[h - 1].transpose(-1, -2))
    out["a"] = xs[H] @ xs[H].transpose(-1, -2)
    return out


def last_layer_gram(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """Paper C's last-hidden-layer Gram, closed form (Chapter 13):
    ``G_H[i, j] = γ ⟨X_i, X_j⟩ m⁻¹ Σ_r a_r² σ'(Z_{i,r}) σ'(Z_{j,r})`` with ``X_i = x_{H−1}(x_i)``,
    ``Z_i = W_H X_i`` and ``γ = s_H²`` (``c_σ`` fully connected, ``c_res²/H²`` residual). Shape ``(E, n, n)``.
    Equals ``layer_grams(...)["W{H}"]`` (tested)."""
    E, m, d, H = check_params(params)
    _check_X(X, d)
    _, xs, zs = _forward(params, X, net)
    gamma = net.scales(H)[-1] ** 2
    act = activations.get(net.act)
    g = params["a"].unsqueeze(-2) * act.d1(zs[-1])                     # (E, n, m): a_r σ'(Z_{i,r})
    Xh = xs[H - 1]
    return gamma * (Xh @ Xh.transpose(-1, -2)) * (g @ g.transpose(-1, -2)) / m


def ntk(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """The tangent kernel ``J Jᵀ`` (``J = ∂f/∂θ``, ``n × P``), shape ``(E, n, n)``, as the sum of :func:`layer_grams`."""
    return sum(layer_grams(params, X, net).values())


def jacobian_norm(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """``‖J‖_op = √λ_max(J Jᵀ)`` per member, shape ``(E,)`` (paper C: ``‖J‖ ≤ T√n`` or ``C√n``; Chapter 13)."""
    return torch.linalg.eigvalsh(ntk(params, X, net))[..., -1].clamp_min(0).sqrt()


def gram_drift(G: Tensor, G0: Tensor) -> tuple[Tensor, Tensor]:
    """Entrywise max and operator norm of ``G − G0`` per member: ``(E,), (E,)`` (paper C; Chapter 13)."""
    validation.tensor("G", G, ndim=3)
    validation.tensor("G0", G0, ndim=3)
    if G.shape != G0.shape:
        raise ValueError(f"G and G0 must have equal shapes, got {tuple(G.shape)} and {tuple(G0.shape)}")
    diff = G - G0
    return diff.abs().flatten(1).max(dim=1).values, torch.linalg.matrix_norm(diff, ord=2)


# ------------------------------------------------------------------------------------- parameter vectors
def add(params: Params, h: Params, t: float = 1.0) -> Params:
    """``θ + t h`` (dicts of equal shapes)."""
    if set(params) != set(h):
        raise ValueError("params and direction must have the same keys")
    return {k: params[k] + t * h[k] for k in params}


def sq_norm(h: Params) -> Tensor:
    """``‖h‖²`` over all blocks, per member: ``(E,)``."""
    return sum((v ** 2).flatten(1).sum(1) for v in h.values())


def dot(h: Params, g: Params) -> Tensor:
    """``⟨h, g⟩`` per member, ``(E,)``."""
    return sum((h[k] * g[k]).flatten(1).sum(1) for k in h)


def scale_to(h: Params, D) -> Params:
    """Rescale every member of ``h`` to total norm ``D`` (a float or an ``(E,)`` tensor)."""
    nrm = sq_norm(h).sqrt()
    if bool((nrm == 0).any()):
        raise ValueError("cannot rescale a zero direction")
    c = torch.as_tensor(D, dtype=nrm.dtype, device=nrm.device) / nrm
    return {k: v * c.view(-1, *([1] * (v.ndim - 1))) for k, v in h.items()}


def random_direction(params: Params, D: float, *, generator: torch.Generator | None = None) -> Params:
    """A Gaussian direction with ``‖h‖ = D`` per member (all blocks together), so ``θ0 + h`` lies in the ball
    ``‖W_h − W_h(0)‖ ≤ D``, ``‖a − a0‖ ≤ D`` of paper C (Chapter 13)."""
    check_params(params)
    validation.nonnegative("D", D)
    h = {k: randn(v.shape, generator=generator, dtype=v.dtype, device=v.device) for k, v in params.items()}
    return scale_to(h, D)


def gradient_direction(params: Params, X: Tensor, D: float, coef: Tensor, net: Net = Net()) -> Params:
    """``h = D Jᵀc / ‖Jᵀc‖``: a direction in the span of the output gradients, i.e. where gradient descent on a
    square loss moves (its step is ``−η Jᵀ r``). ``coef``: ``(E, n)``. Rank-one per layer. (Chapter 13)"""
    E, _, d, _ = check_params(params)
    _check_X(X, d)
    validation.nonnegative("D", D)
    validation.tensor("coef", coef, ndim=2)
    if coef.shape != (E, X.shape[0]):
        raise ValueError(f"coef must have shape {(E, X.shape[0])}, got {tuple(coef.shape)}")
    g = grad(lambda p: (_forward(p, X, net)[0] * coef).sum())(params)
    return scale_to(g, D)


def gram_ascent_direction(params: Params, X: Tensor, D: float, net: Net = Net()) -> Params:
    """``h = D ∇_θ(uᵀ G_H u) / ‖∇_θ(uᵀ G_H u)‖`` with ``u`` the top eigenvector of ``G_H(θ0)``: to first order in
    ``D`` the direction of the ball that moves the last-hidden-layer Gram the most along ``u`` (steepest ascent).
    Since paper C bounds the drift over the *whole* ball, the drift along this direction is a lower estimate of
    that supremum (Chapter 13); random or gradient-descent directions move ``G_H`` much less."""
    E, _, d, _ = check_params(params)
    _check_X(X, d)
    validation.nonnegative("D", D)
    u = torch.linalg.eigh(last_layer_gram(params, X, net))[1][..., -1].detach()      # (E, n)
    g = grad(lambda p: torch.einsum("ei,eij,ej->", u, last_layer_gram(p, X, net), u))(params)
    return scale_to(g, D)


# --------------------------------------------------------------------- Hessian-vector products and Lanczos
def output_hvp(params: Params, x: Tensor, v: Params, net: Net = Net(), *, method: str = "autograd") -> Params:
    """``∇²f(x; θ) v`` per member, ``x``: ``(d,)``; never forms the Hessian (paper C's output Hessian; Chapter 13).

    ``method="func"``: forward-over-reverse ``torch.func.jvp(torch.func.grad(f))``; ``method="autograd"`` (default):
    reverse-over-reverse double backward with :func:`torch.autograd.grad`. Both give the same vector (tested); on a
    CPU the second has far less per-call overhead at small widths (about 5x at m = 64), which matters because
    Lanczos calls it dozens of times per point of a sweep."""
    xx = x.reshape(1, -1)
    if method == "func":
        g = grad(lambda p: _forward(p, xx, net)[0].sum())
        return jvp(g, (params,), (v,))[1]
    if method != "autograd":
        raise ValueError(f"method must be 'autograd' or 'func', got {method!r}")
    with torch.enable_grad():
        keys = list(params)
        pp = {k: params[k].detach().requires_grad_() for k in keys}
        out = _forward(pp, xx, net)[0].sum()
        gs = torch.autograd.grad(out, [pp[k] for k in keys], create_graph=True)
        s = sum((g_ * v[k]).sum() for g_, k in zip(gs, keys))
        hv = torch.autograd.grad(s, [pp[k] for k in keys])
    return dict(zip(keys, hv))


def lanczos_extremes(matvec, v0: Params, iters: int, *, return_vector: bool = False):
    """Batched Lanczos (three-term recurrence, no further re-orthogonalisation) for a symmetric operator given
    by ``matvec`` on parameter dicts with a leading ensemble axis (Chapter 13). Returns the smallest and largest
    Ritz values, each ``(E, iters)`` (column ``k`` after ``k + 1`` steps). Extreme Ritz values converge from inside
    the spectrum, so ``max(|λ_min|, |λ_max|)`` is a lower estimate of ``‖A‖`` that increases with ``k``; lost
    orthogonality only duplicates converged Ritz values (ghosts), it does not move the extremes.

    With ``return_vector`` also the Ritz vector of the Ritz value of largest modulus (a dict like ``v0``, unit
    norm per member). It is built by a second, identical pass of the recurrence (deterministic), so only three
    Lanczos vectors are ever held in memory, whatever ``iters``."""
    validation.positive_int("iters", iters)
    T, lo, hi = _lanczos_pass(matvec, v0, iters)
    if not return_vector:
        return lo, hi
    ev, vecs = torch.linalg.eigh(T)                                   # (E, k), (E, k, k)
    idx = torch.where(ev[:, -1].abs() >= ev[:, 0].abs(), ev.shape[1] - 1, 0)
    coef = vecs[torch.arange(vecs.shape[0]), :, idx]                  # (E, k)
    _, _, _, y = _lanczos_pass(matvec, v0, iters, coef)
    return lo, hi, scale_to(y, 1.0)


def _lanczos_pass(matvec, v0: Params, iters: int, coef: Tensor | None = None):
    q = scale_to(v0, 1.0)
    first = next(iter(q.values()))
    E, dt, dev = first.shape[0], first.dtype, first.device
    alphas, betas, lo, hi = [], [], [], []
    q_prev, beta = None, torch.zeros(E, dtype=dt, device=dev)
    y = None if coef is None else {k: torch.zeros_like(v) for k, v in q.items()}
    for k in range(iters):
        if y is not None:
            y = {key: y[key] + _bc(coef[:, k], q[key]) * q[key] for key in q}
            if k + 1 == iters:
                break
        w = matvec(q)
        alpha = dot(w, q)
        w = {key: w[key] - _bc(alpha, w[key]) * q[key] - (0 if q_prev is None else _bc(beta, w[key]) * q_prev[key])
             for key in w}
        alphas.append(alpha)
        if y is None:
            T = torch.diag_embed(torch.stack(alphas, -1))
            if betas:
                b = torch.stack(betas, -1)
                T = T + torch.diag_embed(b, 1) + torch.diag_embed(b, -1)
            ev = torch.linalg.eigvalsh(T)
            lo.append(ev[:, 0])
            hi.append(ev[:, -1])
        beta = sq_norm(w).sqrt().clamp_min(1e-300)
        if k + 1 < iters:
            betas.append(beta)
            q_prev, q = q, {key: w[key] / _bc(beta, w[key]) for key in w}
    if y is not None:
        return None, None, None, y
    return T, torch.stack(lo, -1), torch.stack(hi, -1)


def _bc(s: Tensor, like: Tensor) -> Tensor:
    return s.view(-1, *([1] * (like.ndim - 1)))


def output_hessian_norm(params: Params, x: Tensor, net: Net = Net(), *, iters: int = 30,
                        generator: torch.Generator | None = None, return_history: bool = False,
                        return_vector: bool = False):
    """Spectral norm ``‖∇²f(x; θ)‖`` per member, ``(E,)``, by Lanczos on output HVPs (paper C: ``≤ T M (1+D)/√m``
    or ``C M (1+D)/√m``; Chapter 13). ``x``: ``(d,)``. Returns the norm, then (if asked) the running estimate
    ``(E, iters)`` (to show convergence) and the unit top eigenvector (a parameter dict)."""
    _, _, d, _ = check_params(params)
    validation.tensor("x", x, ndim=1)
    if x.shape[0] != d:
        raise ValueError(f"x must have shape ({d},), got {tuple(x.shape)}")
    v0 = {k: randn(v.shape, generator=generator, dtype=v.dtype, device=v.device) for k, v in params.items()}
    res = lanczos_extremes(lambda v: output_hvp(params, x, v, net), v0, iters, return_vector=return_vector)
    hist = torch.maximum(res[0].abs(), res[1].abs())
    out = (hist[:, -1],) + ((hist,) if return_history else ()) + ((res[2],) if return_vector else ())
    return out if len(out) > 1 else out[0]


# ----------------------------------------------------------------------------------------- Taylor remainder
def jvp_outputs(params: Params, X: Tensor, h: Params, net: Net = Net()) -> Tensor:
    """``Df(θ) h`` for every input, shape ``(E, n)`` (Chapter 13), from the rank-one structure of the output
    gradients: ``⟨∂f_i/∂W_h, ΔW_h⟩ = u_{h,i}ᵀ ΔW_h x_{h−1,i}`` and ``⟨∂f_i/∂a, Δa⟩ = Δaᵀ x_{H,i}`` (one backward
    pass; equal to ``torch.func.jvp``, tested, which on a CPU carries a large per-call overhead)."""
    _, _, d, H = check_params(params)
    _check_X(X, d)
    us, xs, _ = _preactivation_grads(params, X, net)
    out = (xs[H] * h["a"].unsqueeze(-2)).sum(-1)
    for k in range(1, H + 1):
        out = out + ((xs[k - 1] @ h[f"W{k}"].transpose(-1, -2)) * us[k - 1]).sum(-1)
    return out


def taylor_remainder(params: Params, X: Tensor, h: Params, net: Net = Net()) -> Tensor:
    """``|f_i(θ + h) − f_i(θ) − Df_i(θ) h|`` per member and input, shape ``(E, n)`` (paper C's Taylor bound
    ``≤ T M (1+D) ‖h‖² / (2√m)``; Chapter 13). ``Df(θ) h`` by :func:`jvp_outputs`."""
    _, _, d, _ = check_params(params)
    _check_X(X, d)
    f0 = _forward(params, X, net)[0]
    f1 = _forward(add(params, h), X, net)[0]
    return (f1 - f0 - jvp_outputs(params, X, h, net)).abs()


# ------------------------------------------------------------------------------ one point of a sweep
def ball_measurements(params: Params, X: Tensor, D: float, net: Net = Net(), *, iters: int = 12,
                      generator: torch.Generator | None = None, ball_hessian: bool = False) -> dict:
    """Everything Chapter 13 measures at one width/depth/radius, per member (each value ``(E,)``):

    * ``gram_adv_entry``/``gram_adv_op``: ``‖G_H(θ0 + h) − G_H(θ0)‖`` (entrywise max / operator norm) along the
      steepest-ascent direction of :func:`gram_ascent_direction` with ``‖h‖ = D``; ``gram_gd_entry`` along a
      gradient-span direction (:func:`gradient_direction`), ``gram_rand_entry`` along a random one;
    * ``hess``: ``‖∇²f(x_1; θ0)‖`` (Lanczos, ``iters`` steps); ``hess_ball`` (only with ``ball_hessian``): the
      same at ``θ0 + h_adv``;
      ``hess_conv``: the Lanczos estimate after ``iters`` steps over that after ``3 iters / 4`` steps;
    * ``taylor``: ``max(|R(θ0; ±D v)|)`` for the top Hessian eigenvector ``v`` of ``f(x_1)``, where
      ``R(θ; h) = f(θ + h) − f(θ) − Df(θ) h``; ``taylor_rand``: along a random direction of norm ``D``;
    * ``M``: ``max_h ‖b_h(θ0)‖_∞`` (:func:`backward_sup_norm`); ``J``: ``‖J(θ0)‖/√n``; ``G0``: ``max |G_H(θ0)|``.
    """
    E, m, d, H = check_params(params)
    _check_X(X, d)
    n = X.shape[0]
    out = {}
    G0 = last_layer_gram(params, X, net)
    h_adv = gram_ascent_direction(params, X, D, net)
    coef = randn((E, n), generator=generator, dtype=X.dtype, device=X.device)
    dirs = {"adv": h_adv, "gd": gradient_direction(params, X, D, coef, net),
            "rand": random_direction(params, D, generator=generator)}
    for name, h in dirs.items():
        ent, op = gram_drift(last_layer_gram(add(params, h), X, net), G0)
        out[f"gram_{name}_entry"], out[f"gram_{name}_op"] = ent, op
    hn, hist, v = output_hessian_norm(params, X[0], net, iters=iters, generator=generator,
                                      return_history=True, return_vector=True)
    out["hess"], out["hess_conv"] = hn, hist[:, -1] / hist[:, max((3 * iters) // 4 - 1, 0)]
    if ball_hessian:
        out["hess_ball"] = output_hessian_norm(add(params, h_adv), X[0], net, iters=iters, generator=generator)
    hv = scale_to(v, D)
    x1 = X[:1]
    out["taylor"] = torch.maximum(taylor_remainder(params, x1, hv, net)[:, 0],
                                  taylor_remainder(params, x1, {k: -t for k, t in hv.items()}, net)[:, 0])
    out["taylor_rand"] = taylor_remainder(params, x1, dirs["rand"], net)[:, 0]
    out["M"] = backward_sup_norm(params, X, net)
    out["J"] = jacobian_norm(params, X, net) / math.sqrt(n)
    out["G0"] = G0.abs().flatten(1).max(1).values
    return {k: t.detach() for k, t in out.items()}
