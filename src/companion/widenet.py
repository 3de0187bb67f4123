"""Paper C's width-m fully connected and residual networks, and what changes inside the parameter ball
(:ref:`ch-parameter-ball`).

The networks (paper C, following Du, Lee, Li, Wang, Zhai 2019), for an input ``x ∈ R^d`` on the sphere:

* first layer (both architectures): ``x_1 = (√c_σ/√m) σ(W_1 x)``, ``W_1 ∈ R^{m×d}``;
* fully connected, ``h ≥ 2``: ``x_h = (√c_σ/√m) σ(W_h x_{h−1})``, ``W_h ∈ R^{m×m}``;
* residual, ``h ≥ 2``: ``x_h = x_{h−1} + (c_res/(H√m)) σ(W_h x_{h−1})``;
* output ``f(x) = aᵀ x_H`` with ``a ∈ R^m``, ``‖a‖ ≈ √m``.

``c_σ = 1/E[σ(g)²]`` (``g ~ N(0, 1)``) keeps the feature norms of order one; every entry of every ``W_h`` and of
``a`` is ``N(0, 1)`` at initialisation. In the notation of the paper, ``s_h = √c_σ`` for the first layer and for
fully connected layers, ``s_h = c_res/H`` for residual layers ``h ≥ 2``.

Parameters are a list ``[W_1 (E, m, d), W_2 (E, m, m), …, W_H (E, m, m), a (E, m)]`` with a leading ensemble axis
``E``, the container of :mod:`companion.model`: the module speaks its verbs (:func:`init_params`, :func:`forward`,
:func:`loss_and_gradient`, :func:`make_loss_and_grad`), so :func:`companion.gd.run` trains it like every other
network of the book. Directions in parameter space are lists of the same shapes (:mod:`companion.paramlist`).
Members are independent, so derivatives of the ensemble *sum* of a per-member scalar give
per-member derivatives; that is how :mod:`torch.func` (``grad``) is applied below without ``vmap``.
The output Hessian is only ever touched through Hessian-vector products (Pearlmutter's R-operator written out for
this network by default, double backward or ``torch.func`` forward-over-reverse on request — equal, tested),
and its spectral norm comes from :func:`companion.curvature.lanczos` in its three-vector mode (no stored Krylov
basis: at m = 2048 one parameter vector has 4.2 million entries per member): nothing of size ``P × P`` is ever formed.
Jacobians are never formed either: each output gradient with respect
to ``W_h`` is the rank-one matrix ``u_{h,i} x_{h−1,i}ᵀ``, so Gram matrices and ``J h`` come from one backward pass.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import grad, jvp

from . import activations, curvature, paramlist, validation
from . import device as _device
from .device import randn
from .model import Params

__all__ = [
    "ARCHS",
    "ENTRY_REFINE",
    "c_sigma",
    "depth",
    "check_params",
    "init_params",
    "sphere_inputs",
    "Net",
    "forward",
    "loss_and_gradient",
    "make_loss_and_grad",
    "backward_vectors",
    "backward_sup_norm",
    "backward_gradient_norms",
    "layer_grams",
    "last_layer_gram",
    "ntk",
    "jacobian_norm",
    "gram_drift",
    "random_direction",
    "gradient_direction",
    "gram_ascent_direction",
    "gram_entry_ascent",
    "output_hvp",
    "loss_hvp",
    "weighted_output_hvp",
    "output_hessian_norm",
    "output_hessian_norms",
    "loss_hessian_norm",
    "weighted_output_hessian_norm",
    "jvp_outputs",
    "taylor_remainder",
    "feature_drift",
    "backward_drift",
    "feature_derivative_norms",
    "layer_product_norms",
    "ball_measurements",
    "loss_hessian_measurements",
    "radius_measurements",
    "radius_sweep",
    "sweep_point",
    "sweep_draws",
    "dense_reference_errors",
    "radius_exponent",
]

ARCHS = ("fc", "res")
#: the projected-gradient steps after the first-order step of :func:`gram_entry_ascent` in the chapter's sweeps
ENTRY_REFINE = 2


# ----------------------------------------------------------------------------------------------- set-up
@functools.cache
def _c_sigma_by_name(name: str) -> float:
    a = activations.get(name)
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    vals = a.fn(torch.as_tensor(nodes, dtype=torch.float64)).numpy()
    return float(1.0 / (np.sum(weights * vals**2) / math.sqrt(2 * math.pi)))


def c_sigma(act: str | activations.Activation) -> float:
    """``c_σ = 1 / E[σ(g)²]``, ``g ~ N(0, 1)``, by 200-point Gauss–Hermite quadrature (paper C's scaling,
    :ref:`ch-parameter-ball`). For tanh ≈ 2.54, for softplus ≈ 1.07.

    Parameters
    ----------
    act : str or Activation
        σ (:func:`companion.activations.get`).

    Returns
    -------
    float
        ``c_σ``.

    Raises
    ------
    ValueError
        When ``act`` is not a registered activation.
    """
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


def _names(H: int) -> list[str]:
    """The blocks' names in the order of the parameter list: ``["W1", …, "WH", "a"]``."""
    return [f"W{h}" for h in range(1, H + 1)] + ["a"]


def depth(params: Params) -> int:
    """Number of weight layers ``H`` of a parameter list ``[W_1, …, W_H, a]``.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.

    Returns
    -------
    int
        ``H``.
    """
    return len(params) - 1


def check_params(params: Params) -> tuple[int, int, int, int]:
    """Validate a parameter list ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``; return ``(E, m, d, H)``.
    Raises ``ValueError`` on a malformed list.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.

    Returns
    -------
    E, m, d, H : int
        The ensemble size, width, input dimension and depth.

    Raises
    ------
    ValueError
        When ``params`` is not such a list of finite floating tensors on one device with one dtype.
    """
    if not isinstance(params, (list, tuple)) or len(params) < 2:
        raise ValueError("params must be a list [W1, …, WH, a] of H >= 1 weight tensors and the output weights")
    H = depth(params)
    names = _names(H)
    if all(isinstance(v, Tensor) for v in params):
        validation.same_device(**dict(zip(names, params)))
    W1 = validation.tensor("W1", params[0], ndim=3)
    E, m, d = W1.shape
    validation.tensor("a", params[-1], ndim=2)
    if params[-1].shape != (E, m):
        raise ValueError(f"a (the last entry of params) must have shape {(E, m)}, got {tuple(params[-1].shape)}")
    for h in range(2, H + 1):
        W = validation.tensor(f"W{h}", params[h - 1], ndim=3)
        if W.shape != (E, m, m):
            raise ValueError(f"W{h} must have shape {(E, m, m)}, got {tuple(W.shape)}")
    return E, m, d, H


def _check(params: Params, **tensors) -> tuple[int, int, int, int]:
    """:func:`check_params`, then every further tensor (or list of tensors shaped like ``params``) on the
    parameters' device and dtype (checked first, so a tensor on another device is named before anything else is
    read)."""
    shape = check_params(params)
    ref = {"params": params[-1]}
    names = _names(shape[3])
    for name, t in tensors.items():
        if isinstance(t, (list, tuple)):
            if len(t) != len(params):
                raise ValueError(f"{name} must be a list of {len(params)} tensors shaped like params, got {len(t)}")
            for k, v, p in zip(names, t, params):
                if isinstance(v, Tensor):
                    validation.same_device(**ref, **{f"{name}[{k!r}]": v})
                validation.tensor(f"{name}[{k!r}]", v)
                if v.shape != p.shape:
                    raise ValueError(f"{name}[{k!r}] must have shape {tuple(p.shape)}, got {tuple(v.shape)}")
        else:
            if isinstance(t, Tensor):
                validation.same_device(**ref, **{name: t})
            validation.tensor(name, t)
    if "X" in tensors:
        _check_X(tensors["X"], shape[2], shape[0])
    return shape


def init_params(
    d: int, m: int, H: int, ensemble: int = 1, *, generator: torch.Generator | None = None, device=None, dtype=None
) -> Params:
    """Paper C's Gaussian initialisation θ0 (following Du et al.; :ref:`ch-parameter-ball`).

    Every entry of every ``W_h`` and of ``a`` is ``N(0, 1)``, so ``‖a‖ ≈ √m``; drawn in the order
    ``W_1, …, W_H, a`` from ``generator`` (a seeded CPU generator, :func:`companion.device.generator`).

    Parameters
    ----------
    d, m, H
        Input dimension, width and number of weight layers (``H ≥ 1``).
    ensemble
        Number of independent members ``E``.
    generator, device, dtype
        As everywhere in :mod:`companion.device`.

    Returns
    -------
    list[Tensor]
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.

    Raises
    ------
    ValueError
        When ``d``, ``m``, ``H`` or ``ensemble`` is not a positive int.
    """
    for name, v in (("d", d), ("m", m), ("H", H), ("ensemble", ensemble)):
        validation.positive_int(name, v)
    dev, dt = _device.resolve(device, dtype)
    p = [randn((ensemble, m, d), generator=generator, device=dev, dtype=dt)]
    for _ in range(2, H + 1):
        p.append(randn((ensemble, m, m), generator=generator, device=dev, dtype=dt))
    p.append(randn((ensemble, m), generator=generator, device=dev, dtype=dt))
    return p


def sphere_inputs(n: int, d: int, *, generator: torch.Generator | None = None, device=None, dtype=None) -> Tensor:
    """``n`` inputs drawn uniformly on the unit sphere of ``R^d``, shape ``(n, d)`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    n : int
        The number of inputs.
    d : int
        Their dimension.
    generator : torch.Generator or None
        The CPU generator of the draws (:mod:`companion.device`).
    device, dtype : optional
        Where the inputs go (default: the policy of :mod:`companion.device`).

    Returns
    -------
    Tensor, (n, d)
        Unit vectors.

    Raises
    ------
    ValueError
        When ``n`` or ``d`` is not a positive int.
    """
    validation.positive_int("n", n)
    validation.positive_int("d", d)
    dev, dt = _device.resolve(device, dtype)
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
        """``[s_1, …, s_H]``: ``√c_σ`` for layer 1 and fully connected layers, ``c_res/H`` for residual ``h ≥ 2``.

        Parameters
        ----------
        H : int
            The depth.

        Returns
        -------
        list of float
            ``[s_1, …, s_H]``.
        """
        cs = math.sqrt(c_sigma(self.act))
        return [cs if (h == 1 or self.arch == "fc") else self.c_res / H for h in range(1, H + 1)]


def _check_X(X: Tensor, d: int, E: int | None = None) -> Tensor:
    """Inputs shared by every member ``(n, d)``, or one set per member ``(E, n, d)``."""
    validation.tensor("X", X, ndim=(2, 3))
    if X.shape[-1] != d or (X.ndim == 3 and E is not None and X.shape[0] != E):
        raise ValueError(f"X must have shape (n, {d}) or ({E if E is not None else 'E'}, n, {d}), got {tuple(X.shape)}")
    return X


def _forward(params: Params, X: Tensor, net: Net, taps: dict | None = None, xtaps: dict | None = None, perturb=None, upto=None):
    """Internal forward pass. Returns ``(f (E, n), xs, zs)`` with ``xs = [x_0 .. x_H]`` (each ``(E, n, ·)``) and
    ``zs = [z_1 .. z_H]`` (``(E, n, m)``); ``taps[h]`` (``(E, n, m)``, zeros) is added to ``z_h`` so that the
    gradient with respect to a tap is the per-sample ``∂f_i/∂z_h``; likewise ``xtaps[h]`` added to ``x_h``.
    ``perturb(h, x)`` (``(E, n, m)``), if given, is added to ``z_h = x W_hᵀ``: a change of ``W_h`` that differs
    from sample to sample (:func:`gram_entry_ascent`'s rank-two directions). ``upto = h < H`` stops after layer
    ``h`` (``f`` is then ``None``; the scalings stay those of depth ``H``)."""
    H = depth(params)
    act = activations.get(net.act)
    a = params[-1]
    m = a.shape[-1]
    s = net.scales(H)
    x = X.expand(a.shape[0], *X.shape) if X.ndim == 2 else X  # (E, n, d); internal callers may pass
    xs, zs = [x], []  # per-member inputs (E, n, d)
    for h in range(1, (H if upto is None else upto) + 1):
        z = x @ params[h - 1].transpose(-1, -2)
        if perturb is not None:
            z = z + perturb(h, x)
        if taps is not None:
            z = z + taps[h]
        zs.append(z)
        out = (s[h - 1] / math.sqrt(m)) * act.fn(z)
        x = out if (h == 1 or net.arch == "fc") else x + out
        if xtaps is not None:
            x = x + xtaps[h]
        xs.append(x)
    f = (x * a.unsqueeze(-2)).sum(-1) if upto is None or upto == H else None
    return f, xs, zs


def forward(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """Paper C's network outputs ``f(x_i) = aᵀ x_H(x_i)`` for every member (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    params
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``, as from :func:`init_params`.
    X
        Inputs ``(n, d)`` shared by the members, or ``(E, n, d)`` one set per member.
    net
        The architecture (:class:`Net`).

    Returns
    -------
    Tensor
        ``(E, n)``.
    """
    _check(params, X=X)
    return _forward(params, X, net)[0]


# ------------------------------------------------------------------------------------ loss and gradient
def _check_targets(X: Tensor, y: Tensor) -> None:
    validation.tensor("y", y, ndim=(1, 2))
    if y.shape[-1] != X.shape[-2]:
        raise ValueError(f"y has {y.shape[-1]} targets but X has n = {X.shape[-2]} inputs")
    if X.ndim == 3 and y.ndim == 2 and y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} members but X has {X.shape[0]}")


def _loss_and_gradient(params: Params, X: Tensor, y: Tensor, net: Net) -> tuple[Tensor, list[Tensor]]:
    """Square loss and its gradient by the backward recursion of paper C's backward vectors, no checks.

    With ``b_H = a`` and ``u_h = ∂f/∂z_h = (s_h/√m) σ'(z_h) ⊙ b_h``, ``b_{h−1} = W_hᵀ u_h`` (plus ``b_h`` for a
    residual layer ``h ≥ 2``): ``∇_{W_h} L = Σ_i r_i u_{h,i} x_{h−1,i}ᵀ`` and ``∇_a L = Σ_i r_i x_{H,i}``."""
    H = depth(params)
    act = activations.get(net.act)
    a = params[-1]
    s = net.scales(H)
    c = [s[h - 1] / math.sqrt(a.shape[-1]) for h in range(1, H + 1)]
    f, xs, zs = _forward(params, X, net)
    r = f - y  # (E, n)
    back = r.unsqueeze(-1) * a.unsqueeze(-2)  # Σ-weighted backward vector r_i b_{H,i}, (E, n, m)
    grads: list[Tensor] = [torch.bmm(r.unsqueeze(1), xs[H]).squeeze(1)]  # ∇_a L, (E, m)
    for h in range(H, 0, -1):
        u = back * (c[h - 1] * act.d1(zs[h - 1]))  # r_i ∂f_i/∂z_h, (E, n, m)
        grads.append(torch.bmm(u.transpose(1, 2), xs[h - 1]))  # (E, m, m_{h-1})
        if h > 1:
            back = torch.bmm(u, params[h - 1]) + (back if net.arch == "res" else 0.0)
    return 0.5 * (r * r).sum(-1), grads[:0:-1] + grads[:1]


def loss_and_gradient(params: Params, X: Tensor, y: Tensor, net: Net = Net()) -> tuple[Tensor, list[Tensor]]:
    """Paper C's square loss ``L(θ) = ½ Σ_i (f(x_i; θ) − y_i)²`` and its gradient, per member
    (:ref:`ch-parameter-ball`; the loss whose Hessian :func:`loss_hessian_norm` bounds).

    The gradient comes from the backward vectors ``b_h = ∂f/∂x_h`` (:func:`backward_vectors`): each output gradient
    with respect to ``W_h`` is the rank-one ``u_{h,i} x_{h−1,i}ᵀ`` with ``u_h = (s_h/√m) σ'(z_h) ⊙ b_h``, so
    ``∇_{W_h} L = Σ_i r_i u_{h,i} x_{h−1,i}ᵀ`` and ``∇_a L = Σ_i r_i x_{H,i}`` (one backward pass, no autograd).
    Validates every argument on every call; inside a GD loop use :func:`make_loss_and_grad`.

    Parameters
    ----------
    params
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    net
        The architecture (:class:`Net`).

    Returns
    -------
    (loss, grads)
        ``loss (E,)`` and ``grads`` shaped like ``params``.
    """
    return make_loss_and_grad(X, y, net)(params)


def make_loss_and_grad(X: Tensor, y: Tensor, net: Net = Net()):
    """Closure for :func:`companion.gd.run` on paper C's square loss (:ref:`ch-parameter-ball`).

    ``closure(params)`` returns :func:`loss_and_gradient`'s values; the data are validated once here and the
    parameters' shapes at the first call. ``closure.restrict(index)`` is the closure of the members at positions
    ``index`` (per-member inputs and targets sliced), the contract of :mod:`companion.model`.

    Parameters
    ----------
    X
        Inputs ``(n, d)`` shared by the members, or ``(E, n, d)``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    net
        The architecture (:class:`Net`).

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), grads)`` with ``params = [W_1, …, W_H, a]`` and ``grads`` shaped like it.

    Raises
    ------
    ValueError
        When ``X`` or ``y`` is not a finite floating tensor of its shape, or they lie on different devices or dtypes;
        at a call, when the parameters do not match the data.

    Examples
    --------
    Eight members of a width-32 residual network, each fitting its own four targets to a tenth of its initial loss:

    >>> from companion import device, gd, widenet
    >>> g = device.generator(0)
    >>> X = widenet.sphere_inputs(4, 3, generator=g, device="cpu")
    >>> y = device.randn((8, 4), generator=g, device="cpu")
    >>> params = widenet.init_params(3, 32, 2, 8, generator=g, device="cpu")
    >>> f = widenet.make_loss_and_grad(X, y, widenet.Net("res"))
    >>> res = gd.run(f, params, 200, 0.05, progress=False)
    >>> bool((res.history["loss"][-1] < 0.1 * res.history["loss"][0]).all())
    True
    """
    validation.same_device(X=X, y=y)
    validation.tensor("X", X, ndim=(2, 3))
    _check_targets(X, y)
    checked: dict = {}

    def loss_and_grad(params: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        shapes = [tuple(p.shape) for p in params]
        if checked.get("shapes") != shapes:
            E, _, _, _ = _check(params, X=X)
            if y.ndim == 2 and y.shape[0] != E:
                raise ValueError(f"y has {y.shape[0]} members but params have E = {E}")
            checked["shapes"] = shapes
        return _loss_and_gradient(params, X, y, net)

    def restrict(index: Tensor):
        """The closure for the members at positions ``index`` (per-member inputs and targets sliced)."""
        return make_loss_and_grad(X[index] if X.ndim == 3 else X, y[index] if y.ndim == 2 else y, net)

    loss_and_grad.restrict = restrict
    return loss_and_grad


# ------------------------------------------------------------------------------ Jacobian and Gram matrices
def _preactivation_grads(params: Params, X: Tensor, net: Net):
    """Per-sample ``u_h = ∂f_i/∂z_h`` (``(E, n, m)`` each) with the features; one backward pass of ``Σ_{e,i} f``."""
    E, m, _, H = check_params(params)
    taps = {h: torch.zeros(E, X.shape[-2], m, dtype=X.dtype, device=X.device) for h in range(1, H + 1)}

    def total(t):
        f, xs, zs = _forward(params, X, net, t)
        return f.sum(), (xs, zs)

    us, (xs, zs) = grad(total, has_aux=True)(taps)
    return [us[h] for h in range(1, H + 1)], xs, zs


def backward_vectors(params: Params, X: Tensor, net: Net = Net()) -> list[Tensor]:
    """Paper C's backward vectors ``b_h = ∂f/∂x_h`` per sample, ``[b_1 … b_H]`` each ``(E, n, m)``; ``b_H = a``
    (:ref:`ch-parameter-ball`). Their sup-norm ``M = max_h ‖b_h(θ0)‖_∞`` enters the Hessian and Taylor bounds ``T M (1+D)/√m``:
    for Gaussian ``a`` it grows like ``√(2 log m)``.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor, each (E, n, m)
        ``[b_1, …, b_H]``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, m, _, H = _check(params, X=X)
    xt = {h: torch.zeros(E, X.shape[-2], m, dtype=X.dtype, device=X.device) for h in range(1, H + 1)}
    bs = grad(lambda t: _forward(params, X, net, None, t)[0].sum())(xt)
    return [bs[h] for h in range(1, H + 1)]


def backward_sup_norm(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """``M = max_{h, i} ‖b_h(x_i)‖_∞`` per member, ``(E,)`` (paper C's ``M``; :ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E,)
        ``M``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    return torch.stack([b.abs().flatten(1).max(1).values for b in backward_vectors(params, X, net)], 0).max(0).values


def backward_gradient_norms(params: Params, X: Tensor, net: Net = Net(), *, chunk: int = 64) -> dict:
    """How fast the ball can move the backward vectors' sup-norm (paper C, step 3: ``‖b_h(θ)‖_∞ ≤ TM(1+D)`` or
    ``CM(1+D)``; :ref:`ch-parameter-ball`): per member and layer, the parameter-gradient norms
    ``‖∇_θ b_{h,k}(x_i)‖`` of every coordinate ``k`` of ``b_h = ∂f/∂x_h`` at every input. To first order
    ``sup_{‖v‖ ≤ D} ‖b_h(θ + v)‖_∞ = max_{i,k} (|b_{h,k}(x_i)| + D ‖∇_θ b_{h,k}(x_i)‖)``, so the bound's ``D`` term
    asks ``max_{i,k} ‖∇_θ b_{h,k}(x_i)‖ ≤ TM``, with no power of ``m``.

    Exact, with no direction searched and no ``P``-sized gradient formed: ``b_{h,k}`` is ``f``'s derivative along
    ``e_k`` at ``x_h``, so ``∇_θ b_{h,k}`` is the derivative of ``∇_θ f`` along that tangent. Per input,
    ``∇_{W_l} f = u_l x_{l−1}ᵀ`` (``u_l = ∂f/∂z_l``), whose derivative ``u̇_l x_{l−1}ᵀ + u_l ẋ_{l−1}ᵀ`` has squared
    norm ``‖u̇_l‖²‖x_{l−1}‖² + ‖u_l‖²‖ẋ_{l−1}‖² + 2(u̇_l·u_l)(x_{l−1}·ẋ_{l−1})``, and ``∇_a f = x_H`` gives
    ``‖ẋ_H‖²``; one ``torch.func.jvp`` of ``(u_l, x_l)`` per ``chunk`` of the ``m`` tangents supplies the dots
    (copy ``j`` of the inputs carries tangent ``e_{k+j}``, every member at once: samples do not interact).
    ``b_H = a``, so its gradients are unit vectors: not computed.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.
    chunk : int
        Tangents per pass (memory about ``chunk × E × n × m`` per layer).

    Returns
    -------
    dict of str to Tensor, each (E, H)
        ``"max"``: ``max_{i,k} ‖∇_θ b_{h,k}(x_i)‖`` (column ``h − 1`` for layer ``h``; ``b_H = a``, whose column is
        1); ``"rms"``: the root mean square over the inputs and the coordinates.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, a tensor lies on another device or dtype, or
        ``chunk`` is not a positive integer.

    Examples
    --------
    >>> import torch
    >>> from companion import widenet as wn
    >>> g = torch.Generator().manual_seed(0)
    >>> p = wn.init_params(3, 8, 2, 2, generator=g, dtype=torch.float64)
    >>> X = wn.sphere_inputs(2, 3, generator=g, dtype=torch.float64)
    >>> out = wn.backward_gradient_norms(p, X)
    >>> out["max"].shape, bool(torch.allclose(out["max"][:, 1], torch.ones(2, dtype=torch.float64)))  # b_H = a
    (torch.Size([2, 2]), True)
    """
    E, m, d, H = _check(params, X=X)
    validation.positive_int("chunk", chunk)
    X = X.expand(E, *X.shape) if X.ndim == 2 else X
    n = X.shape[-2]

    def parts(Xc: Tensor, tap: Tensor, h: int) -> tuple:  # (u_1 … u_H), (x_0 … x_H), ``tap`` added to x_h
        ztaps = {l: torch.zeros_like(tap) for l in range(1, H + 1)}
        xtaps = {l: tap if l == h else ztaps[l] for l in range(1, H + 1)}

        def output(t: dict) -> tuple:
            f, xs, _ = _forward(params, Xc, net, t, xtaps)
            return f.sum(), tuple(xs)

        u, xs = grad(output, has_aux=True)(ztaps)
        return tuple(u[l] for l in range(1, H + 1)), xs

    def dot(p: Tensor, q: Tensor) -> Tensor:
        return (p * q).sum(-1)

    sq = torch.ones(E, H, n, m, dtype=X.dtype, device=X.device)  # b_H = a: ∇_θ a_k = e_k, norm 1
    for h in range(1, H):
        for k0 in range(0, m, chunk):
            c = min(chunk, m - k0)
            # c copies of the inputs, copy j with tangent e_{k0 + j} at x_h: samples do not interact
            Xc = X.unsqueeze(1).expand(E, c, n, d).reshape(E, c * n, d)
            tangent = torch.zeros(E, c, n, m, dtype=X.dtype, device=X.device)
            j = torch.arange(c, device=X.device)
            tangent[:, j, :, k0 + j] = 1
            zero = torch.zeros(E, c * n, m, dtype=X.dtype, device=X.device)
            (us, xs), (du, dx) = jvp(lambda tap, h=h: parts(Xc, tap, h), (zero,), (tangent.reshape(E, c * n, m),))
            total = dot(dx[H], dx[H])  # the gradient in a
            for l in range(1, H + 1):
                u, x, u_dot, x_dot = us[l - 1], xs[l - 1], du[l - 1], dx[l - 1]
                total = total + dot(u_dot, u_dot) * dot(x, x) + dot(u, u) * dot(x_dot, x_dot)
                total = total + 2 * dot(u_dot, u) * dot(x, x_dot)
            sq[:, h - 1, :, k0 : k0 + c] = total.reshape(E, c, n).transpose(1, 2)
    sq = sq.clamp_min(0)  # rounding
    return {"max": sq.flatten(2).max(-1).values.sqrt(), "rms": sq.flatten(2).mean(-1).sqrt()}


def layer_grams(params: Params, X: Tensor, net: Net = Net()) -> list[Tensor]:
    """Gram matrices of the output gradients, one per parameter tensor (paper C, :ref:`ch-parameter-ball`): for each ``W_h``,
    ``K_h[i, j] = ⟨∂f_i/∂W_h, ∂f_j/∂W_h⟩ = ⟨u_{h,i}, u_{h,j}⟩ ⟨x_{h−1,i}, x_{h−1,j}⟩`` (each gradient is the
    rank-one matrix ``u_{h,i} x_{h−1,i}ᵀ``), and ``K_a = X_H X_Hᵀ``. Returns ``[K_1, …, K_H, K_a]``, each
    ``(E, n, n)``, in the order of ``params``; their sum is the tangent kernel ``J Jᵀ``. No Jacobian of size
    ``n × P`` is formed.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor, each (E, n, n)
        ``[K_1, …, K_H, K_a]``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _, _, _, H = _check(params, X=X)
    us, xs, _ = _preactivation_grads(params, X, net)
    out = [(us[h - 1] @ us[h - 1].transpose(-1, -2)) * (xs[h - 1] @ xs[h - 1].transpose(-1, -2)) for h in range(1, H + 1)]
    out.append(xs[H] @ xs[H].transpose(-1, -2))
    return out


def last_layer_gram(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """Paper C's last-hidden-layer Gram, closed form (:ref:`ch-parameter-ball`):
    ``G_H[i, j] = γ ⟨X_i, X_j⟩ m⁻¹ Σ_r a_r² σ'(Z_{i,r}) σ'(Z_{j,r})`` with ``X_i = x_{H−1}(x_i)``,
    ``Z_i = W_H X_i`` and ``γ = s_H²`` (``c_σ`` fully connected, ``c_res²/H²`` residual). Shape ``(E, n, n)``.
    Equals ``layer_grams(...)[H - 1]`` (tested).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E, n, n)
        ``G_H``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _, m, _, H = _check(params, X=X)
    _, xs, zs = _forward(params, X, net)
    gamma = net.scales(H)[-1] ** 2
    act = activations.get(net.act)
    g = params[-1].unsqueeze(-2) * act.d1(zs[-1])  # (E, n, m): a_r σ'(Z_{i,r})
    Xh = xs[H - 1]
    return gamma * (Xh @ Xh.transpose(-1, -2)) * (g @ g.transpose(-1, -2)) / m


def ntk(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """The tangent kernel ``J Jᵀ`` (``J = ∂f/∂θ``, ``n × P``), shape ``(E, n, n)``, as the sum of :func:`layer_grams`.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E, n, n)
        ``J Jᵀ``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    return sum(layer_grams(params, X, net))


def jacobian_norm(params: Params, X: Tensor, net: Net = Net()) -> Tensor:
    """``‖J‖_op = √λ_max(J Jᵀ)`` per member, shape ``(E,)`` (paper C: ``‖J‖ ≤ T√n`` or ``C√n``; :ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E,)
        ``‖J‖_op``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    return torch.linalg.eigvalsh(ntk(params, X, net))[..., -1].clamp_min(0).sqrt()


def gram_drift(G: Tensor, G0: Tensor) -> tuple[Tensor, Tensor]:
    """Entrywise max and operator norm of ``G − G0`` per member: ``(E,), (E,)`` (paper C; :ref:`ch-parameter-ball`).

    Parameters
    ----------
    G, G0 : Tensor, (E, n, n)
        The Gram matrices at the moved and at the initial point.

    Returns
    -------
    entry : Tensor, (E,)
        ``max |G − G0|``.
    op : Tensor, (E,)
        ``‖G − G0‖_op``.

    Raises
    ------
    ValueError
        When ``G`` and ``G0`` are not finite 3-d tensors of one shape, device and dtype.
    """
    validation.same_device(G=G, G0=G0)
    validation.tensor("G", G, ndim=3)
    validation.tensor("G0", G0, ndim=3)
    if G.shape != G0.shape:
        raise ValueError(f"G and G0 must have equal shapes, got {tuple(G.shape)} and {tuple(G0.shape)}")
    diff = G - G0
    return diff.abs().flatten(1).max(dim=1).values, torch.linalg.matrix_norm(diff, ord=2)


# ------------------------------------------------------------------------------------------- directions
def random_direction(params: Params, D: float, *, generator: torch.Generator | None = None) -> Params:
    """A Gaussian direction with ``‖h‖ = D`` per member (all blocks together), so ``θ0 + h`` lies in the ball
    ``‖W_h − W_h(0)‖ ≤ D``, ``‖a − a0‖ ≤ D`` of paper C (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    D : float
        The ball's radius ``≥ 0``.
    generator : torch.Generator or None
        The CPU generator of the draws.

    Returns
    -------
    list of Tensor
        ``h``, shaped like ``params``, of norm ``D`` per member.

    Raises
    ------
    ValueError
        When ``params`` is malformed or ``D`` is negative.
    """
    check_params(params)
    validation.nonnegative("D", D)
    h = [randn(v.shape, generator=generator, dtype=v.dtype, device=v.device) for v in params]
    return paramlist.scale_to(h, D)


def gradient_direction(params: Params, X: Tensor, D: float, coef: Tensor, net: Net = Net()) -> Params:
    """``h = D Jᵀc / ‖Jᵀc‖``: a direction in the span of the output gradients, i.e. where gradient descent on a
    square loss moves (its step is ``−η Jᵀ r``). ``coef``: ``(E, n)``. Rank-one per layer. (:ref:`ch-parameter-ball`)

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    D : float
        The ball's radius ``≥ 0``.
    coef : Tensor, (E, n)
        The coefficients ``c`` of the output gradients.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor
        ``h``, shaped like ``params``, of norm ``D`` per member.

    Raises
    ------
    ValueError
        When ``params`` is malformed, ``X`` or ``coef`` does not match it, or ``D`` is negative.
    """
    E, _, _, _ = _check(params, X=X)
    validation.nonnegative("D", D)
    _check(params, coef=coef)
    validation.tensor("coef", coef, ndim=2)
    if coef.shape != (E, X.shape[-2]):
        raise ValueError(f"coef must have shape {(E, X.shape[-2])}, got {tuple(coef.shape)}")
    g = grad(lambda p: (_forward(p, X, net)[0] * coef).sum())(list(params))
    return paramlist.scale_to(g, D)


def gram_ascent_direction(params: Params, X: Tensor, D: float, net: Net = Net()) -> Params:
    """``h = D ∇_θ(uᵀ G_H u) / ‖∇_θ(uᵀ G_H u)‖`` with ``u`` the top eigenvector of ``G_H(θ0)``: to first order in
    ``D`` the direction of the ball that moves the last-hidden-layer Gram the most along ``u`` (steepest ascent).
    Since paper C bounds the drift over the *whole* ball, the drift along this direction is a lower estimate of
    that supremum (:ref:`ch-parameter-ball`); random or gradient-descent directions move ``G_H`` much less.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    D : float
        The ball's radius ``≥ 0``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor
        ``h``, shaped like ``params``, of norm ``D`` per member.

    Raises
    ------
    ValueError
        When ``params`` is malformed, ``X`` does not match it, or ``D`` is negative.
    """
    _check(params, X=X)
    validation.nonnegative("D", D)
    u = torch.linalg.eigh(last_layer_gram(params, X, net))[1][..., -1].detach()  # (E, n)
    g = grad(lambda p: torch.einsum("ei,eij,ej->", u, last_layer_gram(p, X, net), u))(list(params))
    return paramlist.scale_to(g, D)


def _pair_entries(params: Params, Xp: Tensor, net: Net, lowrank=None, taps=None):
    """``G_H,ij`` per member and entry at ``θ0 + h`` for the input pairs ``Xp`` ``(E, K, 2, d)``, where ``h`` is
    given in factored form: ``lowrank = (factors, da)``, ``factors[h - 1] = (U (E, K, m, 2), V (E, K, m_in, 2))``
    adds ``U Vᵀ`` to ``W_h`` and ``da`` ``(E, K, m)`` to ``a``, one perturbation per entry (``None``: ``h = 0``).
    ``taps``: ``H`` zero tensors ``(E, K, 2, m)`` added to the pre-activations and one ``(E, K, m)`` added to
    ``a``, for the gradient. The layers are :func:`_forward`'s, on the ``2K`` inputs at once (the weights shared by
    the entries). Returns ``(G (E, K), xs)`` with ``xs = [x_0 … x_H]``, each ``(E, K, 2, ·)``."""
    H = depth(params)
    E, m = params[-1].shape
    K = Xp.shape[1]

    def perturb(h, x):  # (U Vᵀ) x per entry, never forming U Vᵀ
        U, V = lowrank[0][h - 1]
        return ((x.reshape(E, K, 2, -1) @ V) @ U.transpose(-1, -2)).reshape(E, 2 * K, m)

    _, xs, zs = _forward(
        params,
        Xp.reshape(E, 2 * K, -1),
        net,
        taps=None if taps is None else {h: taps[h - 1].reshape(E, 2 * K, m) for h in range(1, H + 1)},
        perturb=None if lowrank is None else perturb,
    )
    xs = [x.reshape(E, K, 2, -1) for x in xs]
    a = params[-1].unsqueeze(1).expand(E, K, m)
    if lowrank is not None:
        a = a + lowrank[1]
    if taps is not None:
        a = a + taps[H]
    g = a.unsqueeze(2) * activations.get(net.act).d1(zs[-1].reshape(E, K, 2, m))  # (E, K, 2, m): a_r σ'(Z_{i,r})
    Xh = xs[H - 1]
    G = (net.scales(H)[-1] ** 2) * (Xh[:, :, 0] * Xh[:, :, 1]).sum(-1) * (g[:, :, 0] * g[:, :, 1]).sum(-1) / m
    return G, xs


def _pair_entry_gradients(params: Params, Xp: Tensor, net: Net, lowrank=None):
    """``∇_θ G_H,ij`` at ``θ0 + h`` per member and entry, factored: each ``∂G_ij/∂W_h = Σ_{k ∈ {i, j}} δ_{h,k}
    x_{h−1,k}ᵀ`` has rank two (``G_ij`` depends on two inputs), so it is returned as ``(U, V) = (δ_hᵀ, x_{h−1}ᵀ)``
    with ``∂G/∂W_h = U Vᵀ``, beside ``∂G/∂a`` ``(E, K, m)`` and the squared norm ``‖∇G_ij‖²`` ``(E, K)``."""
    H = depth(params)
    E, m = params[-1].shape
    K = Xp.shape[1]
    ref = params[-1]
    with torch.enable_grad():
        taps = [torch.zeros(E, K, 2, m, dtype=ref.dtype, device=ref.device, requires_grad=True) for _ in range(H)]
        taps.append(torch.zeros(E, K, m, dtype=ref.dtype, device=ref.device, requires_grad=True))
        detached = [p.detach() for p in params]
        lr = None if lowrank is None else ([(U.detach(), V.detach()) for U, V in lowrank[0]], lowrank[1].detach())
        G, xs = _pair_entries(detached, Xp, net, lr, taps)
        deltas = torch.autograd.grad(G.sum(), taps)
    factors = [(deltas[h].transpose(-1, -2), xs[h].detach().transpose(-1, -2)) for h in range(H)]
    ga = deltas[H]
    sq = (ga * ga).sum(-1)
    for U, V in factors:  # ‖U Vᵀ‖_F² = Σ (UᵀU) ∘ (VᵀV), 2 × 2 per entry
        sq = sq + ((U.transpose(-1, -2) @ U) * (V.transpose(-1, -2) @ V)).sum((-1, -2))
    return factors, ga, sq


def _scaled(factors, ga, sq, c):
    """The factored direction times ``c / ‖∇G‖`` (``c``: a float, ``sq``: ``(E, K)``); the factors ``V`` are
    shared. Raises ``ValueError`` on a zero gradient, like :func:`companion.paramlist.scale_to`."""
    if bool((sq == 0).any()):
        raise ValueError("cannot rescale a zero direction")
    k = c / sq.sqrt()
    return [(U * k[..., None, None], V) for U, V in factors], ga * k[..., None]


def gram_entry_ascent(
    params: Params, X: Tensor, D: float, net: Net = Net(), *, refine: int = 1, budget: int = 20_000_000
) -> dict:
    """The largest entrywise drift ``max_{i ≤ j} |G_H,ij(θ0 + h) − G_H,ij(θ0)|`` over ``‖h‖ = D``, each entry
    ascended directly (paper C's Gram drift bound ``|ΔG_H,ij| ≤ TD/√m``; :ref:`ch-parameter-ball`).

    For every entry ``(i, j)``, ``i ≤ j``, the direction ``h = ± D ∇G_ij/‖∇G_ij‖`` is its steepest ascent to first
    order (both signs are evaluated); ``refine`` further projected-gradient steps on the sphere ``‖h‖ = D`` (the
    gradient taken at ``θ0 + h``) follow, and the value after each step is kept, so that the search's convergence is
    part of the result. ``G_ij`` depends on inputs ``i`` and ``j`` only, so each entry costs a two-input pass, and
    its gradient with respect to each ``W_h`` has rank two: every direction is carried in factored form
    (``W_h + U Vᵀ``, ``U`` of shape ``(m, 2)``), the weights are shared by all entries, and no copy of the
    parameters is made per entry.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), …, a (E, m)]``.
    X : Tensor, shape (E, n, d) or (n, d)
        One set of inputs per member, or one shared by every member.
    D : float
        Radius of the ball.
    net : Net
        The architecture, activation and scalings.
    refine : int
        Projected-gradient steps after the first-order direction (0 for none).
    budget : int
        Activation entries per batch: ``max(1, budget // (2 E m H))`` entries ``(i, j)`` are ascended at once.

    Returns
    -------
    dict
        ``"entry"``: ``(E,)``, the largest drift found over all steps; ``"steps"``: ``(refine + 1, E)``, the largest
        drift found up to and including each step (non-decreasing along the rows); ``"first_order"``: ``(E,)``,
        ``D max_ij ‖∇G_ij(θ0)‖``; ``"first_order_rms"``: ``(E,)``, ``D (mean_{i ≤ j} ‖∇G_ij(θ0)‖²)^½``, the root mean
        square of the same first-order values over the ``n(n + 1)/2`` entries (within a factor ``√(n(n + 1)/2)`` of
        ``"first_order"`` at every width, so of the same rate in ``m``, without the extreme's finite-width
        correction); ``"offdiag_mean"``: ``(E,)``, the mean over the off-diagonal entries ``i < j`` of
        each entry's own largest drift found (NaN when ``n = 1``): a typical entry, where ``"entry"`` is the extreme
        of ``n(n + 1)/2`` of them.

    Raises
    ------
    ValueError
        On mismatched shapes, a negative ``D`` or ``refine``.
    """
    E, m, d, H = _check(params, X=X)
    validation.nonnegative("D", D)
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
        raise ValueError(f"refine must be a non-negative integer, got {refine!r}")
    n = X.shape[-2]
    X = X.expand(E, n, d) if X.ndim == 2 else X  # shared inputs: one copy per member
    rows, cols = torch.triu_indices(n, n)
    chunk = max(1, budget // (2 * E * m * H))
    best = torch.zeros(refine + 1, E, dtype=X.dtype, device=X.device)
    first = torch.zeros(E, dtype=X.dtype, device=X.device)
    first_sq = torch.zeros(E, dtype=X.dtype, device=X.device)  # Σ_ij ‖∇G_ij(θ0)‖² over the entries i ≤ j
    offdiag_sum = torch.zeros(E, dtype=X.dtype, device=X.device)
    params = [p.detach() for p in params]
    for start in range(0, rows.numel(), chunk):
        ri, ci = rows[start : start + chunk], cols[start : start + chunk]
        Xp = torch.stack([X[:, ri], X[:, ci]], 2)  # (E, K, 2, d)
        g0 = _pair_entries(params, Xp, net)[0].detach()
        factors, ga, sq = _pair_entry_gradients(params, Xp, net)
        first = torch.maximum(first, D * sq.sqrt().max(1).values)
        first_sq += sq.sum(1)
        dirs = [_scaled(factors, ga, sq, sign * D) for sign in (1.0, -1.0)]
        entry_best = torch.zeros_like(g0)  # (E, K): each entry's largest drift over the signs and steps
        for step in range(refine + 1):
            vals = [(_pair_entries(params, Xp, net, u)[0].detach() - g0).abs() for u in dirs]
            entry_best = torch.maximum(entry_best, torch.maximum(*vals))
            best[step] = torch.maximum(best[step], torch.maximum(*vals).max(1).values)
            if step < refine:
                dirs = [_scaled(*_pair_entry_gradients(params, Xp, net, u), sign * D) for sign, u in zip((1.0, -1.0), dirs)]
        offdiag_sum += entry_best[:, ri != ci].sum(1)
    best = torch.cummax(best, 0).values
    pairs = n * (n - 1) // 2
    offdiag = offdiag_sum / pairs if pairs else torch.full_like(offdiag_sum, float("nan"))
    rms = D * (first_sq / rows.numel()).sqrt()
    return {
        "entry": best[-1].detach(),
        "steps": best.detach(),
        "first_order": first.detach(),
        "first_order_rms": rms.detach(),
        "offdiag_mean": offdiag,
    }


# ------------------------------------------------------------------------- Hessian-vector products and norms
def _hvp(scalar, params: Params, v: Params) -> Params:
    """``∇²(scalar)(θ) v`` by reverse-over-reverse double backward; ``scalar(params)`` is a 0-d tensor (a sum over
    members, which are independent, so each member gets its own Hessian-vector product)."""
    with torch.enable_grad():
        pp = [p.detach().requires_grad_() for p in params]
        gs = torch.autograd.grad(scalar(pp), pp, create_graph=True)
        s = sum((g_ * v_).sum() for g_, v_ in zip(gs, v))
        hv = torch.autograd.grad(s, pp)
    return list(hv)


def _rop_hvp_fn(params: Params, X: Tensor, net: Net, c: Tensor, gauss_newton: bool = False):
    """``v ↦ (Σ_i c_i ∇²f_i(θ) + [JᵀJ]) v`` per member by Pearlmutter's R-operator written out for paper C's network
    (:ref:`ch-parameter-ball`); ``c``: ``(E, n)``, held fixed, and ``gauss_newton`` adds ``JᵀJ v`` (with ``c = f − y``
    the loss Hessian ``∇²L v``). The forward pass and the backward vectors at ``θ`` do not depend on ``v`` and are
    computed once; each product then costs one directional forward pass (``Rz_h = x_{h−1}V_hᵀ + Rx_{h−1}W_hᵀ``), one
    directional backward pass (``Rδ_h = k_h(σ''(z_h)Rz_h g_h + σ'(z_h)Rg_h)``, ``Rg_{h−1} = Rδ_h W_h + δ_h V_h``) and
    one product per layer for ``R∇_{W_h} = Rδ_hᵀ x_{h−1} + δ_hᵀ Rx_{h−1}``: four reads of each ``m × m`` matrix and
    one write. Equal to the generic products (forward-over-reverse, double backward) up to rounding, and to the dense
    Hessian (tested); at ``m = 1024`` a third of the time of the faster of them (``benchmarks/run.py``, section
    ``hvp``)."""
    H = depth(params)
    act = activations.get(net.act)
    a = params[-1].detach()
    E, m = a.shape
    k = [s / math.sqrt(m) for s in net.scales(H)]
    with torch.no_grad():
        _, xs, zs = _forward([p.detach() for p in params], X, net)
        d1 = [act.d1(z) for z in zs]
        d2 = [act.d2(z) for z in zs]
        g = c.unsqueeze(-1) * a.unsqueeze(-2)  # ∂(Σ c_i f_i)/∂x_H per input, (E, n, m)
        gs, deltas = [None] * (H + 1), [None] * (H + 1)
        for h in range(H, 0, -1):
            gs[h] = g
            deltas[h] = k[h - 1] * d1[h - 1] * g
            if h > 1:
                g = deltas[h] @ params[h - 1].detach() + (g if net.arch == "res" else 0.0)
    weights = [p.detach() for p in params[:-1]]
    skip = net.arch == "res"

    def hvp(v: Params) -> Params:
        with torch.no_grad():
            rx, rzs, rxs = None, [], [None]
            for h in range(1, H + 1):
                rz = xs[h - 1] @ v[h - 1].transpose(-1, -2)
                if rx is not None:
                    rz = rz + rx @ weights[h - 1].transpose(-1, -2)
                rzs.append(rz)
                rout = k[h - 1] * d1[h - 1] * rz
                rx = rout + rx if (skip and h > 1) else rout
                rxs.append(rx)
            va = v[-1]
            rg = c.unsqueeze(-1) * va.unsqueeze(-2)
            ra = (c.unsqueeze(-1) * rxs[H]).sum(-2)
            if gauss_newton:
                rf = (rxs[H] * a.unsqueeze(-2)).sum(-1) + (xs[H] * va.unsqueeze(-2)).sum(-1)  # J v, (E, n)
                rg = rg + rf.unsqueeze(-1) * a.unsqueeze(-2)
                ra = ra + (rf.unsqueeze(-1) * xs[H]).sum(-2)
            out = [None] * H + [ra]
            for h in range(H, 0, -1):
                rdelta = k[h - 1] * (d2[h - 1] * rzs[h - 1] * gs[h] + d1[h - 1] * rg)
                if h == 1:
                    out[0] = rdelta.transpose(-1, -2) @ xs[0].expand(E, *xs[0].shape[-2:])
                    break
                both = torch.cat([rdelta, deltas[h]], dim=-2).transpose(-1, -2)  # (E, m, 2n)
                out[h - 1] = both @ torch.cat([xs[h - 1], rxs[h - 1]], dim=-2)
                rg_next = rdelta @ weights[h - 1] + deltas[h] @ v[h - 1]
                rg = rg_next + rg if skip else rg_next
            return out

    return hvp


def _output_hvp_fn(params: Params, X: Tensor, net: Net):
    """``v ↦ ∇²(Σ_i f_i)(θ) v`` per member for inputs ``X`` ``(E, n, d)`` or ``(1, n, d)``: :func:`_rop_hvp_fn` with
    unit weights."""
    n = X.shape[-2]
    E = params[-1].shape[0]
    return _rop_hvp_fn(params, X, net, torch.ones((E, n), dtype=X.dtype, device=X.device))


def _one_input(x: Tensor, d: int, E: int) -> Tensor:
    """One input shared by the members ``(d,)`` -> ``(1, d)``, or one per member ``(E, d)`` -> ``(E, 1, d)``."""
    validation.tensor("x", x, ndim=(1, 2))
    if x.shape[-1] != d or (x.ndim == 2 and x.shape[0] != E):
        raise ValueError(f"x must have shape ({d},) or ({E}, {d}), got {tuple(x.shape)}")
    return x.reshape(1, -1) if x.ndim == 1 else x.unsqueeze(1)


def output_hvp(params: Params, x: Tensor, v: Params, net: Net = Net(), *, method: str = "rop") -> Params:
    """``∇²f(x; θ) v`` per member, ``x``: ``(d,)``; never forms the Hessian (paper C's output Hessian; :ref:`ch-parameter-ball`).

    ``method="rop"`` (default): the R-operator written out for this network (one directional forward and backward
    pass, the product the Lanczos runs of :func:`output_hessian_norm` repeat); ``method="func"``: forward-over-reverse
    ``torch.func.jvp(torch.func.grad(f))``; ``method="autograd"``: reverse-over-reverse double backward with
    :func:`torch.autograd.grad`. All three give the same vector up to rounding (tested); the first is the fastest at
    every width (``benchmarks/run.py``, section ``hvp``).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    x : Tensor, (d,) or (E, d)
        One input, shared or one per member.
    v : list of Tensor
        A vector shaped like ``params``.
    net : Net
        The architecture, activation and scalings.
    method : str
        ``"rop"``, ``"autograd"`` or ``"func"``.

    Returns
    -------
    list of Tensor
        ``∇²f(x; θ) v``, shaped like ``params``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, ``x`` or ``v`` does not match it, or ``method`` is unknown.
    """
    E, _, d, _ = _check(params, x=x, v=v)
    xx = _one_input(x, d, E)
    if method == "rop":
        return _output_hvp_fn(params, xx, net)(v)
    if method == "func":
        g = grad(lambda p: _forward(p, xx, net)[0].sum())
        return list(jvp(g, (list(params),), (list(v),))[1])
    if method != "autograd":
        raise ValueError(f"method must be 'rop', 'autograd' or 'func', got {method!r}")
    return _hvp(lambda p: _forward(p, xx, net)[0].sum(), params, v)


def loss_hvp(params: Params, X: Tensor, y: Tensor, v: Params, net: Net = Net()) -> Params:
    """``∇²L(θ) v`` per member for the square loss ``L(θ) = ½ Σ_i (f_i(θ) − y_i)²`` (``X``: ``(n, d)``, ``y``:
    ``(n,)`` or ``(E, n)``). Paper C: ``∇²L = JᵀJ + Σ_i r_i ∇²f_i`` with ``r = f − y`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    y : Tensor, (n,) or (E, n)
        The targets.
    v : list of Tensor
        A vector shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor
        ``∇²L(θ) v``, shaped like ``params``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _check(params, X=X, y=y, v=v)
    return _hvp(lambda p: 0.5 * ((_forward(p, X, net)[0] - y) ** 2).sum(), params, v)


def weighted_output_hvp(params: Params, X: Tensor, c: Tensor, v: Params, net: Net = Net()) -> Params:
    """``(Σ_i c_i ∇²f_i(θ)) v`` per member, ``c``: ``(E, n)`` held fixed (with ``c = r`` the curvature part of
    the loss Hessian, ``∇²L − JᵀJ``; paper C, :ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    c : Tensor, (E, n)
        The weights of the inputs' Hessians, held fixed.
    v : list of Tensor
        A vector shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    list of Tensor
        ``(Σ_i c_i ∇²f_i(θ)) v``, shaped like ``params``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, _ = _check(params, X=X, c=c, v=v)
    if c.shape != (E, X.shape[-2]):
        raise ValueError(f"c must have shape {(E, X.shape[-2])}, got {tuple(c.shape)}")
    c = c.detach()
    return _hvp(lambda p: (_forward(p, X, net)[0] * c).sum(), params, v)


BASIS_BYTES = 2**31
"""The largest Krylov basis (bytes, all members) that :func:`output_hessian_norm` stores to get its Ritz vector;
beyond it the vector is rebuilt by a second pass of the three-term recurrence, holding three vectors per member."""


def _operator_norm(params: Params, hvp, iters: int, generator, history: bool = False, vector: bool = False):
    """Lanczos (:func:`companion.curvature.lanczos`) on the symmetric operator ``hvp`` acting on parameter lists;
    returns the :class:`~companion.curvature.LanczosResult`. The three-term recurrence without reorthogonalisation;
    where the Ritz vector is wanted and the recurrence's vectors fit in :data:`BASIS_BYTES`, they are kept, and the
    second pass that would rebuild the vector (``iters`` more Hessian-vector products) is saved — the same vector
    either way."""
    validation.positive_int("iters", iters)
    shapes = [tuple(v.shape[1:]) for v in params]
    v0 = curvature.flatten([randn(v.shape, generator=generator, dtype=v.dtype, device=v.device) for v in params])
    E, P = v0.shape
    stored = vector and E * min(iters, P) * P * v0.element_size() <= BASIS_BYTES

    def mv(q: Tensor) -> Tensor:
        return curvature.flatten(hvp(curvature.unflatten(q, shapes)))

    return curvature.lanczos(
        mv,
        E,
        P,
        iters,
        v0=v0,
        reorthogonalize=False,
        keep_basis=stored,
        history=True,
        vector=vector,
        dtype=v0.dtype,
        device=v0.device,
        generator=generator,
    )


def output_hessian_norm(
    params: Params,
    x: Tensor,
    net: Net = Net(),
    *,
    iters: int = 30,
    generator: torch.Generator | None = None,
    return_history: bool = False,
    return_vector: bool = False,
):
    """Spectral norm ``‖∇²f(x; θ)‖`` per member, ``(E,)``, by Lanczos on output HVPs (paper C: ``≤ T M (1+D)/√m``
    or ``C M (1+D)/√m``; :ref:`ch-parameter-ball`). ``x``: ``(d,)``. Returns the norm, then (if asked) the running estimate
    ``(E, iters)`` (to show convergence) and the unit top eigenvector (a parameter list). The iteration is
    :func:`companion.curvature.lanczos` without reorthogonalisation (three vectors of length ``P`` per member), except
    that the recurrence's vectors are kept for the eigenvector where they fit in :data:`BASIS_BYTES`; the products are
    :func:`output_hvp`'s default (the R-operator).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    x : Tensor, (d,) or (E, d)
        One input, shared or one per member.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).
    return_history : bool
        Also return the running estimate.
    return_vector : bool
        Also return the top eigenvector.

    Returns
    -------
    norm : Tensor, (E,)
        ``‖∇²f(x; θ)‖``; alone unless more is asked for.
    history : Tensor, (E, iters)
        The running estimate (with ``return_history``).
    vector : list of Tensor
        The unit top eigenvector, shaped like ``params`` (with ``return_vector``).

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, d, _ = _check(params, x=x)
    xx = _one_input(x, d, E)
    res = _operator_norm(params, _output_hvp_fn(params, xx, net), iters, generator, vector=return_vector)
    hist = torch.maximum(res.low.abs(), res.high.abs())
    out = (hist[:, -1],) + ((hist,) if return_history else ())
    if return_vector:
        out += (curvature.unflatten(res.vector, [tuple(v.shape[1:]) for v in params]),)
    return out if len(out) > 1 else out[0]


def output_hessian_norms(
    params: Params, X: Tensor, net: Net = Net(), *, iters: int = 30, generator: torch.Generator | None = None
) -> Tensor:
    """``‖∇²f_i(θ)‖`` for every member and input, ``(E, n)``, in one batched Lanczos run over ``E·n`` copies of the
    parameters (memory ``E·n`` parameter vectors times four). Paper C's ``max_i ‖∇²f_i‖`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).

    Returns
    -------
    Tensor, (E, n)
        ``‖∇²f_i(θ)‖``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, _ = _check(params, X=X)
    n = X.shape[-2]
    rep = [v.repeat_interleave(n, 0) for v in params]  # member e, input i -> row e n + i
    Xr = X.expand(E, *X.shape[-2:]).reshape(E * n, 1, -1)  # (E n, 1, d)
    res = _operator_norm(rep, _output_hvp_fn(rep, Xr, net), iters, generator)
    return res.norm.reshape(E, n)


def loss_hessian_norm(
    params: Params, X: Tensor, y: Tensor, net: Net = Net(), *, iters: int = 30, generator: torch.Generator | None = None
) -> Tensor:
    """``‖∇²L(θ)‖`` per member, ``(E,)``, ``L = ½ Σ_i (f_i − y_i)²``, by Lanczos on :func:`loss_hvp`'s product
    (computed by the R-operator, ``_rop_hvp_fn``, equal up to rounding; tested); paper C's loss-Hessian bound
    ``‖∇²L‖ ≤ ‖J‖² + √n ‖r‖ max_i ‖∇²f_i‖`` (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    y : Tensor, (n,) or (E, n)
        The targets.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).

    Returns
    -------
    Tensor, (E,)
        ``‖∇²L(θ)‖``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, _ = _check(params, X=X, y=y)
    r = (forward(params, X, net) - y).detach().expand(E, X.shape[-2]).contiguous()  # the residual, held fixed
    res = _operator_norm(params, _rop_hvp_fn(params, X, net, r, gauss_newton=True), iters, generator)
    return res.norm


def weighted_output_hessian_norm(
    params: Params, X: Tensor, c: Tensor, net: Net = Net(), *, iters: int = 30, generator: torch.Generator | None = None
) -> Tensor:
    """``‖Σ_i c_i ∇²f_i(θ)‖`` per member, ``(E,)``, by Lanczos on :func:`weighted_output_hvp`'s product (computed
    by the R-operator, ``_rop_hvp_fn``, equal up to rounding; tested); ``c``: ``(E, n)``
    (paper C, :ref:`ch-parameter-ball`: with ``c = r`` the term that the loss-Hessian bound controls by ``√n ‖r‖
    max_i ‖∇²f_i‖``).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    c : Tensor, (E, n)
        The weights of the inputs' Hessians, held fixed.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).

    Returns
    -------
    Tensor, (E,)
        ``‖Σ_i c_i ∇²f_i(θ)‖``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, _ = _check(params, X=X, c=c)
    if c.shape != (E, X.shape[-2]):
        raise ValueError(f"c must have shape {(E, X.shape[-2])}, got {tuple(c.shape)}")
    c = c.detach()
    res = _operator_norm(params, _rop_hvp_fn(params, X, net, c), iters, generator)
    return res.norm


# ----------------------------------------------------------------------------------------- Taylor remainder
def jvp_outputs(params: Params, X: Tensor, h: Params, net: Net = Net()) -> Tensor:
    """``Df(θ) h`` for every input, shape ``(E, n)`` (:ref:`ch-parameter-ball`), from the rank-one structure of the output
    gradients: ``⟨∂f_i/∂W_h, ΔW_h⟩ = u_{h,i}ᵀ ΔW_h x_{h−1,i}`` and ``⟨∂f_i/∂a, Δa⟩ = Δaᵀ x_{H,i}`` (one backward
    pass; equal to ``torch.func.jvp``, tested, which on a CPU carries a large per-call overhead).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    h : list of Tensor
        A direction shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E, n)
        ``Df(θ) h``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _, _, _, H = _check(params, X=X, h=h)
    us, xs, _ = _preactivation_grads(params, X, net)
    out = (xs[H] * h[-1].unsqueeze(-2)).sum(-1)
    for k in range(1, H + 1):
        out = out + ((xs[k - 1] @ h[k - 1].transpose(-1, -2)) * us[k - 1]).sum(-1)
    return out


def taylor_remainder(params: Params, X: Tensor, h: Params, net: Net = Net()) -> Tensor:
    """``|f_i(θ + h) − f_i(θ) − Df_i(θ) h|`` per member and input, shape ``(E, n)`` (paper C's Taylor bound
    ``≤ T M (1+D) ‖h‖² / (2√m)``; :ref:`ch-parameter-ball`). ``Df(θ) h`` by :func:`jvp_outputs`.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    h : list of Tensor
        A direction shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    Tensor, (E, n)
        ``|f_i(θ + h) − f_i(θ) − Df_i(θ) h|``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _check(params, X=X, h=h)
    f0 = _forward(params, X, net)[0]
    f1 = _forward(paramlist.add(params, h), X, net)[0]
    return (f1 - f0 - jvp_outputs(params, X, h, net)).abs()


# ------------------------------------------------------------------- features and backward vectors in the ball
def feature_drift(params: Params, X: Tensor, h: Params, net: Net = Net()) -> dict:
    """How far the forward pass moves from ``θ`` to ``θ + h`` (paper C, step 2.1; :ref:`ch-parameter-ball`): per member and
    layer, ``"x"``: ``e_h = max_i ‖x_h(θ + h) − x_h(θ)‖`` (bound ``T D/√m`` fully connected, ``C D/√m``
    residual) and ``"z"``: ``max_i ‖z_h(θ + h) − z_h(θ)‖`` (bound ``T D`` or ``C D``: no ``1/√m``). Each
    ``(E, H)``, column ``h − 1`` for layer ``h``.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    h : list of Tensor
        A direction shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    dict of str to Tensor, each (E, H)
        ``"x"`` and ``"z"``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _check(params, X=X, h=h)
    _, xs0, zs0 = _forward(params, X, net)
    _, xs1, zs1 = _forward(paramlist.add(params, h), X, net)
    ex = torch.stack([(a - b).norm(dim=-1).max(-1).values for a, b in zip(xs1[1:], xs0[1:])], -1)
    ez = torch.stack([(a - b).norm(dim=-1).max(-1).values for a, b in zip(zs1, zs0)], -1)
    return {"x": ex, "z": ez}


def backward_drift(params: Params, X: Tensor, h: Params, net: Net = Net()) -> dict:
    """The backward vectors ``b_h = ∂f/∂x_h`` inside the ball (paper C, step 3; :ref:`ch-parameter-ball`), per member and layer
    (each ``(E, H)``, column ``h − 1`` for layer ``h``; ``b_H = a``):

    * ``"drift"``: ``max_i ‖b_h(θ + h) − b_h(θ)‖₂`` (the proof's ``‖d_h‖ ≤ T M D`` or ``C M D``: no ``1/√m``);
      ``"mean_drift"``: the same averaged over the inputs (a less noisy statistic under the same bound);
    * ``"sup"``: ``max_i ‖b_h(θ + h)‖_∞`` (``≤ T M (1 + D)`` or ``C M (1 + D)``);
    * ``"l2"``: ``max_i ‖b_h(θ + h)‖₂`` (the crude ``≤ T √m`` or ``C √m``); ``"l2_rms"``: the root mean square of
      ``‖b_h(θ + h)‖₂`` over the inputs (the same bound for every input, without the maximum's upward fluctuation).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    h : list of Tensor
        A direction shaped like ``params``.
    net : Net
        The architecture, activation and scalings.

    Returns
    -------
    dict of str to Tensor, each (E, H)
        ``"drift"``, ``"mean_drift"``, ``"sup"``, ``"l2"`` and ``"l2_rms"``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    _check(params, X=X, h=h)
    b0 = backward_vectors(params, X, net)
    b1 = backward_vectors(paramlist.add(params, h), X, net)
    return {
        "drift": torch.stack([(a - b).norm(dim=-1).max(-1).values for a, b in zip(b1, b0)], -1),
        "mean_drift": torch.stack([(a - b).norm(dim=-1).mean(-1) for a, b in zip(b1, b0)], -1),
        "sup": torch.stack([a.abs().flatten(1).max(1).values for a in b1], -1),
        "l2": torch.stack([a.norm(dim=-1).max(-1).values for a in b1], -1),
        "l2_rms": torch.stack([(a * a).sum(-1).mean(-1).sqrt() for a in b1], -1),
    }


def _fork(generator: torch.Generator | None) -> torch.Generator | None:
    """A generator in ``generator``'s current state (``None`` stays ``None``): draws from it leave ``generator``'s
    stream untouched."""
    if generator is None:
        return None
    fork = torch.Generator(device=generator.device)
    fork.set_state(generator.get_state())
    return fork


def _convergence(history: Tensor) -> Tensor:
    """The last column of a running Lanczos estimate ``(…, k)`` over its column after ``3k/4`` steps (1 when
    converged)."""
    return history[..., -1] / history[..., max((3 * history.shape[-1]) // 4 - 1, 0)]


def _top_singular_values(mv, B: int, m: int, iters: int, generator, dtype, device) -> tuple[Tensor, Tensor]:
    """Top singular values ``(B,)`` of ``B`` linear maps ``A_b`` from Lanczos on ``mv = A Aᵀ`` (``(B, m) -> (B, m)``,
    full reorthogonalisation), and their convergence ratios ``(B,)`` (:func:`_convergence`)."""
    res = curvature.lanczos(mv, B, m, iters, history=True, generator=generator, dtype=dtype, device=device)
    est = res.high.clamp_min(0).sqrt()
    return est[:, -1], _convergence(est)


def _sample_operator_norms(fn, taps: dict, weight: dict, iters: int, generator) -> tuple[Tensor, Tensor]:
    """Top singular value, per member and input, of the per-sample linear map ``t ↦ d fn(taps)[t]`` from the taps
    (a dict of ``(E, n, m)`` zeros; the domain's squared norm of tap ``l`` weighted by ``1/weight[l]``, ``(E, n, 1)``)
    to ``fn``'s output ``(E, n, m)``: Lanczos (:func:`companion.curvature.lanczos`, full reorthogonalisation, one
    ``m × m`` operator ``J diag(weight) Jᵀ`` per member and input; one reverse and one forward pass each). Returns the
    norms and the ratio of the last estimate to that after ``3 iters / 4`` steps, each ``(E, n)``."""
    out, pull = torch.func.vjp(fn, taps)
    E, n, m = out.shape

    def mv(w: Tensor) -> Tensor:
        (g,) = pull(w.reshape(E, n, m))
        return jvp(fn, (taps,), ({k: weight[k] * g[k] for k in g},))[1].reshape(E * n, m)

    norm, conv = _top_singular_values(mv, E * n, m, iters, generator, out.dtype, out.device)
    return norm.reshape(E, n), conv.reshape(E, n)


def feature_derivative_norms(
    params: Params, X: Tensor, net: Net = Net(), *, iters: int = 20, generator: torch.Generator | None = None
) -> dict:
    """Paper C's feature derivatives (step 3.1; :ref:`ch-parameter-ball`): per member and layer, the largest change of
    the features and pre-activations along a unit parameter direction, ``sup_{‖v‖ = 1} ‖Dx_h[v]‖`` (bound ``T/√m``
    fully connected, ``C/√m`` residual) and ``sup_{‖v‖ = 1} ‖Dz_h[v]‖`` (bound ``T`` or ``C``), each the operator norm of
    a per-input Jacobian, maximised over the inputs.

    Nothing is searched: ``∂x_h/∂W_l [V] = (∂x_h/∂z_l) V x_{l−1}``, so ``J Jᵀ = Σ_{l ≤ h} ‖x_{l−1}‖² (∂x_h/∂z_l)
    (∂x_h/∂z_l)ᵀ``, an ``m × m`` operator per input applied by one backward and one forward pass through the
    pre-activations (``a`` does not enter ``x_h``), whose top eigenvalue Lanczos finds.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps per layer (at most ``m`` are run; with ``m`` steps the norms are exact).
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors.

    Returns
    -------
    dict of str to Tensor
        ``"x"`` and ``"z"``, each ``(E, H)`` (column ``h − 1`` for layer ``h``: ``max_i ‖∂x_h(x_i)/∂θ‖_op``, likewise
        ``z_h``); ``"conv"``, ``(E,)``: the largest ratio of a final Lanczos estimate to the estimate after
        ``3 iters / 4`` steps (1 when converged).

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.

    Examples
    --------
    >>> import torch
    >>> from companion import widenet as wn
    >>> g = torch.Generator().manual_seed(0)
    >>> p = wn.init_params(3, 16, 2, 2, generator=g, dtype=torch.float64)
    >>> X = wn.sphere_inputs(4, 3, generator=g, dtype=torch.float64)
    >>> out = wn.feature_derivative_norms(p, X, iters=16, generator=g)
    >>> out["x"].shape, bool((out["x"] < out["z"]).all())
    (torch.Size([2, 2]), True)
    """
    E, m, _, H = _check(params, X=X)
    validation.positive_int("iters", iters)
    n = X.shape[-2]
    taps = {h: torch.zeros(E, n, m, dtype=X.dtype, device=X.device) for h in range(1, H + 1)}
    _, xs, _ = _forward(params, X, net)
    sq = {h: xs[h - 1].square().sum(-1, keepdim=True) for h in range(1, H + 1)}  # ‖x_{h−1}‖², (E, n, 1)
    norms, conv = {"x": [], "z": []}, []
    for h in range(1, H + 1):
        below = {l: taps[l] for l in range(1, h + 1)}  # x_h and z_h depend on W_1 … W_h only
        for key, pick in (("x", lambda r, h=h: r[1][h]), ("z", lambda r, h=h: r[2][h - 1])):
            v, c = _sample_operator_norms(
                lambda t, h=h, pick=pick: pick(_forward(params, X, net, t, upto=h)), below, sq, iters, generator
            )
            norms[key].append(v.max(-1).values)
            conv.append(c.max(-1).values)
    return {
        "x": torch.stack(norms["x"], -1),
        "z": torch.stack(norms["z"], -1),
        "conv": torch.stack(conv, -1).max(-1).values,
    }


def layer_product_norms(
    params: Params, X: Tensor, net: Net = Net(), *, iters: int = 20, generator: torch.Generator | None = None
) -> dict:
    """Paper C's products of layer Jacobians (step 1.1; :ref:`ch-parameter-ball`): per member,
    ``max_i ‖P_H ⋯ P_h(x_i)‖`` for ``h = 2 … H``, with ``P_h = ∂x_h/∂x_{h−1}`` (``(s_h/√m) diag(σ'(z_h)) W_h``
    fully connected, ``I`` plus that residual). The bound is ``A^H`` (fully connected) or ``Π_h(1 + C/H) ≤ e^C``
    (residual). The products are formed from the top (``Q_h = Q_{h+1} P_h``, one ``m × m`` matrix per member and
    input, at most :data:`BASIS_BYTES` in all) and each norm is Lanczos on ``Q Qᵀ``.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``, ``H ≥ 2``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps per product (at most ``m`` are run; with ``m`` steps the norms are exact).
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors.

    Returns
    -------
    dict of str to Tensor
        ``"norm"``, ``(E, H − 1)`` (column ``h − 2`` for the product ``P_H ⋯ P_h``); ``"conv"``, ``(E,)``: the largest
        ratio of a final Lanczos estimate to the estimate after ``3 iters / 4`` steps.

    Raises
    ------
    ValueError
        When ``params`` is malformed or has ``H < 2``, the inputs do not match it, a tensor lies on another device or
        dtype, or the ``E n`` products would exceed :data:`BASIS_BYTES`.

    Examples
    --------
    >>> import torch
    >>> from companion import widenet as wn
    >>> g = torch.Generator().manual_seed(0)
    >>> p = wn.init_params(3, 16, 3, 2, generator=g, dtype=torch.float64)
    >>> X = wn.sphere_inputs(4, 3, generator=g, dtype=torch.float64)
    >>> wn.layer_product_norms(p, X, wn.Net("res"), iters=16, generator=g)["norm"].shape
    torch.Size([2, 2])
    """
    E, m, _, H = _check(params, X=X)
    validation.positive_int("iters", iters)
    if H < 2:
        raise ValueError(f"layer products need depth H >= 2, got H = {H}")
    n = X.shape[-2]
    if E * n * m * m * X.element_size() > BASIS_BYTES:
        raise ValueError(f"{E * n} products of size {m} x {m} exceed BASIS_BYTES = {BASIS_BYTES} bytes")
    _, _, zs = _forward(params, X, net)
    act, s = activations.get(net.act), net.scales(H)
    eye = torch.eye(m, dtype=X.dtype, device=X.device)
    Q, norms, conv = None, [], []
    for h in range(H, 1, -1):
        P = (s[h - 1] / math.sqrt(m)) * act.d1(zs[h - 1]).unsqueeze(-1) * params[h - 1].unsqueeze(1)  # (E, n, m, m)
        P = P if net.arch == "fc" else eye + P
        Q = P if Q is None else Q @ P
        Qf = Q.reshape(E * n, m, m)
        v, c = _top_singular_values(
            lambda w, Qf=Qf: (Qf @ (w.unsqueeze(-2) @ Qf).transpose(-1, -2)).squeeze(-1),  # Q Qᵀ w
            E * n,
            m,
            iters,
            generator,
            X.dtype,
            X.device,
        )
        norms.append(v.reshape(E, n).max(-1).values)
        conv.append(c.reshape(E, n).max(-1).values)
    return {"norm": torch.stack(norms[::-1], -1), "conv": torch.stack(conv, -1).max(-1).values}


# ------------------------------------------------------------------------------ one point of a sweep
def ball_measurements(
    params: Params,
    X: Tensor,
    D: float,
    net: Net = Net(),
    *,
    iters: int = 12,
    generator: torch.Generator | None = None,
    ball_hessian: bool = False,
    hessian: bool = True,
    taylor: bool = True,
    entry: bool = True,
    entry_refine: int = ENTRY_REFINE,
    derivatives: bool = False,
    products: bool = False,
    back_gradients: bool = False,
) -> dict:
    """Everything :ref:`ch-parameter-ball` measures at one width/depth/radius, per member (each value ``(E,)``
    unless said):

    * ``gram_entry``: ``max_{i ≤ j} |ΔG_H,ij|`` with every entry ascended directly (:func:`gram_entry_ascent`,
      ``entry_refine`` projected-gradient steps); ``gram_entry_first``: the same after the first-order step alone;
      ``gram_entry_linear``: the first-order value ``D max_{i ≤ j} ‖∇G_H,ij(θ0)‖`` itself (no step taken);
      ``gram_entry_rms``: the root mean square of ``D ‖∇G_H,ij(θ0)‖`` over the entries ``i ≤ j``;
      ``gram_entry_offdiag``: the mean over ``i < j`` of each entry's own largest drift (all five only with
      ``entry``);
    * ``gram_adv_entry``/``gram_adv_op``: ``‖G_H(θ0 + h) − G_H(θ0)‖`` (entrywise max / operator norm) along the
      steepest-ascent direction of :func:`gram_ascent_direction` with ``‖h‖ = D``; ``gram_gd_entry``/``gram_gd_op``
      along a gradient-span direction (:func:`gradient_direction`), ``gram_rand_entry``/``gram_rand_op`` along a
      random one;
    * ``hess``: ``‖∇²f(x_1; θ0)‖`` (Lanczos, ``iters`` steps); ``hess_ball`` (only with ``ball_hessian``): the
      same at ``θ0 + h_adv``; ``hess_conv``: the Lanczos estimate after ``iters`` steps over that after
      ``3 iters / 4`` steps;
    * ``taylor``: ``max(|R(θ0; ±D v)|)`` for the top Hessian eigenvector ``v`` of ``f(x_1)``, where
      ``R(θ; h) = f(θ + h) − f(θ) − Df(θ) h``; ``taylor_rand``: along a random direction of norm ``D``;
    * ``feat_x``/``feat_z``: ``max_h e_h`` and ``max_h ‖Δz_h‖`` along the gradient-span direction
      (:func:`feature_drift`); ``back_drift``: ``max_{h<H}`` of the input-averaged ``‖Δb_h‖₂``,
      ``back_sup``: ``max_h ‖b_h(θ0+h)‖_∞`` and
      ``back_l2``: ``max_h ‖b_h(θ0+h)‖₂`` along it (:func:`backward_drift`), ``back_l2_rms``: the root mean square of
      ``‖b_h(θ0+h)‖₂`` over the inputs and the layers; ``resid``: ``‖f(θ0+h) − f(θ0)‖/√n``
      along it (the residual's change, paper C's ``‖r‖ ≤ ‖r_0‖ + T√n D``);
    * with ``derivatives``: ``deriv_x``/``deriv_z``: ``max_h sup_{‖v‖=1} ‖Dx_h[v]‖`` and the same for ``z_h``, at
      ``θ0 + h`` along the gradient-span direction (:func:`feature_derivative_norms`), ``deriv_x_layers``/
      ``deriv_z_layers`` the same before the maximum over the layers, ``(E, H)``, ``deriv_conv`` their Lanczos
      convergence ratio; with ``products`` (and ``H ≥ 2``): ``prod``: ``max_{h ≥ 2} ‖P_H ⋯ P_h‖`` there
      (:func:`layer_product_norms`), ``prod_conv``; with ``back_gradients``: ``back_grad``:
      ``max_{h,k} ‖∇_θ b_{h,k}(x_1; θ0)‖``, the first-order rate at which the ball moves ``‖b_h‖_∞``
      (:func:`backward_gradient_norms` at the first input, as for ``hess``);
    * ``M``: ``max_h ‖b_h(θ0)‖_∞`` (:func:`backward_sup_norm`); ``J``: ``‖J(θ0)‖/√n``; ``grad_max``:
      ``max_i ‖∇f_i(θ0)‖`` (the square root of the tangent kernel's largest diagonal entry); ``G0``: ``max |G_H(θ0)|``.

    ``hessian=False`` skips the Lanczos runs (no ``hess``, ``hess_conv``, ``hess_ball``, ``taylor``);
    ``taylor=False`` skips the Ritz vector and the Taylor remainders along it (``taylor``, ``taylor_rand``), which
    halves the Lanczos work (the vector is rebuilt by a second pass of the recurrence).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    D : float
        The ball's radius ``≥ 0``.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the directions and the Lanczos start vectors.
    ball_hessian : bool
        Also measure ``hess_ball``.
    hessian : bool
        Measure the output Hessian (``hess``, ``hess_conv``).
    taylor : bool
        Measure the Taylor remainders.
    entry : bool
        Measure ``gram_entry``, ``gram_entry_first``, ``gram_entry_linear``, ``gram_entry_rms`` and
        ``gram_entry_offdiag``.
    entry_refine : int
        The projected-gradient steps of :func:`gram_entry_ascent` (its ``refine``).
    derivatives : bool
        Measure ``deriv_x``, ``deriv_z``, their per-layer values and ``deriv_conv`` (``2H`` Lanczos runs).
    products : bool
        Measure ``prod`` and ``prod_conv`` (``H − 1`` dense products per input).
    back_gradients : bool
        Measure ``back_grad`` (``H m`` forward-mode passes; no random draw).

    Returns
    -------
    dict of str to Tensor, each (E,) unless said
        The values above, by name.

    Raises
    ------
    ValueError
        When ``params`` is malformed, ``X`` does not match it, or ``D`` is negative.
    """
    E, _, _, H = _check(params, X=X)
    n = X.shape[-2]
    out, fork = {}, _fork(generator)
    G0 = last_layer_gram(params, X, net)
    h_adv = gram_ascent_direction(params, X, D, net)
    coef = randn((E, n), generator=generator, dtype=X.dtype, device=X.device)
    dirs = {
        "adv": h_adv,
        "gd": gradient_direction(params, X, D, coef, net),
        "rand": random_direction(params, D, generator=generator),
    }
    for name, h in dirs.items():
        ent, op = gram_drift(last_layer_gram(paramlist.add(params, h), X, net), G0)
        out[f"gram_{name}_entry"], out[f"gram_{name}_op"] = ent, op
    if entry:
        found = gram_entry_ascent(params, X, D, net, refine=entry_refine)
        out["gram_entry"], out["gram_entry_first"] = found["entry"], found["steps"][0]
        out["gram_entry_linear"] = found["first_order"]
        out["gram_entry_rms"] = found["first_order_rms"]
        out["gram_entry_offdiag"] = found["offdiag_mean"]
    if hessian:
        res = output_hessian_norm(
            params, X[..., 0, :], net, iters=iters, generator=generator, return_history=True, return_vector=taylor
        )
        hn, hist = res[0], res[1]
        out["hess"], out["hess_conv"] = hn, _convergence(hist)
        if ball_hessian:
            out["hess_ball"] = output_hessian_norm(
                paramlist.add(params, h_adv), X[..., 0, :], net, iters=iters, generator=generator
            )
        if taylor:
            hv = paramlist.scale_to(res[2], D)
            x1 = X[..., :1, :]
            out["taylor"] = torch.maximum(
                taylor_remainder(params, x1, hv, net)[:, 0],
                taylor_remainder(params, x1, [-t for t in hv], net)[:, 0],
            )
            out["taylor_rand"] = taylor_remainder(params, x1, dirs["rand"], net)[:, 0]
    fd = feature_drift(params, X, dirs["gd"], net)
    out["feat_x"], out["feat_z"] = fd["x"].max(1).values, fd["z"].max(1).values
    # these Lanczos runs start from the generator's copy taken on entry: no other draw moves, and no flag moves them
    at = paramlist.add(params, dirs["gd"]) if derivatives or products else None
    if derivatives:
        fdn = feature_derivative_norms(at, X, net, iters=iters, generator=fork)
        out["deriv_x"], out["deriv_z"] = fdn["x"].max(1).values, fdn["z"].max(1).values
        out["deriv_x_layers"], out["deriv_z_layers"] = fdn["x"], fdn["z"]
        out["deriv_conv"] = fdn["conv"]
    if products and H > 1:
        lp = layer_product_norms(at, X, net, iters=iters, generator=fork)
        out["prod"], out["prod_conv"] = lp["norm"].max(1).values, lp["conv"]
    if back_gradients:
        out["back_grad"] = backward_gradient_norms(params, X[..., :1, :], net)["max"].max(1).values
    bd = backward_drift(params, X, dirs["gd"], net)
    out["back_drift"] = bd["mean_drift"][:, :-1].max(1).values if H > 1 else bd["mean_drift"][:, 0]
    out["back_sup"], out["back_l2"] = bd["sup"].max(1).values, bd["l2"].max(1).values
    out["back_l2_rms"] = bd["l2_rms"].pow(2).mean(1).sqrt()  # over the inputs and the layers
    moved = _forward(paramlist.add(params, dirs["gd"]), X, net)[0]
    out["resid"] = (moved - _forward(params, X, net)[0]).norm(dim=1) / math.sqrt(n)
    out["M"] = backward_sup_norm(params, X, net)
    out["J"] = jacobian_norm(params, X, net) / math.sqrt(n)
    out["grad_max"] = ntk(params, X, net).diagonal(dim1=-2, dim2=-1).max(-1).values.sqrt()
    out["G0"] = G0.abs().flatten(1).max(1).values
    return {k: t.detach() for k, t in out.items()}


def loss_hessian_measurements(
    params: Params, X: Tensor, y: Tensor, D: float, net: Net = Net(), *, iters: int = 20, generator: torch.Generator | None = None
) -> dict:
    """Paper C's loss-Hessian and residual bounds at ``θ = θ0 + h``, ``h = −D Jᵀr0/‖Jᵀr0‖`` (the direction of a
    gradient-descent step on ``L = ½ Σ_i (f_i − y_i)²``), per member, each ``(E,)`` (:ref:`ch-parameter-ball`):

    * ``hess_loss``: ``‖∇²L(θ)‖``; ``J2``: ``‖J(θ)‖²``; ``curv``: ``‖Σ_i r_i ∇²f_i(θ)‖``; ``max_hf``:
      ``max_i ‖∇²f_i(θ)‖`` (Lanczos, ``iters`` steps each; :func:`output_hessian_norms`); ``bound``:
      ``‖J‖² + √n ‖r‖ max_i ‖∇²f_i‖``, the paper's bound with measured factors;
    * ``r``: ``‖r(θ)‖``, ``r0``: ``‖r(θ0)‖``; ``M``: ``M(θ)``;
    * the residual bound ``‖r‖ ≤ ‖r0‖ + D sup_t ‖J(θ_t)‖ ≤ ‖r0‖ + T√n D`` in its worst direction, the opposite one
      ``θ0 − h`` (to first order the steepest increase of ``‖r‖``): ``r_up``: ``‖r(θ0 − h)‖`` and ``Jmax``:
      ``max_t ‖J(θ0 − t h)‖`` over ``t ∈ {0, ½, 1}``.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    y : Tensor, (n,) or (E, n)
        The targets.
    D : float
        The ball's radius ``≥ 0``.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).

    Returns
    -------
    dict of str to Tensor, each (E,)
        The values above, by name.

    Raises
    ------
    ValueError
        When ``params`` is malformed, ``X`` or ``y`` does not match it, or ``D`` is negative.
    """
    E, _, _, _ = _check(params, X=X, y=y)
    n = X.shape[-2]
    validation.nonnegative("D", D)
    r0 = (forward(params, X, net) - y).detach()
    h = gradient_direction(params, X, D, -r0.expand(E, n).contiguous(), net)
    theta = paramlist.add(params, h)
    r = (forward(theta, X, net) - y).detach().expand(E, n)
    out = {
        "hess_loss": loss_hessian_norm(theta, X, y, net, iters=iters, generator=generator),
        "J2": jacobian_norm(theta, X, net) ** 2,
        "curv": weighted_output_hessian_norm(theta, X, r.contiguous(), net, iters=iters, generator=generator),
        "max_hf": output_hessian_norms(theta, X, net, iters=iters, generator=generator).max(1).values,
        "r": r.norm(dim=1),
        "r0": r0.expand(E, n).norm(dim=1),
        "r_up": (forward(paramlist.add(params, h, -1.0), X, net) - y).detach().norm(dim=-1).expand(E),
        "Jmax": torch.stack([jacobian_norm(paramlist.add(params, h, -t), X, net) for t in (0.0, 0.5, 1.0)], 0).max(0).values,
        "M": backward_sup_norm(theta, X, net),
    }
    out["bound"] = out["J2"] + math.sqrt(n) * out["r"] * out["max_hf"]
    return {k: t.detach() for k, t in out.items()}


def radius_measurements(
    params: Params,
    X: Tensor,
    radii,
    net: Net = Net(),
    *,
    iters: int = 20,
    generator: torch.Generator | None = None,
) -> dict:
    """:ref:`ch-parameter-ball`'s radius sweep at one width, per radius and member, each value ``(R, E)`` for ``R = len(radii)``
    (paper C: the Gram, pre-activation and backward drifts are ``O(D)``, the Taylor remainder ``O(D²)``):

    * ``gram_adv_entry``: ``max |G_H(θ0 + D u_adv) − G_H(θ0)|`` along the unit steepest-ascent direction ``u_adv``
      of :func:`gram_ascent_direction`;
    * ``feat_z``: ``max_h ‖Δz_h‖`` and ``back_drift``: ``max_{h<H}`` of the input-averaged ``‖Δb_h‖₂`` along the
      unit gradient-span direction of :func:`gradient_direction` (coefficients ``N(0, 1)`` from ``generator``);
    * ``taylor``: ``max(|R(θ0; ±D v)|)`` for the unit top eigenvector ``v`` of ``∇²f(x_1; θ0)``;

    and ``hess``, ``hess_conv`` (``(E,)``, as in :func:`ball_measurements`). The directions do not depend on ``D``:
    they and the Lanczos run are computed once, and every radius only moves along them, so the exponents in ``D``
    are those of one fixed curve per member.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared by the members or one set per member.
    radii : sequence of float
        The radii ``D``, ``R`` of them.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the directions and the Lanczos start vectors.

    Returns
    -------
    dict of str to Tensor
        ``(R, E)`` values by name; ``hess`` and ``hess_conv`` ``(E,)``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, H = _check(params, X=X)
    radii = [float(D) for D in radii]
    if not radii or any(not (D > 0) for D in radii):
        raise ValueError(f"radii must be positive, got {radii}")
    n = X.shape[-2]
    G0 = last_layer_gram(params, X, net)
    u_adv = gram_ascent_direction(params, X, 1.0, net)
    coef = randn((E, n), generator=generator, dtype=X.dtype, device=X.device)
    u_gd = gradient_direction(params, X, 1.0, coef, net)
    hn, hist, v = output_hessian_norm(
        params, X[..., 0, :], net, iters=iters, generator=generator, return_history=True, return_vector=True
    )
    x1 = X[..., :1, :]
    keys = ("gram_adv_entry", "feat_z", "back_drift", "taylor")
    out = {k: [] for k in keys}
    for D in radii:
        out["gram_adv_entry"].append(gram_drift(last_layer_gram(paramlist.add(params, u_adv, D), X, net), G0)[0])
        h = [D * t for t in u_gd]
        out["feat_z"].append(feature_drift(params, X, h, net)["z"].max(1).values)
        md = backward_drift(params, X, h, net)["mean_drift"]
        out["back_drift"].append(md[:, :-1].max(1).values if H > 1 else md[:, 0])
        hv = [D * t for t in v]
        out["taylor"].append(
            torch.maximum(
                taylor_remainder(params, x1, hv, net)[:, 0],
                taylor_remainder(params, x1, [-t for t in hv], net)[:, 0],
            )
        )
    res = {k: torch.stack(t, 0).detach() for k, t in out.items()}
    res["hess"], res["hess_conv"] = hn.detach(), _convergence(hist).detach()
    return res


def radius_sweep(
    m: int, H: int, radii, *, n: int, d: int, members: int, net: Net = Net(), data_seed: int, init_seed: int, iters: int = 20
) -> dict:
    """:func:`radius_measurements` on the inputs and initialisation of :func:`sweep_point` (same seeds, same
    draws), as numpy arrays ``(R, members)`` (``hess``, ``hess_conv``: ``(members,)``). Paper C (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    m : int
        The width.
    H : int
        The depth.
    radii : sequence of float
        The radii ``D``, ``R`` of them.
    n : int
        Inputs per member.
    d : int
        The input dimension.
    members : int
        The ensemble size.
    net : Net
        The architecture, activation and scalings.
    data_seed : int
        The seed of the inputs.
    init_seed : int
        The seed of the initialisation, the directions and Lanczos.
    iters : int
        Lanczos steps.

    Returns
    -------
    dict of str to ndarray
        ``(R, members)`` values by name; ``hess`` and ``hess_conv`` ``(members,)``.
    """
    p, X, _, gi = _sweep_draws(m, H, n=n, d=d, members=members, data_seed=data_seed, init_seed=init_seed)
    out = radius_measurements(p, X, radii, net, iters=iters, generator=gi)
    return {k: v.cpu().numpy() for k, v in out.items()}


def sweep_point(
    m: int,
    H: int,
    D: float,
    *,
    n: int,
    d: int,
    members: int,
    net: Net = Net(),
    data_seed: int,
    init_seed: int,
    iters: int = 20,
    ball_hessian: bool = False,
    loss: bool = False,
    hessian: bool = True,
    taylor: bool = True,
    entry: bool = True,
    derivatives: bool = False,
    products: bool = False,
    back_gradients: bool = False,
) -> dict:
    """One point of :ref:`ch-parameter-ball`'s sweeps, as numpy arrays ``(members,)``: each member's own ``n`` inputs on the
    sphere (``X``: ``(members, n, d)``) and targets ``y ~ N(0, 1)`` from ``device.generator(data_seed)`` (the same
    for every point of a sweep that shares the seed, independent across members, so the spread across members
    includes the inputs' influence), the
    Gaussian initialisation of ``members`` networks of width ``m`` and depth ``H`` from
    ``device.generator(init_seed)``; then :func:`ball_measurements` at radius ``D`` and, with ``loss``, the
    values of :func:`loss_hessian_measurements` under the prefix ``loss_`` (``hessian``, ``taylor``: as in
    :func:`ball_measurements`). Paper C (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    m : int
        The width.
    H : int
        The depth.
    D : float
        The ball's radius ``≥ 0``.
    n : int
        Inputs per member.
    d : int
        The input dimension.
    members : int
        The ensemble size.
    net : Net
        The architecture, activation and scalings.
    data_seed : int
        The seed of the inputs and targets.
    init_seed : int
        The seed of the initialisation, the directions and Lanczos.
    iters : int
        Lanczos steps.
    ball_hessian : bool
        As in :func:`ball_measurements`.
    loss : bool
        Also the values of :func:`loss_hessian_measurements`.
    hessian : bool
        As in :func:`ball_measurements`.
    taylor : bool
        As in :func:`ball_measurements`.
    entry : bool
        As in :func:`ball_measurements`.
    derivatives : bool
        As in :func:`ball_measurements`.
    products : bool
        As in :func:`ball_measurements`.
    back_gradients : bool
        As in :func:`ball_measurements`.

    Returns
    -------
    dict of str to ndarray, each (members,)
        The measurements by name (``deriv_x_layers``, ``deriv_z_layers``: ``(members, H)``).
    """
    p, X, y, gi = _sweep_draws(m, H, n=n, d=d, members=members, data_seed=data_seed, init_seed=init_seed)
    out = ball_measurements(
        p,
        X,
        D,
        net,
        iters=iters,
        generator=gi,
        ball_hessian=ball_hessian,
        hessian=hessian,
        taylor=taylor,
        entry=entry,
        derivatives=derivatives,
        products=products,
        back_gradients=back_gradients,
    )
    if loss:
        out.update({f"loss_{k}": v for k, v in loss_hessian_measurements(p, X, y, D, net, iters=iters, generator=gi).items()})
    return {k: v.cpu().numpy() for k, v in out.items()}


def _sweep_draws(m: int, H: int, *, n: int, d: int, members: int, data_seed: int, init_seed: int):
    """``(params, X, y, generator)`` of one sweep point: the inputs and targets from ``data_seed``, then the
    initialisation from ``init_seed``, whose generator (returned) goes on to draw the point's directions."""
    g = _device.generator(data_seed)
    X = sphere_inputs(members * n, d, generator=g).reshape(members, n, d)
    y = randn((members, n), generator=g, dtype=X.dtype, device=X.device)
    gi = _device.generator(init_seed)
    p = init_params(d, m, H, members, generator=gi, dtype=X.dtype, device=X.device)
    return p, X, y, gi


def sweep_draws(m: int, H: int, *, n: int, d: int, members: int, data_seed: int, init_seed: int) -> tuple:
    """The network and data of one point of :ref:`ch-parameter-ball`'s sweeps, exactly as :func:`sweep_point` draws
    them (paper C): ``members`` initialisations of width ``m`` and depth ``H`` from ``device.generator(init_seed)``,
    each with its own ``n`` inputs on the sphere in ``ℝ^d`` and targets from ``device.generator(data_seed)``. A
    chapter measures something more at a sweep's point with it (e.g. a longer search than the sweep's).

    Parameters
    ----------
    m : int
        The width.
    H : int
        The depth.
    n : int
        Inputs per member.
    d : int
        The input dimension.
    members : int
        The ensemble size.
    data_seed : int
        The seed of the inputs and targets.
    init_seed : int
        The seed of the initialisation.

    Returns
    -------
    tuple
        ``(params, X, y)``: the parameters (a list of tensors with leading axis ``members``, as :func:`init_params`),
        the inputs ``(members, n, d)`` and the targets ``(members, n)``.

    Examples
    --------
    >>> params, X, y = sweep_draws(16, 2, n=3, d=4, members=2, data_seed=0, init_seed=1)
    >>> tuple(X.shape), tuple(y.shape), tuple(params[0].shape)
    ((2, 3, 4), (2, 3), (2, 16, 4))
    """
    params, X, y, _ = _sweep_draws(m, H, n=n, d=d, members=members, data_seed=data_seed, init_seed=init_seed)
    return params, X, y


def dense_reference_errors(
    params: Params, X: Tensor, y: Tensor, net: Net = Net(), *, iters: int = 60, generator: torch.Generator | None = None
) -> dict:
    """The chapter's matrix-free machinery against dense references on a small network (:ref:`ch-parameter-ball`), each a
    float (the largest over members): ``"ntk"``: ``max |J Jᵀ − ntk|`` and ``"gram"``: ``max |J_H J_Hᵀ − G_H|``
    (``J`` by :func:`torch.func.jacrev`); ``"hessian"``: the relative error of :func:`output_hessian_norm` and
    ``"loss_hessian"`` that of :func:`loss_hessian_norm` against the eigenvalues of the dense Hessian
    (:func:`torch.func.hessian`); ``"loss_identity"``: ``max |∇²L − (JᵀJ + Σ_i r_i ∇²f_i)| / max |∇²L|`` (paper C's
    identity behind the loss-Hessian bound). ``X``: ``(n, d)``; ``y``: ``(n,)``; small ``P`` only.

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.
    X : Tensor, (n, d)
        The inputs.
    y : Tensor, (n,)
        The targets.
    net : Net
        The architecture, activation and scalings.
    iters : int
        Lanczos steps.
    generator : torch.Generator or None
        The CPU generator of the Lanczos start vectors (:mod:`companion.device`).

    Returns
    -------
    dict of str to float
        ``"ntk"``, ``"gram"``, ``"hessian"``, ``"loss_hessian"`` and ``"loss_identity"``.

    Raises
    ------
    ValueError
        When ``params`` is malformed, the inputs do not match it, or a tensor lies on another device or dtype.
    """
    E, _, _, H = _check(params, X=X, y=y)
    out = {"ntk": 0.0, "gram": 0.0, "hessian": 0.0, "loss_hessian": 0.0, "loss_identity": 0.0}
    norm_f = output_hessian_norm(params, X[0], net, iters=iters, generator=generator)
    norm_L = loss_hessian_norm(params, X, y, net, iters=iters, generator=generator)
    K, G = ntk(params, X, net), last_layer_gram(params, X, net)
    for e in range(E):
        pe = [v[e : e + 1] for v in params]
        shapes = [tuple(v.shape[1:]) for v in pe]
        flat0 = curvature.flatten(pe)[0]

        def f_all(v):
            return _forward(curvature.unflatten(v[None], shapes), X, net)[0][0]  # (n,)

        J = torch.func.jacrev(f_all)(flat0)  # (n, P)
        sizes = [math.prod(s) for s in shapes]
        start = sum(sizes[: H - 1])
        JH = J[:, start : start + sizes[H - 1]]
        out["ntk"] = max(out["ntk"], (J @ J.T - K[e]).abs().max().item())
        out["gram"] = max(out["gram"], (JH @ JH.T - G[e]).abs().max().item())
        Hf = torch.func.hessian(lambda v: f_all(v)[0])(flat0)
        ev = torch.linalg.eigvalsh(Hf).abs().max()
        out["hessian"] = max(out["hessian"], (abs(norm_f[e] - ev) / ev).item())
        HL = torch.func.hessian(lambda v: 0.5 * ((f_all(v) - y) ** 2).sum())(flat0)
        r = (f_all(flat0) - y).detach()
        Hsum = torch.func.hessian(lambda v: (f_all(v) * r).sum())(flat0)
        out["loss_identity"] = max(out["loss_identity"], ((HL - J.T @ J - Hsum).abs().max() / HL.abs().max()).item())
        evL = torch.linalg.eigvalsh(HL).abs().max()
        out["loss_hessian"] = max(out["loss_hessian"], (abs(norm_L[e] - evL) / evL).item())
    return out


# ------------------------------------------------------------------------------------------ sweep fits
def radius_exponent(x, Y, confidence: float = 0.999, order: int = 2):
    """The exponent ``e`` of ``Y(D) = c D^e (1 + κ₁ D + κ₂ D² + …)`` at small ``D`` (:ref:`ch-parameter-ball`'s radius rows).

    Per member (column of ``Y``, ``(R, E)``), least squares of ``log Y`` on ``[1, log D, D, …, D^order]``: paper C's
    quantities are analytic along a fixed direction, so their logarithm is ``log c + e log D`` plus a power series
    in ``D`` (a bare log-log slope would mix ``e`` with the corrections). The estimate is the mean of the ``E``
    exponents with a Student-t interval across members at ``confidence``, widened on each side by the truncation
    estimate ``|ē(order) − ē(order − 1)|``, the change of the mean exponent when the last correction term is added
    (for a correction series that shrinks from order to order, the error left is smaller than the last change).
    Returns a :class:`companion.stats.Estimate` whose ``method`` names the widening. Needs ``R ≥ order + 3``.

    Parameters
    ----------
    x : array_like, (R,)
        The radii, positive.
    Y : array_like, (R, E)
        The measured values, positive and finite, ``E ≥ 2``.
    confidence : float
        The interval's confidence, in ``(0, 1)``.
    order : int
        The number of correction terms ``D, …, D^order``.

    Returns
    -------
    Estimate
        The mean exponent with its widened interval.

    Raises
    ------
    ValueError
        When the shapes are wrong (``R < order + 3``, ``E < 2``), a value is not positive and finite, or
        ``confidence`` is not in ``(0, 1)``.
    """
    from . import stats

    x = np.asarray(x, float).ravel()
    Y = np.asarray(Y, float)
    validation.positive_int("order", order)
    if Y.ndim != 2 or Y.shape[0] != x.size or x.size < order + 3 or Y.shape[1] < 2:
        raise ValueError(f"need x (R,) with R >= order + 3 and Y (R, E) with E >= 2, got {x.shape} and {Y.shape}")
    if np.any(x <= 0) or np.any(~(Y > 0)) or not np.all(np.isfinite(Y)):
        raise ValueError("the fit needs positive x and finite positive Y")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")

    def exponents(k):
        A = np.stack([np.ones_like(x), np.log(x)] + [x**j for j in range(1, k + 1)], 1)
        return np.linalg.lstsq(A, np.log(Y), rcond=None)[0][1]  # (E,)

    s = exponents(order)
    trunc = abs(float(s.mean() - exponents(order - 1).mean()))
    from scipy import stats as _st

    half = float(_st.t.ppf(0.5 + confidence / 2, df=s.size - 1)) * s.std(ddof=1) / math.sqrt(s.size)
    mean = float(s.mean())
    return stats.Estimate(
        mean,
        mean - half - trunc,
        mean + half + trunc,
        confidence,
        f"t-interval over members, widened by the next-order change {trunc:.1e}",
    )
