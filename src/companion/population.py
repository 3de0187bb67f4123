"""Paper B's population closed forms (Appendix A) for a two-layer ReLU network and a linear target (:ref:`ch-closed-forms`).

Data ``x ~ N(0, I_d)``, target ``y = aᵀx``, network ``f(x) = Σ_i v_i ReLU(w_iᵀx) = vᵀReLU(Wx)`` with
``W ∈ R^{k×d}`` (row ``i`` is neuron ``w_i``) and **signed** output weights ``v ∈ R^k``.

Sign convention. Paper B writes the k = 2 network as ``v1 ReLU(w1ᵀx) − v2 ReLU(w2ᵀx)`` with ``v1, v2 > 0``.
Here that network is ``v = [v1, −v2]`` (:func:`signed_from_paper`); its global optimum
``v1 w1 = a, v2 w2 = −a`` and its saddle manifolds ``v1 w1 = (c+1) a, v2 w2 = c a`` (Theorem 1) are built by
:func:`paper_point`.

Population loss ``L(W, v) = ½ E[(vᵀReLU(Wx) − aᵀx)²] = ½ vᵀKv − ½ Σ_i v_i aᵀw_i + ½‖a‖²`` with
``K_ij = k(w_i, w_j)`` (:func:`relu_kernel`) and ``E[ReLU(wᵀx) aᵀx] = aᵀw/2`` (Stein's lemma).

Parameter order. Every function takes and returns the parameters in the order ``(W, v)``, as
:mod:`companion.relunet` and :func:`companion.gd.run` do: :func:`loss`, :func:`gradient`
(``(grad_W, grad_v)``), :func:`loss_and_gradient_wv`, :func:`hessian` and :func:`flatten_params`
(``[vec(W), v]``). The module speaks the verbs of :mod:`companion.model` over the list ``[W, v]`` (or ``[W]``
with fixed output weights), with the target in place of data: :func:`init_params`, :func:`forward`,
:func:`loss_and_gradient` and :func:`make_loss_and_grad`, the closure for the GD engine, for one output or
``r`` outputs (the Gram form :func:`gram_loss_and_gradient`, ``E·k²·d`` per step).

Numerics. Angles are computed by Kahan's formula ``θ = 2 atan2(‖ū − w̄‖, ‖ū + w̄‖)``, accurate to a few ulps
for every θ (``arccos`` of a cosine loses half the digits near θ = 0, π and has an infinite derivative there,
so autograd through it gives NaN when two neurons align). Norms are taken as ``sqrt(max(‖x‖², tiny))`` so
autograd never divides 0/0; at an exactly aligned or anti-aligned pair the clamped branch has zero derivative,
which is the correct first derivative because ``J'(0) = J'(π) = 0`` (``J`` below). The closed-form Hessian
is finite and continuous through θ → 0 and θ → π (its singular-looking terms carry a factor ``sin θ``).

Zero neurons. ``∇_w`` of anything at ``w = 0`` does not exist (the kernel is only positively homogeneous
there). We use the convention of autograd through ``ReLU`` (``ReLU'(0) = 0``, i.e. the gate ``1{wᵀx > 0}``
is 0 for ``w = 0``): gradients and Hessian entries that involve the gate of a zero neuron are 0.
:func:`gate_second_moment` instead follows its definition with ``≥`` literally (see its docstring).

Every public function takes leading batch/ensemble axes ``(...)``; computations are in the inputs' dtype
(use float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import model, relunet, validation
from .device import randn, resolve

__all__ = [
    "init_params",
    "forward",
    "angle",
    "relu_kernel",
    "relu_kernel_grad",
    "gate_second_moment",
    "loss",
    "gradient",
    "hessian",
    "loss_and_gradient",
    "loss_and_gradient_wv",
    "gram_loss_and_gradient",
    "make_loss_and_grad",
    "flatten_params",
    "unflatten_params",
    "signed_from_paper",
    "paper_point",
    "effective_error",
    "network_mc",
    "mc_mean",
    "J",
    "stationarity_scale",
    "stationarity_ratio",
    "classify_stationary",
    "CLASSES",
    "effective_pair",
    "lemma_terms",
    "target_forms",
    "min_over_target",
    "extreme_ratio_over_target",
    "lemma9_constant",
]

TWO_PI = 2.0 * math.pi


# --------------------------------------------------------------------------------------------- internals
def _tiny(x: Tensor) -> float:
    return torch.finfo(x.dtype).tiny


def _safe_norm(x: Tensor) -> Tensor:
    """``‖x‖`` over the last axis, ``(..., d) → (...)``; autograd-safe at ``x = 0`` (derivative 0 there)."""
    return torch.sqrt(torch.clamp((x * x).sum(-1), min=_tiny(x)))


def _unit(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(x/‖x‖, ‖x‖, nonzero mask)``; the unit vector of ``0`` is ``0``."""
    n = _safe_norm(x)
    nz = (x != 0).any(-1)
    return torch.where(nz[..., None], x / n[..., None], torch.zeros_like(x)), torch.where(nz, n, torch.zeros_like(n)), nz


def J(theta: Tensor) -> Tensor:
    """``J(θ) = sin θ + (π − θ) cos θ``: ``E[ReLU(uᵀx)ReLU(wᵀx)] = ‖u‖‖w‖ J(θ)/(2π)`` (Appendix A.1, :ref:`ch-closed-forms`).

    ``J(0) = π``, ``J(π) = 0``, ``J'(θ) = −(π − θ) sin θ`` (so ``J'(0) = J'(π) = 0``). Any shape.

    Parameters
    ----------
    theta : Tensor
        Angles in ``[0, π]``, any shape.

    Returns
    -------
    Tensor
        ``J(θ)``, of ``theta``'s shape.
    """
    return torch.sin(theta) + (math.pi - theta) * torch.cos(theta)


def angle(u: Tensor, w: Tensor) -> Tensor:
    """Angle ``θ ∈ [0, π]`` between ``u`` and ``w`` by Kahan's formula, ``(..., d), (..., d) → (...)``.

    Accurate for all θ (no arccos); ``π/2`` by convention if either vector is zero. Paper B, :ref:`ch-closed-forms`.

    Parameters
    ----------
    u, w : Tensor, (..., d)
        The vectors (broadcast against each other).

    Returns
    -------
    Tensor, (...)
        The angle in ``[0, π]``.
    """
    ub, _, _ = _unit(u)
    wb, _, _ = _unit(w)
    ub, wb = torch.broadcast_tensors(ub, wb)
    return 2.0 * torch.atan2(_safe_norm(ub - wb), _safe_norm(ub + wb)).where(
        (ub != 0).any(-1) & (wb != 0).any(-1), torch.full(ub.shape[:-1], math.pi / 2, dtype=ub.dtype, device=ub.device)
    )


def _check_pair(u: Tensor, w: Tensor) -> None:
    validation.tensor("u", u, ndim=None)
    validation.tensor("w", w, ndim=None)
    if u.ndim == 0 or w.ndim == 0:
        raise ValueError("u and w must have a last axis of size d (shape (..., d))")
    if u.shape[-1] != w.shape[-1]:
        raise ValueError(f"u and w must have the same dimension d, got {u.shape[-1]} and {w.shape[-1]}")
    try:
        torch.broadcast_shapes(u.shape, w.shape)
    except RuntimeError as exc:
        raise ValueError(f"u {tuple(u.shape)} and w {tuple(w.shape)} do not broadcast") from exc
    validation.same_device(u=u, w=w)


# --------------------------------------------------------------------------------------------- the kernel
def relu_kernel(u: Tensor, w: Tensor) -> Tensor:
    """``E[ReLU(uᵀx) ReLU(wᵀx)] = ‖u‖‖w‖ (sin θ + (π − θ) cos θ)/(2π)``, x ~ N(0, I_d) (Appendix A.1, :ref:`ch-closed-forms`).

    ``u, w``: ``(..., d)`` (broadcast) → ``(...)``. Exact at θ = 0 (``‖u‖‖w‖/2``), θ = π (0) and u or w = 0 (0).

    Parameters
    ----------
    u, w : Tensor, (..., d)
        The neurons (broadcast against each other).

    Returns
    -------
    Tensor, (...)
        ``E[ReLU(uᵀx) ReLU(wᵀx)]``.

    Raises
    ------
    ValueError
        When ``u`` or ``w`` is not a finite floating tensor with a last axis ``d``, or they do not broadcast.
    """
    _check_pair(u, w)
    return _kernel(u, w)


def _kernel(u: Tensor, w: Tensor) -> Tensor:
    nu, nw = _safe_norm(u), _safe_norm(w)
    zero = ~((u != 0).any(-1) & (w != 0).any(-1))
    val = nu * nw * J(angle(u, w)) / TWO_PI
    return torch.where(zero, torch.zeros_like(val), val)


def relu_kernel_grad(u: Tensor, w: Tensor) -> Tensor:
    """``∇_u E[ReLU(uᵀx)ReLU(wᵀx)] = E[1{uᵀx>0} ReLU(wᵀx) x] = (‖w‖ sin θ ū + (π − θ) w)/(2π)`` (Appendix A.2,
    :ref:`ch-closed-forms`).

    ``u, w``: ``(..., d)`` → ``(..., d)``. At θ = 0 this is ``w/2``, at θ = π it is 0; at ``u = 0`` it is 0
    (convention ``ReLU'(0) = 0``; the kernel has no gradient there), and at ``w = 0`` it is 0.

    Parameters
    ----------
    u, w : Tensor, (..., d)
        The neurons (broadcast against each other).

    Returns
    -------
    Tensor, (..., d)
        The kernel's gradient in ``u``.

    Raises
    ------
    ValueError
        As :func:`relu_kernel`.
    """
    _check_pair(u, w)
    return _kernel_grad(u, w)


def _kernel_grad(u: Tensor, w: Tensor) -> Tensor:
    ub, nu, u_nz = _unit(u)
    _, nw, w_nz = _unit(w)
    th = angle(u, w)
    g = (nw * torch.sin(th))[..., None] * ub + (math.pi - th)[..., None] * w
    return torch.where(u_nz[..., None], g / TWO_PI, torch.zeros_like(g))


def gate_second_moment(u: Tensor, w: Tensor) -> Tensor:
    """``M(u, w) = E[1{uᵀx ≥ 0} 1{wᵀx ≥ 0} x xᵀ]``, x ~ N(0, I_d) (derived in :ref:`ch-closed-forms`; Theorem 10's mean).

    ``M = [(π − θ) I + sin θ (b̄b̄ᵀ − c̄c̄ᵀ)]/(2π)`` with ``b̄ ∝ ū + w̄``, ``c̄ ∝ ū − w̄`` (the bisectors of the
    plane of u, w), equivalently ``sin θ (b̄b̄ᵀ − c̄c̄ᵀ) = [ūw̄ᵀ + w̄ūᵀ − cos θ (ūūᵀ + w̄w̄ᵀ)]/sin θ``.
    ``M(u, u) = I/2``, ``M(u, −u) = 0``. ``u, w``: ``(..., d)`` → ``(..., d, d)``.
    The definition uses ``≥``, so for ``u = 0`` the gate ``1{0 ≥ 0}`` is 1 and ``M(0, w) = M(w, w) = I/2``,
    ``M(0, 0) = I``.

    Parameters
    ----------
    u, w : Tensor, (..., d)
        The gates' directions (broadcast against each other).

    Returns
    -------
    Tensor, (..., d, d)
        ``M(u, w)``, symmetric.

    Raises
    ------
    ValueError
        As :func:`relu_kernel`.
    """
    _check_pair(u, w)
    return _gate_moment(u, w)


def _gate_moment(u: Tensor, w: Tensor) -> Tensor:
    u, w = torch.broadcast_tensors(u, w)
    ub, _, u_nz = _unit(u)
    wb, _, w_nz = _unit(w)
    # a zero vector's half-space {x: 0 ≥ 0} is everything: replace it by the other vector (same gate a.s.)
    ub2 = torch.where(u_nz[..., None], ub, wb)
    wb2 = torch.where(w_nz[..., None], wb, ub2)
    th = angle(ub2, wb2)
    b, _, _ = _unit(ub2 + wb2)
    c, _, _ = _unit(ub2 - wb2)
    d = u.shape[-1]
    eye = torch.eye(d, dtype=u.dtype, device=u.device)
    s = torch.sin(th)[..., None, None]
    M = (
        (math.pi - th)[..., None, None] * eye + s * (b[..., :, None] * b[..., None, :] - c[..., :, None] * c[..., None, :])
    ) / TWO_PI
    both_zero = ~(u_nz | w_nz)
    return torch.where(both_zero[..., None, None], eye.expand_as(M), M)


# --------------------------------------------------------------------------------------------- network
def _check_net(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    if all(isinstance(t, Tensor) for t in (W, v, a)):
        validation.same_device(W=W, v=v, a=a)  # first: the value checks below need the data
    validation.tensor("W", W, ndim=None)
    validation.tensor("v", v, ndim=None)
    validation.tensor("a", a, ndim=None)
    if v.ndim < 1 or W.ndim != v.ndim + 1:
        raise ValueError(f"W must be (..., k, d) and v (..., k); got W {tuple(W.shape)}, v {tuple(v.shape)}")
    if W.shape[:-1] != v.shape:
        raise ValueError(f"W {tuple(W.shape)} must be v's shape {tuple(v.shape)} plus a last axis d")
    if a.ndim < 1 or a.shape[-1] != W.shape[-1]:
        raise ValueError(f"a must be (d,) or (..., d) with d = {W.shape[-1]}, got {tuple(a.shape)}")
    try:
        torch.broadcast_shapes(a.shape[:-1], v.shape[:-1])
    except RuntimeError as exc:
        raise ValueError(f"a {tuple(a.shape)} does not broadcast against the ensemble shape {tuple(v.shape[:-1])}") from exc
    return a


def _pairwise(W: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Shared per-network quantities: norms ``(..., k)``, unit rows ``(..., k, d)``, nonzero mask ``(..., k)``
    and Kahan angles ``θ_ij`` ``(..., k, k)`` (π/2 where a neuron is zero)."""
    sq = (W * W).sum(-1)
    nz = sq > _tiny(W)
    n = torch.sqrt(torch.clamp(sq, min=_tiny(W)))
    ub = torch.where(nz[..., None], W / n[..., None], torch.zeros_like(W))
    ui, uj = ub[..., :, None, :], ub[..., None, :, :]
    th = 2.0 * torch.atan2(_safe_norm(ui - uj), _safe_norm(ui + uj))
    both = nz[..., :, None] & nz[..., None, :]
    th = torch.where(both, th, torch.full_like(th, math.pi / 2))
    return torch.where(nz, n, torch.zeros_like(n)), ub, nz, th


def _K_G(W: Tensor, need_G: bool = True) -> tuple[Tensor, Tensor | None, tuple]:
    """``K_ij = k(w_i, w_j)`` ``(..., k, k)`` and ``G[l, j] = g(w_l, w_j)`` ``(..., k, k, d)`` from one pass."""
    pw = _pairwise(W)
    n, ub, nz, th = pw
    K = n[..., :, None] * n[..., None, :] * J(th) / TWO_PI
    if not need_G:
        return K, None, pw
    G = (
        (n[..., None, :] * torch.sin(th))[..., None] * ub[..., :, None, :] + (math.pi - th)[..., None] * W[..., None, :, :]
    ) / TWO_PI
    G = torch.where(nz[..., :, None, None], G, torch.zeros_like(G))
    return K, G, pw


def _K(W: Tensor) -> Tensor:
    return _K_G(W, need_G=False)[0]


def _loss_from(W: Tensor, v: Tensor, a: Tensor, K: Tensor) -> Tensor:
    quad = torch.einsum("...i,...ij,...j->...", v, K, v)
    lin = (v * torch.einsum("...kd,...d->...k", W, a)).sum(-1)
    return 0.5 * quad - 0.5 * lin + 0.5 * (a * a).sum(-1)


def loss(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """Population loss ``½ E[(vᵀReLU(Wx) − aᵀx)²]`` (paper B eq. (2), Appendix A.1; :ref:`ch-closed-forms`).

    ``W (..., k, d)``, ``v (..., k)`` signed output weights, ``a (d,)`` or ``(..., d)`` → ``(...)``.
    Autograd-differentiable (twice, away from exactly aligned neurons).

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,) or (..., d)
        The target.

    Returns
    -------
    Tensor, (...)
        The population loss.

    Raises
    ------
    ValueError
        When the shapes do not match, a tensor is not finite and floating, or they lie on different devices or dtypes.
    """
    _check_net(W, v, a)
    return _loss_from(W, v, a, _K(W))


def gradient(W: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
    """Closed-form population gradient (Appendix A.2; :ref:`ch-closed-forms`).

    ``∇_{w_i} L = v_i (Σ_j v_j g(w_i, w_j) − a/2)`` with ``g = relu_kernel_grad`` and
    ``∇_{v_i} L = Σ_j v_j k(w_i, w_j) − aᵀw_i/2``. ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` or ``(..., d)``.
    Returns ``(grad_W (..., k, d), grad_v (..., k))``.

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,) or (..., d)
        The target.

    Returns
    -------
    grad_W : Tensor, (..., k, d)
        The gradient in ``W``.
    grad_v : Tensor, (..., k)
        The gradient in ``v``.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check_net(W, v, a)
    return _loss_gradient(W, v, a)[1:]


def loss_and_gradient_wv(W: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Population loss and its closed-form gradient in one pass, for separate ``W`` and ``v`` (Appendix A.1-A.2;
    :ref:`ch-closed-forms` to :ref:`ch-pl-smoothness`).

    Same closed forms as :func:`loss` and :func:`gradient` (Kahan angles, exact at aligned neurons), any
    leading axes: ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` or ``(..., d)`` →
    ``(loss (...), grad_W (..., k, d), grad_v (..., k))``.

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,) or (..., d)
        The target.

    Returns
    -------
    loss : Tensor, (...)
        As :func:`loss`.
    grad_W : Tensor, (..., k, d)
        The gradient in ``W``.
    grad_v : Tensor, (..., k)
        The gradient in ``v``.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check_net(W, v, a)
    return _loss_gradient(W, v, a)


def _loss_gradient(W: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    K, G, (_, _, nz, _) = _K_G(W)
    gv = torch.einsum("...ij,...j->...i", K, v) - 0.5 * torch.einsum("...kd,...d->...k", W, a)
    inner = torch.einsum("...ljd,...j->...ld", G, v) - 0.5 * a[..., None, :]  # E[r 1{w_l x > 0} x]
    inner = torch.where(nz[..., None], inner, torch.zeros_like(inner))  # gate of w = 0 is 0
    return _loss_from(W, v, a, K), v[..., None] * inner, gv


def _pair_loss_gradient(W: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_loss_gradient` for ``k = 2`` written out pair by pair: the same closed forms and Kahan angle, without
    the ``(..., k, k, d)`` tensors (a few times fewer operations per GD step; agrees to a few ulps)."""
    tiny = _tiny(W)
    w1, w2 = W[..., 0, :], W[..., 1, :]
    v1, v2 = v[..., 0:1], v[..., 1:2]
    s1, s2 = (w1 * w1).sum(-1, keepdim=True), (w2 * w2).sum(-1, keepdim=True)
    nz1, nz2 = s1 > tiny, s2 > tiny
    n1, n2 = s1.clamp_min(tiny).sqrt(), s2.clamp_min(tiny).sqrt()
    u1 = torch.where(nz1, w1 / n1, torch.zeros_like(w1))
    u2 = torch.where(nz2, w2 / n2, torch.zeros_like(w2))
    dm, dp = u1 - u2, u1 + u2
    nm, np_ = (dm * dm).sum(-1, keepdim=True), (dp * dp).sum(-1, keepdim=True)
    th = 2.0 * torch.atan2(nm.clamp_min(tiny).sqrt(), np_.clamp_min(tiny).sqrt())
    sin, pt = torch.sin(th), math.pi - th
    n1, n2 = torch.where(nz1, n1, torch.zeros_like(n1)), torch.where(nz2, n2, torch.zeros_like(n2))
    k12 = n1 * n2 * (sin + pt * torch.cos(th)) / TWO_PI
    aw1, aw2 = (w1 * a).sum(-1, keepdim=True), (w2 * a).sum(-1, keepdim=True)
    value = 0.25 * (v1 * v1 * s1 + v2 * v2 * s2) + v1 * v2 * k12 - 0.5 * (v1 * aw1 + v2 * aw2)
    value = value + 0.5 * (a * a).sum(-1, keepdim=True)
    in1 = 0.5 * v1 * w1 + v2 * (n2 * sin * u1 + pt * w2) / TWO_PI - 0.5 * a  # E[r 1{w1 x > 0} x]
    in2 = 0.5 * v2 * w2 + v1 * (n1 * sin * u2 + pt * w1) / TWO_PI - 0.5 * a
    gW = torch.stack([torch.where(nz1, v1 * in1, torch.zeros_like(in1)), torch.where(nz2, v2 * in2, torch.zeros_like(in2))], -2)
    gv = torch.cat([0.5 * v1 * s1 + v2 * k12 - 0.5 * aw1, 0.5 * v2 * s2 + v1 * k12 - 0.5 * aw2], -1)
    return value[..., 0], gW, gv


def gram_loss_and_gradient(W: Tensor, V: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Population loss ``½ E‖Vᵀ ReLU(Wx) − A x‖²`` and its gradients from the Gram matrix of the neurons,
    for one or ``r`` outputs (paper B, Appendix A.1-A.2 and E.1; the training loop of :ref:`ch-failures` and
    :ref:`ch-beyond-two`).

    With ``S = V Vᵀ`` (``v vᵀ`` for one output), ``θ_ij`` the angle between ``w_i`` and ``w_j`` and
    ``k(w_i, w_j) = ‖w_i‖‖w_j‖(sin θ + (π − θ) cos θ)/(2π)``::

        L = ½ Σ_ij S_ij k(w_i, w_j) − ½ Σ_i V_iᵀ A w_i + ½ ‖A‖_F²,
        ∇_{V_i} L = Σ_j k(w_i, w_j) V_j − A w_i / 2,
        ∇_{w_i} L = (1/2π) [ŵ_i Σ_j S_ij ‖w_j‖ sin θ_ij + Σ_j S_ij (π − θ_ij) w_j] − Aᵀ V_i / 2,

    i.e. two batched matmuls of ``E·k²·d`` operations per step and ``O(E·k²)`` memory, instead of the
    ``(E, k, k, d)`` tensor of :func:`loss_and_gradient_wv`. The angles are ``arccos`` of the Gram cosines, so
    near-aligned pairs carry an angle error of about the square root of the dtype's resolution (use
    :func:`loss_and_gradient_wv` where neurons align and that matters). Neurons must be nonzero.
    ``W (E, k, d)``, ``V (E, k)`` or ``(E, k, r)``, ``target a (d,)`` or ``A (r, d)`` →
    ``(loss (E,), grad_W (E, k, d), grad_V like V)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights, no neuron zero.
    V : Tensor, (E, k) or (E, k, r)
        The output weights, one or ``r`` outputs.
    target : Tensor, (d,) or (r, d)
        ``a`` or ``A``.

    Returns
    -------
    loss : Tensor, (E,)
        The population loss.
    grad_W : Tensor, (E, k, d)
        The gradient in ``W``.
    grad_V : Tensor, (E, k) or (E, k, r)
        The gradient in ``V``, shaped like ``V``.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes, or their shapes do not match.
    """
    validation.same_device(W=W, v=V, target=target)
    return _gram(W, V, target)


def _gram(W: Tensor, V: Tensor, target: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    single = V.ndim == 2
    Vm = V.unsqueeze(-1) if single else V  # (E, k, r)
    A = target.unsqueeze(0) if target.ndim == 1 else target  # (r, d)
    nrm = W.norm(dim=-1)  # (E, k)
    U = W / nrm.unsqueeze(-1)
    cos = torch.bmm(U, U.transpose(1, 2)).clamp_(-1.0, 1.0)
    th = torch.arccos(cos)
    sin = torch.sin(th)
    nn_ = nrm.unsqueeze(-1) * nrm.unsqueeze(-2)
    K = nn_ * (sin + (math.pi - th) * cos) / TWO_PI  # (E, k, k)
    S = torch.bmm(Vm, Vm.transpose(1, 2))  # (E, k, k)
    AW = torch.einsum("rd,ekd->ekr", A, W)  # A w_i, (E, k, r)
    value = 0.5 * (S * K).sum((1, 2)) - 0.5 * (Vm * AW).sum((1, 2)) + 0.5 * (A * A).sum()
    gV = torch.bmm(K, Vm) - 0.5 * AW
    radial = (S * sin * nrm.unsqueeze(-2)).sum(-1, keepdim=True)  # Σ_j S_ij ‖w_j‖ sin θ_ij
    gW = (U * radial + torch.bmm(S * (math.pi - th), W)) / TWO_PI - 0.5 * torch.einsum("ekr,rd->ekd", Vm, A)
    return value, gW, (gV.squeeze(-1) if single else gV)


def init_params(
    k: int, d: int, ensemble: int, sigma: float, *, scheme: str = "xavier", r: int | None = None, **kw
) -> list[Tensor]:
    """Paper B's initialisations as the parameter list ``[W, v]`` for the population loss (Section 4's Xavier-normal
    scale, the Gaussian of Section 3's remark, Theorem 2's; :ref:`ch-landscape`, :ref:`ch-failures`): the network
    is :mod:`companion.relunet`'s, and so are the draws (:func:`companion.relunet.init_params`).

    Parameters
    ----------
    k, d, ensemble, sigma
        Neurons, input dimension, members ``E`` and the initial scale ``σ``.
    scheme, r
        ``"xavier"`` (default), ``"gaussian"`` or ``"theorem2"``; ``r`` outputs (``"xavier"`` only).
    **kw
        ``signs`` (``"theorem2"``), ``generator``, ``device``, ``dtype``.

    Returns
    -------
    list[Tensor]
        ``[W (E, k, d), v (E, k)]`` (``V (E, k, r)`` for ``r`` outputs).
    """
    return relunet.init_params(k, d, ensemble, sigma, scheme=scheme, r=r, **kw)


def forward(params: Sequence[Tensor], X: Tensor) -> Tensor:
    """The network ``f(x) = vᵀReLU(Wx)`` whose population loss this module computes, on given inputs (Appendix A;
    :ref:`ch-closed-forms`'s Monte Carlo checks of the closed forms).

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k) or V (E, k, r)]``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)``.

    Returns
    -------
    Tensor
        ``(E, n)``, or ``(E, n, r)`` for ``r`` outputs (:func:`companion.relunet.forward`).
    """
    return relunet.forward(params, X)


def loss_and_gradient(
    params: Sequence[Tensor], target: Tensor, *, fixed_v: Tensor | None = None, form: str = "gram"
) -> tuple[Tensor, list[Tensor]]:
    """Population loss ``½ E‖Vᵀ ReLU(Wx) − A x‖²`` and its closed-form gradient (paper B, eq. (2), Appendix A.1-A.2;
    :ref:`ch-closed-forms`, :ref:`ch-landscape`), validated on every call: the values of
    :func:`make_loss_and_grad`'s closure.

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k) or V (E, k, r)]``, or ``[W]`` with ``fixed_v``.
    target
        ``a (d,)`` (one output) or ``A (r, d)`` (``r`` outputs, Appendix E.1): the target instead of data.
    fixed_v
        Output weights held fixed, ``(k,)`` / ``(k, r)`` for every member or ``(E, k)`` / ``(E, k, r)``.
    form
        ``"gram"`` (default) or ``"kahan"``, as in :func:`make_loss_and_grad`.

    Returns
    -------
    (loss, grads)
        ``loss (E,)`` and ``[grad_W, grad_v]`` (``[grad_W]`` with ``fixed_v``), shaped like ``params``.
    """
    return make_loss_and_grad(target, fixed_v=fixed_v, form=form)(params)


def make_loss_and_grad(target: Tensor, *, fixed_v: Tensor | None = None, form: str = "gram") -> model.LossAndGrad:
    """Closure for :func:`companion.gd.run` on the population loss (paper B's population GD: Figure 1 in
    :ref:`ch-landscape`, :ref:`ch-failures`, :ref:`ch-beyond-two`).

    ``form="gram"`` (default) uses :func:`gram_loss_and_gradient` (``E·k²·d`` per step, any ``r``);
    ``form="kahan"`` uses :func:`loss_and_gradient_wv` (Kahan angles, exact where neurons align, e.g. on
    Theorem 1's saddle manifolds; one output only; for ``k = 2`` written out pair by pair, without the
    ``(E, k, k, d)`` tensors). Shapes are checked at the first call. Trainable and fixed output weights are
    handled by :func:`companion.model.two_layer_closure`, as for the empirical loss; ``closure.restrict(index)``
    is the closure of the members at positions ``index`` (per-member fixed output weights sliced), the contract of
    :mod:`companion.model`.

    Parameters
    ----------
    target
        ``a (d,)`` (one output) or ``A (r, d)`` (``r`` outputs, Appendix E.1).
    fixed_v
        ``None``: ``params = [W (E, k, d), v (E, k) or V (E, k, r)]``, grads ``[grad_W, grad_v]``. Otherwise the
        output weights held fixed (Figure 1), ``(k,)`` / ``(k, r)`` for every member or ``(E, k)`` / ``(E, k, r)``:
        ``params = [W]``, grads ``[grad_W]``.
    form
        ``"gram"`` or ``"kahan"``.

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), grads)``.

    Raises
    ------
    ValueError
        When ``target`` or ``fixed_v`` is not a finite tensor of its shape, they lie on different devices or dtypes,
        ``form`` is not ``'gram'`` or ``'kahan'`` (``'kahan'`` only for one output); at a call, when the parameters
        do not match the target.

    Examples
    --------
    Figure 1's setting in miniature: output weights fixed at ``[1, −1]``, a small initialisation, GD reaches the
    global optimum of the population loss:

    >>> import torch
    >>> from companion import device, gd, population, relunet
    >>> a = relunet.unit_target(3, device="cpu")
    >>> W = 1e-3 * device.randn((2, 2, 3), generator=device.generator(0), device="cpu")
    >>> f = population.make_loss_and_grad(a, fixed_v=torch.tensor([1.0, -1.0], dtype=W.dtype), form="kahan")
    >>> res = gd.run(f, [W], 3000, 0.5, progress=False)
    >>> bool((res.history["loss"][-1] < 1e-8).all())
    True
    """
    validation.tensor("target", target, ndim=(1, 2))
    if fixed_v is not None:
        validation.tensor("fixed_v", fixed_v, ndim=(1, 2, 3))
        validation.same_device(target=target, fixed_v=fixed_v)
    if form not in ("gram", "kahan"):
        raise ValueError(f"form must be 'gram' or 'kahan', got {form!r}")
    if form == "kahan" and target.ndim != 1:
        raise ValueError("form='kahan' is for one output (target a of shape (d,))")

    def check(W: Tensor, V: Tensor) -> None:
        r_axes = 0 if target.ndim == 1 else 1
        if (
            W.ndim != 3
            or V.ndim != 2 + r_axes
            or V.shape[:2] != W.shape[:2]
            or W.shape[-1] != target.shape[-1]
            or (r_axes and V.shape[-1] != target.shape[0])
        ):
            raise ValueError(f"W {tuple(W.shape)}, v {tuple(V.shape)} and target {tuple(target.shape)} do not match")
        validation.same_device(W=W, v=V, target=target)

    def kernel(W: Tensor, V: Tensor, train_v: bool) -> tuple[Tensor, Tensor, Tensor]:
        if form == "gram":
            return _gram(W, V, target)
        if W.shape[-2] == 2:
            return _pair_loss_gradient(W, V, target)
        return _loss_gradient(W, V, target)

    return model.two_layer_closure(
        kernel,
        check,
        lambda index, v: make_loss_and_grad(target, fixed_v=v, form=form),
        fixed_v,
        vector_outputs=target.ndim == 2,
    )


def hessian(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """Closed-form population Hessian (Appendix A.3, re-derived; :ref:`ch-closed-forms` to :ref:`ch-pl-smoothness`),
    shape ``(..., k·d + k, k·d + k)``.

    Parameter order ``[vec(W) row-major, v_1..v_k]`` (= :func:`flatten_params`). Blocks, with ``g`` the kernel
    gradient, ``M`` the gate moment and ``P_l = I − w̄_l w̄_lᵀ``, ``p_lj = P_l w_j``:

    * ``∂²L/∂w_l∂w_m = v_l v_m M(w_l, w_m) + δ_lm v_l/(2π‖w_l‖) Σ_j v_j (‖p_lj‖ P_l + p_lj p_ljᵀ/‖p_lj‖)``
      (the second term is ``E[r δ(w_lᵀx) x xᵀ]``, r the residual);
    * ``∂²L/∂w_m∂v_l = v_m g(w_m, w_l) + δ_lm (Σ_j v_j g(w_l, w_j) − a/2)``;
    * ``∂²L/∂v_l∂v_m = k(w_l, w_m)``.

    ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` or ``(..., d)``. Finite at θ → 0, π. Entries involving the
    gate of a zero neuron are 0 (the Hessian does not exist there).

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,) or (..., d)
        The target.

    Returns
    -------
    Tensor, (..., k·d + k, k·d + k)
        The Hessian in the order of :func:`flatten_params`.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check_net(W, v, a)
    k, d = W.shape[-2], W.shape[-1]
    batch = torch.broadcast_shapes(v.shape[:-1], a.shape[:-1])
    v = v.expand(*batch, k)
    W = W.expand(*batch, k, d)
    a = a.expand(*batch, d)
    Wl, Wm = W[..., :, None, :], W[..., None, :, :]
    K, G, _ = _K_G(W)  # (..., k, k), (..., k, k, d)
    inner = torch.einsum("...ljd,...j->...ld", G, v) - 0.5 * a[..., None, :]  # E[r 1{w_l x > 0} x], (..., k, d)
    inner = torch.where((W != 0).any(-1, keepdim=True), inner, torch.zeros_like(inner))
    eye_k = torch.eye(k, dtype=W.dtype, device=W.device)
    # v-W block: H_vw[l, m, :] = v_m G[m, l] + δ_lm inner[l]
    Hvw = v[..., None, :, None] * G.transpose(-3, -2) + eye_k[..., None] * inner[..., :, None, :]
    # W-W block, Gauss-Newton part v_l v_m M(w_l, w_m), zero where a neuron is zero (ReLU'(0) = 0)
    _, nW, nz = _unit(W)
    M = _gate_moment(Wl, Wm) * (nz[..., :, None] & nz[..., None, :])[..., None, None]
    Hww = (v[..., :, None] * v[..., None, :])[..., None, None] * M  # (..., k, k, d, d)
    # residual part, diagonal blocks only
    wb, _, _ = _unit(W)
    eye_d = torch.eye(d, dtype=W.dtype, device=W.device)
    P = eye_d - wb[..., :, :, None] * wb[..., :, None, :]  # (..., k, d, d)
    p = torch.einsum("...lde,...je->...ljd", P, W)  # p[l, j] = P_l w_j, (..., k, k, d)
    np_ = _safe_norm(p)
    p_nz = (np_ > math.sqrt(_tiny(p))) & (p != 0).any(-1)
    outer = torch.where(
        p_nz[..., None, None],
        p[..., :, None] / np_[..., None, None] * p[..., None, :],
        torch.zeros_like(P[..., None, :, :, :].expand(*p.shape, d)),
    )
    R = torch.einsum("...j,...ljde->...lde", v, np_[..., None, None] * P[..., :, None, :, :] + outer)
    scale_l = torch.where(nz, v / (TWO_PI * torch.where(nz, nW, torch.ones_like(nW))), torch.zeros_like(v))
    Hww = Hww + eye_k[..., None, None] * (scale_l[..., :, None, None] * R)[..., :, None, :, :]
    kd = k * d
    H = W.new_zeros(*batch, kd + k, kd + k)
    H[..., :kd, :kd] = Hww.transpose(-3, -2).reshape(*batch, kd, kd)
    Hvw_flat = Hvw.reshape(*batch, k, kd)
    H[..., kd:, :kd] = Hvw_flat
    H[..., :kd, kd:] = Hvw_flat.transpose(-1, -2)
    H[..., kd:, kd:] = K
    return H


# --------------------------------------------------------------------------------------------- conveniences
def flatten_params(W: Tensor, v: Tensor) -> Tensor:
    """``[vec(W) row-major, v]``: ``(..., k, d), (..., k) → (..., k·d + k)`` (the Hessian's order;
    :ref:`ch-closed-forms` to :ref:`ch-pl-smoothness`).

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The output weights.

    Returns
    -------
    Tensor, (..., k·d + k)
        ``[vec(W), v]``.
    """
    return torch.cat([W.flatten(-2), v], dim=-1)


def unflatten_params(theta: Tensor, k: int, d: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`flatten_params`: ``(..., k·d + k) → (W (..., k, d), v (..., k))`` (:ref:`ch-closed-forms` to
    :ref:`ch-pl-smoothness`).

    Parameters
    ----------
    theta : Tensor, (..., k·d + k)
        Flat parameters in the order of :func:`flatten_params`.
    k : int
        The number of neurons.
    d : int
        The input dimension.

    Returns
    -------
    W : Tensor, (..., k, d)
        The first-layer weights (a view).
    v : Tensor, (..., k)
        The output weights (a view).

    Raises
    ------
    ValueError
        When the last axis is not ``k·d + k``.
    """
    if theta.shape[-1] != k + k * d:
        raise ValueError(f"expected a last axis of k·d + k = {k + k * d}, got {theta.shape[-1]}")
    return theta[..., : k * d].unflatten(-1, (k, d)), theta[..., k * d :]


def signed_from_paper(v_paper: Tensor) -> Tensor:
    """Paper B's k = 2 output weights ``[v1, v2]`` (network ``v1 ReLU(w1ᵀx) − v2 ReLU(w2ᵀx)``) → signed ``[v1, −v2]``
    (:ref:`ch-closed-forms`).

    Parameters
    ----------
    v_paper : Tensor, (..., 2)
        ``[v1, v2]`` in the paper's convention.

    Returns
    -------
    Tensor, (..., 2)
        ``[v1, −v2]``.

    Raises
    ------
    ValueError
        When the last axis is not 2.
    """
    if v_paper.shape[-1] != 2:
        raise ValueError(f"paper B's sign convention is for k = 2, got last axis {v_paper.shape[-1]}")
    return v_paper * torch.tensor([1.0, -1.0], dtype=v_paper.dtype, device=v_paper.device)


def paper_point(c: Tensor | float | None, v1: Tensor | float, v2: Tensor | float, a: Tensor) -> tuple[Tensor, Tensor]:
    """A point of Theorem 1's families (:ref:`ch-landscape`), in the signed convention: ``(W (..., 2, d), v (..., 2))``.

    ``c = None``: the global optimum ``v1 w1 = a, v2 w2 = −a``; otherwise the manifold point
    ``v1 w1 = (c + 1) a, v2 w2 = c a`` (paper's convention, ``v1, v2 > 0``; a saddle for c > 0 or c < −1).
    ``c, v1, v2`` broadcast (scalars or ``(...)`` tensors); ``a (d,)``.

    Parameters
    ----------
    c : float, Tensor (...), or None
        The manifold's parameter, or ``None`` for the global optimum.
    v1, v2 : float or Tensor, (...)
        The output weights in the paper's convention, positive.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    W : Tensor, (..., 2, d)
        The first-layer weights.
    v : Tensor, (..., 2)
        The signed output weights ``[v1, −v2]``.

    Raises
    ------
    ValueError
        When ``a`` is not a finite 1-d tensor, or ``v1`` or ``v2`` is not positive.
    """
    validation.tensor("a", a, ndim=1)
    t = lambda z: torch.as_tensor(z, dtype=a.dtype, device=a.device)
    v1, v2 = t(v1), t(v2)
    if bool((v1 <= 0).any()) or bool((v2 <= 0).any()):
        raise ValueError("paper B's v1, v2 are positive (the sign sits in the network's minus)")
    if c is None:
        c1, c2 = t(1.0), t(-1.0)
    else:
        c = t(c)
        c1, c2 = c + 1, c
    v1, v2, c1, c2 = torch.broadcast_tensors(v1, v2, c1, c2)
    W = torch.stack([(c1 / v1)[..., None] * a, (c2 / v2)[..., None] * a], dim=-2)
    return W, torch.stack([v1, -v2], dim=-1)


def effective_error(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """Distance of the effective weights to the optimum, ``‖v1 w1 − a‖² + ‖v2 w2 + a‖²`` (paper B's convention).

    In the signed convention ``v = [v1, −v2]`` this is ``Σ_i ‖v_i w_i − a‖²``, since ``(−v2) w2 − a = −(v2 w2 + a)``.
    ``(..., 2, d), (..., 2), (d,) → (...)``. Lemma 13 (:ref:`ch-pl-smoothness`).

    Parameters
    ----------
    W : Tensor, (..., 2, d)
        The first-layer weights.
    v : Tensor, (..., 2)
        The signed output weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (...)
        ``Σ_i ‖v_i w_i − a‖²``.

    Raises
    ------
    ValueError
        As :func:`loss`, or when ``k ≠ 2``.
    """
    _check_net(W, v, a)
    if v.shape[-1] != 2:
        raise ValueError("effective_error is paper B's k = 2 quantity")
    eff = v[..., :, None] * W - a[..., None, :]
    return (eff**2).sum((-1, -2))


# --------------------------------------------------------------------------------------------- Monte Carlo
def mc_mean(
    fn: Callable[[Tensor], Tensor],
    d: int,
    n: int,
    *,
    generator: torch.Generator | None = None,
    batch: int = 200_000,
    dtype=torch.float64,
    device=None,
) -> tuple[Tensor, Tensor]:
    """Monte Carlo ``E[fn(x)]`` over ``x ~ N(0, I_d)`` with its standard error, in batches (:ref:`ch-closed-forms`).

    ``fn``: ``(B, d) → (B, ...)``. Returns ``(mean (...), se (...))`` from ``n`` samples drawn ``batch`` at a time
    (memory is ``O(batch · size of fn's output)``). Sums are shifted by the first batch's mean for accuracy.

    Parameters
    ----------
    fn : callable, Tensor (B, d) -> Tensor (B, ...)
        The integrand, applied to a batch of inputs.
    d : int
        The dimension.
    n : int
        The number of samples, at least 2.
    generator : torch.Generator or None
        The CPU generator of the draws (:mod:`companion.device`).
    batch : int
        The samples per call of ``fn``.
    dtype : torch.dtype
        The inputs' dtype.
    device : torch.device, str or None
        Where the inputs go.

    Returns
    -------
    mean : Tensor, (...)
        The Monte Carlo mean.
    se : Tensor, (...)
        Its standard error.

    Raises
    ------
    ValueError
        When ``d``, ``n`` or ``batch`` is not a positive int, or ``n < 2``.
    """
    validation.positive_int("n", n)
    validation.positive_int("batch", batch)
    validation.positive_int("d", d)
    s1 = s2 = shift = None
    done = 0
    while done < n:
        b = min(batch, n - done)
        x = randn((b, d), generator=generator, dtype=dtype, device=device)
        y = fn(x)
        if shift is None:
            shift = y.mean(0)
            s1 = torch.zeros_like(shift)
            s2 = torch.zeros_like(shift)
        z = y - shift
        s1 = s1 + z.sum(0)
        s2 = s2 + (z * z).sum(0)
        done += b
    if n < 2:
        raise ValueError("need n >= 2 for a standard error")
    mean_z = s1 / n
    var = (s2 - n * mean_z**2) / (n - 1)
    return shift + mean_z, torch.sqrt(torch.clamp(var, min=0) / n)


def network_mc(W: Tensor, v: Tensor, a: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample network output and residual on inputs ``x (B, d)``: ``(f (..., B), r = f − aᵀx (..., B))``.

    ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` or ``(..., d)``; for Monte Carlo checks of the closed forms
    (:ref:`ch-closed-forms`).

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,) or (..., d)
        The target.
    x : Tensor, (B, d)
        The inputs.

    Returns
    -------
    f : Tensor, (..., B)
        The network's outputs.
    r : Tensor, (..., B)
        The residuals ``f − aᵀx``.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v, a=a, x=x)
    f = torch.einsum("...k,...kb->...b", v, torch.relu(torch.einsum("...kd,bd->...kb", W, x)))
    return f, f - torch.einsum("...d,bd->...b", a, x)


# --------------------------------------------------------------------------------------------- Theorem 1
def stationarity_scale(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """The size of the terms that cancel in the population gradient, ``S = ‖θ‖ (Σ_j |v_j| ‖w_j‖ + ‖a‖)`` (:ref:`ch-landscape`).

    With ``|g(w_l, w_j)| ≤ ‖w_j‖`` and ``|k(w_l, w_j)| ≤ ‖w_l‖‖w_j‖/2``, every term of ``∇_{w_l}L`` is at most
    ``|v_l| (Σ_j |v_j|‖w_j‖ + ‖a‖)`` and every term of ``∇_{v_l}L`` at most ``‖w_l‖ (Σ_j |v_j|‖w_j‖ + ‖a‖)``, so
    ``S`` bounds the terms' norm and the computed gradient of an exact stationary point is a few ``ε·S``
    (``ε`` the dtype's resolution). ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` → ``(...)``.

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (...)
        ``S``.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check_net(W, v, a)
    theta = flatten_params(W, v).norm(dim=-1)
    return theta * ((v.abs() * W.norm(dim=-1)).sum(-1) + a.norm(dim=-1))


def stationarity_ratio(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """``‖∇L‖ / (ε S)`` with ``S`` from :func:`stationarity_scale` and ``ε`` the dtype's resolution (Theorem 1,
    :ref:`ch-landscape`): a point is stationary to the dtype's resolution when this is at most a few dozen.
    ``W (..., k, d)``, ``v (..., k)``, ``a (d,)`` → ``(...)``.

    Parameters
    ----------
    W : Tensor, (..., k, d)
        The first-layer weights.
    v : Tensor, (..., k)
        The signed output weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (...)
        ``‖∇L‖ / (ε S)``.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check_net(W, v, a)
    g = flatten_params(*_loss_gradient(W, v, a)[1:]).norm(dim=-1)
    return g / (torch.finfo(W.dtype).eps * stationarity_scale(W, v, a))


CLASSES = (
    "global optimum",
    "Theorem 1 saddle (c > 0)",
    "Theorem 1 saddle (c < -1)",
    "saddle family, same-sign outputs (outside Theorem 1)",
    "a neuron contributes nothing (excluded)",
    "not converged",
    "unclassified stationary point",
)


def classify_stationary(
    W: Tensor,
    v: Tensor,
    a: Tensor,
    grad_norm: Tensor,
    *,
    grad_tol: float = 1e-9,
    tol: float = 1e-6,
    converged: Tensor | None = None,
) -> tuple[list[str], Tensor]:
    """Classify k = 2 points by Theorem 1 (:ref:`ch-landscape`); returns ``(labels (E,), c (E,))`` (c NaN where undefined).

    ``W (E, 2, d)``, ``v (E, 2)``, ``a (d,)``, ``grad_norm (E,)`` (from :func:`companion.landscape.find_stationary`).
    A point counts as stationary when ``grad_norm ≤ grad_tol ‖a‖ max(1, ‖θ‖)``, or, when the bool mask
    ``converged (E,)`` is given (e.g. ``stationarity_ratio(...) ≤ c`` after
    :func:`companion.landscape.polish_stationary`), where it is true.

    In the signed convention the optimum has effective weights ``v_i w_i = a`` for both neurons, one with
    ``w ∥ a``, one with ``w ∥ −a``; the saddle family has both neurons parallel to the same ``s·a`` and
    ``v1 w1 + v2 w2 = a``. With opposite output signs (paper's ``v1, v2 > 0``) this is Theorem 1's
    ``v1 w1 = (c + 1) a, v2 w2 = c a`` with ``c = (v₊ w₊)ᵀa/‖a‖² − 1`` (``+``: the neuron with positive output).

    Parameters
    ----------
    W : Tensor, (E, 2, d)
        The first-layer weights.
    v : Tensor, (E, 2)
        The signed output weights.
    a : Tensor, (d,)
        The target.
    grad_norm : Tensor, (E,)
        ``‖∇L‖`` at each point.
    grad_tol : float
        The relative gradient tolerance of a stationary point.
    tol : float
        The relative tolerance of the geometric tests (parallel, tiny, sums).
    converged : Tensor of bool, (E,), or None
        Which points count as stationary, instead of the gradient test.

    Returns
    -------
    labels : list of str, length E
        One of :data:`CLASSES` per point.
    c : Tensor, (E,)
        The manifold parameter of a saddle, ``nan`` elsewhere.

    Raises
    ------
    ValueError
        As :func:`loss`, or when ``k ≠ 2``.
    """
    if v.shape[-1] != 2:
        raise ValueError("Theorem 1 is about k = 2")
    _check_net(W, v, a)
    validation.same_device(W=W, grad_norm=grad_norm)
    na = a.norm()
    ab = a / na
    L = loss(W, v, a)
    nw = W.norm(dim=-1)
    eff = v[..., None] * W  # (E, 2, d)
    along = W @ ab  # (E, 2)
    perp = (W - along[..., None] * ab).norm(dim=-1)  # (E, 2)
    parallel = perp <= tol * nw.clamp_min(1e-300)
    side = torch.sign(along)
    tiny = eff.norm(dim=-1) <= tol * na
    sum_ok = (eff.sum(-2) - a).norm(dim=-1) <= tol * na
    pos = torch.where(v[..., 0] > 0, 0, 1)
    c = (eff.gather(-2, pos[..., None, None].expand(-1, 1, W.shape[-1]))[..., 0, :] @ a) / na**2 - 1
    labels = []
    for e in range(v.shape[0]):
        if converged is not None:
            stationary = bool(converged[e])
        else:
            stationary = bool(grad_norm[e] <= grad_tol * na * max(1.0, float(flatten_params(W[e], v[e]).norm())))
        if not stationary:
            labels.append(CLASSES[5])
        elif L[e] <= tol**2 * na**2:
            labels.append(CLASSES[0])
        elif bool(tiny[e].any()):
            labels.append(CLASSES[4])
        elif bool(parallel[e].all()) and side[e, 0] == side[e, 1] and bool(sum_ok[e]):
            if v[e, 0] * v[e, 1] < 0:
                labels.append(CLASSES[1] if c[e] > 0 else CLASSES[2] if c[e] < -1 else CLASSES[6])
            else:
                labels.append(CLASSES[3])
        else:
            labels.append(CLASSES[6])
    c = torch.where(torch.tensor([l in CLASSES[1:3] for l in labels], device=c.device), c, torch.nan)
    return labels, c


# --------------------------------------------------------------------- Lemmas 8, 12, 13: reduction to a plane
def effective_pair(r: Tensor | float, theta: Tensor | float, *, device=None, dtype=None) -> Tensor:
    """Effective weights ``w̃1 = r e1``, ``w̃2 = (cos θ, sin θ)`` in the plane, shape ``(..., 2, 2)``
    (``r, θ`` broadcast). The reduced setting of paper B's Figures 4 and 5 (Lemmas 8, 12, 13; :ref:`ch-pl-smoothness`):
    ``r = ‖w̃1‖/‖w̃2‖`` and ``θ`` the angle between the neurons; the network is
    ``ReLU(w̃1ᵀx) − ReLU(w̃2ᵀx)``.

    Parameters
    ----------
    r : float or Tensor, (...)
        ``‖w̃1‖/‖w̃2‖``.
    theta : float or Tensor, (...)
        The angle between the neurons.
    device, dtype : optional
        Where the result goes (default: the policy of :mod:`companion.device`).

    Returns
    -------
    Tensor, (..., 2, 2)
        ``[w̃1, w̃2]``.
    """
    dev, dt = resolve(device, dtype)
    r, theta = torch.broadcast_tensors(torch.as_tensor(r, dtype=dt, device=dev), torch.as_tensor(theta, dtype=dt, device=dev))
    zero = torch.zeros_like(r)
    return torch.stack([torch.stack([r, zero], -1), torch.stack([torch.cos(theta), torch.sin(theta)], -1)], -2)


def lemma_terms(W_eff: Tensor, a: Tensor) -> dict[str, Tensor]:
    """The three sides of Lemmas 8, 12 and 13 at effective weights ``w̃_i = v_i w_i`` (:ref:`ch-pl-smoothness`).

    With the network ``ReLU(w̃1ᵀx) − ReLU(w̃2ᵀx)`` (signed ``v = [1, −1]``): ``"L"`` the population loss,
    ``"grad2"`` ``= ‖∇_{w̃1}L‖² + ‖∇_{w̃2}L‖²`` and ``"err"`` ``= ‖w̃1 − a‖² + ‖w̃2 + a‖²``, each ``(...)``.
    ``W_eff (..., 2, d)``, ``a (d,)`` or ``(..., d)``. Since ``∇_{w_i}L = v_i ∇_{w̃_i}L``, Lemma 8 reads
    ``grad2 ≥ α L`` when ``v1 = v2``, Lemma 12 ``grad2 ≤ (5/2) err`` and Lemma 13 ``err ≤ 20 L``.

    Parameters
    ----------
    W_eff : Tensor, (..., 2, d)
        The effective weights ``w̃_i = v_i w_i``.
    a : Tensor, (d,) or (..., d)
        The target.

    Returns
    -------
    dict of str to Tensor, each (...)
        ``"L"``, ``"grad2"`` and ``"err"``.

    Raises
    ------
    ValueError
        When there are not two neurons, or as :func:`loss`.
    """
    if W_eff.shape[-2] != 2:
        raise ValueError(f"the lemmas are about k = 2 neurons, got W_eff {tuple(W_eff.shape)}")
    v = torch.tensor([1.0, -1.0], dtype=W_eff.dtype, device=W_eff.device).expand(W_eff.shape[:-1])
    _check_net(W_eff, v, a)
    L, gW, _ = _loss_gradient(W_eff, v, a)
    err = ((W_eff[..., 0, :] - a) ** 2).sum(-1) + ((W_eff[..., 1, :] + a) ** 2).sum(-1)
    return {"L": L, "grad2": (gW**2).sum((-1, -2)), "err": err}


def target_forms(W_eff: Tensor) -> dict[str, Tensor]:
    """Each side of :func:`lemma_terms` as an exact quadratic form in ``x = (a1, a2, 1)``, for targets ``a`` in
    the plane of the two neurons (Figures 4 and 5; :ref:`ch-pl-smoothness`): ``{"L", "grad2", "err"}`` of ``(..., 3, 3)``.

    Every side is a quadratic polynomial in ``a`` (the loss is, and so are the gradient's components), so six
    evaluations at ``a ∈ {0, ±e1, ±e2, e1 + e2}`` determine it: ``f(a) = xᵀ Q x``. ``W_eff (..., 2, 2)``.

    Parameters
    ----------
    W_eff : Tensor, (..., 2, 2)
        Two effective neurons in the plane.

    Returns
    -------
    dict of str to Tensor, each (..., 3, 3)
        ``"L"``, ``"grad2"`` and ``"err"`` as symmetric matrices ``Q``.

    Raises
    ------
    ValueError
        When ``W_eff`` is not a finite ``(..., 2, 2)`` tensor.
    """
    validation.tensor("W_eff", W_eff, ndim=None)
    if W_eff.shape[-2:] != (2, 2):
        raise ValueError(f"W_eff must be (..., 2, 2) (two neurons in the plane), got {tuple(W_eff.shape)}")
    pts = torch.tensor([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1], [1, 1]], dtype=W_eff.dtype, device=W_eff.device)
    vals = [lemma_terms(W_eff, p.expand(*W_eff.shape[:-2], 2)) for p in pts]
    out = {}
    for key in vals[0]:
        f0, fx, fmx, fy, fmy, fxy = (v[key] for v in vals)
        q11, q22 = (fx + fmx) / 2 - f0, (fy + fmy) / 2 - f0
        q12 = (fxy - fx - fy + f0) / 2
        b1, b2 = (fx - fmx) / 4, (fy - fmy) / 4
        out[key] = torch.stack(
            [torch.stack([q11, q12, b1], -1), torch.stack([q12, q22, b2], -1), torch.stack([b1, b2, f0], -1)], -2
        )
    return out


def min_over_target(A: Tensor, B: Tensor, coef: float) -> Tensor:
    """``min_a (xᵀAx − coef · xᵀBx)`` over ``x = (a, 1)``, ``a ∈ R²``, for a difference that is convex in ``a``
    (Figures 4 and 5: the paper's ``h`` and ``h̃`` minimised over the target; :ref:`ch-pl-smoothness`). ``(..., 3, 3) → (...)``.

    Parameters
    ----------
    A, B : Tensor, (..., 3, 3)
        Quadratic forms of :func:`target_forms`.
    coef : float
        The multiple of ``B`` subtracted.

    Returns
    -------
    Tensor, (...)
        The minimum over the target.

    Raises
    ------
    ValueError
        When ``A`` and ``B`` lie on different devices or dtypes.
    """
    validation.same_device(A=A, B=B)
    M = A - coef * B
    Q, b, c = M[..., :2, :2], M[..., :2, 2], M[..., 2, 2]
    return c - (b[..., None, :] @ torch.linalg.solve(Q, b[..., None]))[..., 0, 0]


def extreme_ratio_over_target(A: Tensor, B: Tensor, *, largest: bool = False) -> Tensor:
    """Smallest (or largest) ratio ``xᵀAx / xᵀBx`` over every target ``a`` (and the limit ``‖a‖ → ∞``), i.e. the
    extreme generalised eigenvalue of the pencil ``(A, B)`` (Lemmas 8, 12, 13; :ref:`ch-pl-smoothness`). ``(..., 3, 3) → (...)``.

    NaN where ``B`` is not positive definite: for ``err`` only at ``w̃1 = −w̃2`` (``r = 1, θ = π``), the optimum
    itself, where both sides vanish.

    Parameters
    ----------
    A, B : Tensor, (..., 3, 3)
        Quadratic forms of :func:`target_forms`.
    largest : bool
        The largest ratio instead of the smallest.

    Returns
    -------
    Tensor, (...)
        The extreme generalised eigenvalue, ``nan`` where ``B`` is not positive definite.

    Raises
    ------
    ValueError
        When ``A`` and ``B`` lie on different devices or dtypes.
    """
    validation.same_device(A=A, B=B)
    Lc, info = torch.linalg.cholesky_ex(B)
    ok = info == 0
    Lc = torch.where(ok[..., None, None], Lc, torch.eye(3, dtype=B.dtype, device=B.device))
    Li = torch.linalg.inv(Lc)
    ev = torch.linalg.eigvalsh(Li @ A @ Li.transpose(-1, -2))
    out = ev[..., -1] if largest else ev[..., 0]
    return torch.where(ok, out, torch.full_like(out, torch.nan))


def lemma9_constant(c1: float, c2: float) -> float:
    """Lemma 9's smoothness constant ``L = 2 + (12 + 10/π + 4c2/(π c1)) c2²`` (assembled at the end of
    Appendix B.3; :ref:`ch-pl-smoothness`): ``‖∇²L‖ ≤ L‖a‖`` on ``c1‖a‖ ≤ v_i, ‖w_i‖ ≤ c2‖a‖``.

    Parameters
    ----------
    c1, c2 : float
        The box's constants, positive.

    Returns
    -------
    float
        Lemma 9's ``L``.

    Raises
    ------
    ValueError
        When ``c1`` or ``c2`` is not positive.
    """
    if not (c1 > 0 and c2 > 0):
        raise ValueError(f"need c1, c2 > 0, got c1={c1}, c2={c2}")
    return 2 + (12 + 10 / math.pi + 4 * c2 / (math.pi * c1)) * c2**2
