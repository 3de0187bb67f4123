"""Paper A's deep network with an ensemble axis (:ref:`ch-setup`; used in :ref:`ch-smoothness` to :ref:`ch-rate`).

``f(x; w_1..w_L) = σ(w_L σ(w_{L-1} … σ(w_1 x)))`` with no biases and σ applied at the output too;
``w_ℓ ∈ R^{d_ℓ × d_{ℓ-1}}``, ``d_L = 1``. The parameters are a list ``params`` of ``L`` tensors of shape
``(E, d_ℓ, d_{ℓ-1})``: member ``e`` of the ensemble is the network ``params[ℓ][e]``. The paper stacks the
layers into ``W = blockdiag(w_1, …, w_L)``, so that ``‖W‖_F² = Σ_ℓ ‖w_ℓ‖_F²`` (:func:`blockdiag`, :func:`norm`).

Loss (paper A §3): ``𝓛(W) = (1/n) Σ_i J_i(F(x_i; W))`` with ``J_i(u) = (u − y_i)²``, so ``c_J = 2``.

Shapes: data ``X`` is ``(n, d)`` (shared by all members) or ``(E, n, d)``; targets ``y`` are ``(n,)`` or ``(E, n)``.

The module speaks the verbs of :mod:`companion.model` over its parameter list: :func:`init_params`,
:func:`forward`, :func:`loss_and_gradient` and :func:`make_loss_and_grad` (the closure :func:`companion.gd.run`
trains).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import torch
from torch import Tensor

from . import activations, validation
from .device import rand, randn, resolve

__all__ = [
    "C_J",
    "check_params",
    "widths_of",
    "init_params",
    "ball_data",
    "check_assumption_3_2",
    "forward_all",
    "forward",
    "loss",
    "backward_deltas",
    "output_gradient",
    "loss_and_gradient",
    "make_loss_and_grad",
    "loss_and_gradient_autograd",
    "embed",
    "gradient_relative_error",
    "gradient_gap_in_balls",
    "norm",
    "blockdiag",
    "d_max",
]


def _same_device_only(**tensors: Tensor) -> None:
    """Devices first (before any value check, which would touch the data): ``ValueError`` naming both."""
    items = [(n, t) for n, t in tensors.items() if isinstance(t, Tensor)]
    for n, t in items[1:]:
        if t.device != items[0][1].device:
            raise ValueError(f"{n} is on {t.device} but {items[0][0]} is on {items[0][1].device}")


C_J = 2.0  # Lipschitz constant of J_i'(u) = 2(u − y_i), paper A's c_J for the squared loss


def check_params(params: Sequence[Tensor]) -> list[Tensor]:
    """Validate a parameter list: L ≥ 1 tensors ``(E, d_ℓ, d_{ℓ-1})`` that chain, with ``d_L = 1``.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.

    Returns
    -------
    list of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The same tensors, as a list.

    Raises
    ------
    ValueError
        When ``params`` is empty or not a list or tuple, a tensor is not a finite floating 3-d tensor, the ensemble
        sizes differ, consecutive widths do not chain, ``d_L ≠ 1``, or the tensors lie on different devices or dtypes.
    """
    if not isinstance(params, (list, tuple)) or len(params) == 0:
        raise ValueError("params must be a non-empty list of tensors of shape (E, d_l, d_(l-1))")
    out = []
    _same_device_only(**{f"w_{i + 1}": w for i, w in enumerate(params)})
    for ell, w in enumerate(params, start=1):
        validation.tensor(f"params[{ell - 1}] (w_{ell})", w, ndim=3)
        out.append(w)
    E = out[0].shape[0]
    for ell in range(1, len(out)):
        if out[ell].shape[0] != E:
            raise ValueError(f"ensemble sizes differ: w_1 has E={E} but w_{ell + 1} has E={out[ell].shape[0]}")
        if out[ell].shape[2] != out[ell - 1].shape[1]:
            raise ValueError(
                f"w_{ell + 1} has {out[ell].shape[2]} input columns but w_{ell} has {out[ell - 1].shape[1]} output rows"
            )
    if out[-1].shape[1] != 1:
        raise ValueError(f"the last layer must have one output (d_L = 1), got d_L = {out[-1].shape[1]}")
    validation.same_device(**{f"w_{i + 1}": w for i, w in enumerate(out)})
    return out


def _check_data(params: list[Tensor], X: Tensor, y: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    E, d = params[0].shape[0], params[0].shape[2]
    _same_device_only(params=params[0], X=X, y=y)
    validation.tensor("X", X, ndim=(2, 3))
    if y is not None:
        validation.tensor("y", y, ndim=(1, 2))
    validation.same_device(params=params[0], X=X, **({"y": y} if y is not None else {}))
    if X.shape[-1] != d:
        raise ValueError(f"X has {X.shape[-1]} features but w_1 expects d_0 = {d}")
    if X.ndim == 3 and X.shape[0] != E:
        raise ValueError(f"X has ensemble size {X.shape[0]} but params have E = {E}")
    if y is not None:
        if y.shape[-1] != X.shape[-2]:
            raise ValueError(f"y has {y.shape[-1]} targets but X has n = {X.shape[-2]} samples")
        if y.ndim == 2 and y.shape[0] != E:
            raise ValueError(f"y has ensemble size {y.shape[0]} but params have E = {E}")
    return X, y


def widths_of(params: Sequence[Tensor]) -> list[int]:
    """``[d_0, d_1, …, d_L]`` of a parameter list.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L`` (not checked).

    Returns
    -------
    list of int
        ``[d_0, d_1, …, d_L]``, ``L + 1`` widths.
    """
    return [params[0].shape[2]] + [w.shape[1] for w in params]


def init_params(
    widths: Sequence[int], ensemble: int, scale: float = 1.0, *, generator: torch.Generator | None = None, device=None, dtype=None
) -> list[Tensor]:
    """Gaussian initialisation ``w_ℓ ~ N(0, scale² / d_{ℓ-1})`` entrywise, for ``ensemble`` independent members
    (paper A's network, :ref:`ch-setup`; the initial scale of Theorem 4.8's runs in :ref:`ch-rate`).

    Parameters
    ----------
    widths
        ``[d_0, …, d_L]`` with ``L ≥ 1`` and ``d_L = 1``.
    ensemble
        Number of independent members ``E``.
    scale
        Multiplies every layer's standard deviation ``1/√d_{ℓ-1}``.
    generator, device, dtype
        As everywhere in :mod:`companion.device` (draws on the CPU, layer by layer).

    Returns
    -------
    list[Tensor]
        ``L`` tensors ``(E, d_ℓ, d_{ℓ-1})``.

    Raises
    ------
    ValueError
        When ``widths`` does not list ``d_0 … d_L`` with ``L ≥ 1`` and ``d_L = 1`` (each a positive int), ``ensemble``
        is not a positive int, or ``scale`` is negative.
    """
    validation.positive_int("ensemble size", ensemble)
    if len(widths) < 2:
        raise ValueError(f"widths must list d_0..d_L with L >= 1, got {list(widths)}")
    for i, w in enumerate(widths):
        validation.positive_int(f"width d_{i}", w)
    if widths[-1] != 1:
        raise ValueError(f"paper A's network has one output: d_L must be 1, got {widths[-1]}")
    validation.nonnegative("scale", scale)
    dev, dt = resolve(device, dtype)
    return [
        scale / math.sqrt(widths[l - 1]) * randn((ensemble, widths[l], widths[l - 1]), generator=generator, device=dev, dtype=dt)
        for l in range(1, len(widths))
    ]


def ball_data(n: int, d: int, *, c_x: float = 1.0, generator: torch.Generator | None = None, device=None, dtype=None) -> Tensor:
    """``n`` inputs uniform in the ball ``‖x‖ ≤ c_x √d`` (Assumption 3.2), shape ``(n, d)``.

    Parameters
    ----------
    n : int
        The number of inputs.
    d : int
        Their dimension.
    c_x : float
        Assumption 3.2's constant: the ball's radius is ``c_x √d``.
    generator : torch.Generator or None
        The CPU generator of the draws (:mod:`companion.device`).
    device, dtype : optional
        Where the inputs go (default: the policy of :mod:`companion.device`).

    Returns
    -------
    Tensor, (n, d)
        Inputs uniform in the ball.

    Raises
    ------
    ValueError
        When ``n`` or ``d`` is not a positive int.
    """
    validation.positive_int("n", n)
    validation.positive_int("d", d)
    dev, dt = resolve(device, dtype)
    g = randn((n, d), generator=generator, device=dev, dtype=dt)
    r = rand((n, 1), generator=generator, device=dev, dtype=dt) ** (1.0 / d)
    return c_x * math.sqrt(d) * r * g / g.norm(dim=1, keepdim=True)


def check_assumption_3_2(X: Tensor, c_x: float = 1.0) -> Tensor:
    """Raise ``ValueError`` unless every input satisfies ``‖x_i‖ ≤ c_x √d`` (paper A, Assumption 3.2).

    Parameters
    ----------
    X : Tensor, (n, d) or (E, n, d)
        The inputs.
    c_x : float
        Assumption 3.2's constant.

    Returns
    -------
    Tensor
        ``X`` itself.

    Raises
    ------
    ValueError
        When ``X`` is not a finite floating 2-d or 3-d tensor, or an input has ``‖x_i‖ > c_x √d``.
    """
    validation.tensor("X", X, ndim=(2, 3))
    d = X.shape[-1]
    worst = X.norm(dim=-1).max().item()
    if worst > c_x * math.sqrt(d) * (1 + 1e-12):
        raise ValueError(f"data violate Assumption 3.2: max ‖x_i‖ = {worst:.6g} > c_x √d = {c_x * math.sqrt(d):.6g}")
    return X


SMALL_MATMUL = 1 << 22  # entries of the broadcast product below which a compiled graph sums it instead of a matmul


def _bmm(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for ``(E, p, q) @ (E, q, r)``. Inside a compiled graph (``gd.run(..., compile=True)``), when the
    broadcast product ``(E, p, q, r)`` has at most :data:`SMALL_MATMUL` entries, as that product summed over ``q``,
    which inductor fuses into its C++ loops: paper A's matrices are a few entries wide, where one library matmul call
    costs microseconds (benchmarks/README.md, section 4). Otherwise, and always eagerly, ``torch.matmul``."""
    if torch.compiler.is_compiling() and a.numel() * b.shape[-1] <= SMALL_MATMUL:
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
    return torch.matmul(a, b)


def _forward_unchecked(params: Sequence[Tensor], X: Tensor, sigma: activations.Activation) -> tuple[list[Tensor], list[Tensor]]:
    E = params[0].shape[0]
    h = X.expand(E, *X.shape[-2:]) if X.ndim == 2 else X
    zs, hs = [], [h]
    for w in params:
        z = _bmm(h, w.transpose(1, 2))
        h = sigma.fn(z)
        zs.append(z)
        hs.append(h)
    return zs, hs


def forward_all(params: Sequence[Tensor], X: Tensor, act) -> tuple[list[Tensor], list[Tensor]]:
    """Pre-activations ``z_ℓ = w_ℓ h_{ℓ-1}`` and activations ``h_ℓ = σ(z_ℓ)`` of every layer (Lemma 4.2).

    Returns ``(zs, hs)``: ``zs[ℓ-1]`` is ``(E, n, d_ℓ)`` for ℓ = 1..L; ``hs[ℓ]`` is ``(E, n, d_ℓ)`` for ℓ = 0..L
    with ``hs[0] = X`` broadcast to the ensemble.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs, shared by the members or one sample per member.
    act : str or Activation
        σ (:func:`companion.activations.get`).

    Returns
    -------
    zs : list of Tensor, each (E, n, d_ℓ)
        The pre-activations of layers 1 … L.
    hs : list of Tensor, each (E, n, d_ℓ)
        The activations of layers 0 … L (``hs[0]`` is ``X``).

    Raises
    ------
    ValueError
        As :func:`check_params`, or when ``X`` does not match the weights.
    """
    params = check_params(params)
    X, _ = _check_data(params, X)
    return _forward_unchecked(params, X, activations.get(act))


def forward(params: Sequence[Tensor], X: Tensor, act) -> Tensor:
    """Paper A's network outputs ``F(x_i; W) = σ(w_L σ(… σ(w_1 x_i)))`` for every member and sample (:ref:`ch-setup`).

    Parameters
    ----------
    params
        ``L`` tensors ``(E, d_ℓ, d_{ℓ-1})``, ``d_L = 1``.
    X
        Inputs ``(n, d_0)`` shared by the members, or ``(E, n, d_0)``.
    act
        The activation σ (a name or an :class:`companion.activations.Activation`).

    Returns
    -------
    Tensor
        ``(E, n)``.
    """
    return forward_all(params, X, act)[1][-1][..., 0]


def loss(params: Sequence[Tensor], X: Tensor, y: Tensor, act) -> Tensor:
    """``𝓛(W) = (1/n) Σ_i (F(x_i; W) − y_i)²`` per member, shape ``(E,)``.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs.
    y : Tensor, (n,) or (E, n)
        The targets.
    act : str or Activation
        σ.

    Returns
    -------
    Tensor, (E,)
        The mean squared error of every member.

    Raises
    ------
    ValueError
        As :func:`check_params`, or when ``X`` or ``y`` does not match the weights.
    """
    params = check_params(params)
    _check_data(params, X, y)
    return ((forward(params, X, act) - y) ** 2).mean(dim=-1)


def backward_deltas(params: Sequence[Tensor], zs: Sequence[Tensor], act) -> list[Tensor]:
    """Lemma 4.2's backward recursion, written out (no autograd).

    ``δ_L = σ'(z_L)``, ``δ_ℓ = σ'(z_ℓ) ⊙ (w_{ℓ+1}ᵀ δ_{ℓ+1})``; returns ``[δ_1, …, δ_L]``, each ``(E, n, d_ℓ)``,
    so that ``∇_{w_ℓ} F(x_i) = δ_{ℓ,i} h_{ℓ-1,i}ᵀ``. Paper A, Lemma 4.2 (:ref:`ch-setup`).

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    zs : sequence of Tensor, each (E, n, d_ℓ)
        The pre-activations of :func:`forward_all`, one per layer.
    act : str or Activation
        σ.

    Returns
    -------
    list of Tensor, each (E, n, d_ℓ)
        ``[δ_1, …, δ_L]``.

    Raises
    ------
    ValueError
        When ``zs`` has not one tensor per layer, or the tensors lie on different devices or dtypes.
    """
    sigma = activations.get(act)
    if len(zs) != len(params):
        raise ValueError(f"need one pre-activation per layer: {len(params)} layers but {len(zs)} tensors zs")
    validation.same_device(params=params[0], **{f"zs[{i}]": z for i, z in enumerate(zs)})
    return _backward_unchecked(params, zs, sigma)


def _backward_unchecked(params: Sequence[Tensor], zs: Sequence[Tensor], sigma: activations.Activation) -> list[Tensor]:
    deltas = [sigma.d1(zs[-1])]
    for ell in range(len(params) - 2, -1, -1):
        # row-vector form of w_{ℓ+1}ᵀ δ_{ℓ+1}: (E, n, d_{ℓ+1}) @ (E, d_{ℓ+1}, d_ℓ)
        deltas.append(sigma.d1(zs[ell]) * _bmm(deltas[-1], params[ell + 1]))
    return deltas[::-1]


def output_gradient(params: Sequence[Tensor], X: Tensor, act) -> list[Tensor]:
    """Per-sample gradients ``∇_{w_ℓ} F(x_i; W) = δ_ℓ h_{ℓ-1}ᵀ`` by Lemma 4.2: ``(E, n, d_ℓ, d_{ℓ-1})`` per layer.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs.
    act : str or Activation
        σ.

    Returns
    -------
    list of Tensor, each (E, n, d_ℓ, d_{ℓ-1})
        The gradient of every output ``F(x_i)`` in every layer's weights.

    Raises
    ------
    ValueError
        As :func:`forward_all`.
    """
    zs, hs = forward_all(params, X, act)
    deltas = backward_deltas(params, zs, act)
    return [delta.unsqueeze(-1) * h.unsqueeze(-2) for delta, h in zip(deltas, hs[:-1])]


def _loss_and_gradient_unchecked(
    params: Sequence[Tensor], X: Tensor, y: Tensor, sigma: activations.Activation
) -> tuple[Tensor, list[Tensor]]:
    zs, hs = _forward_unchecked(params, X, sigma)
    residual = hs[-1][..., 0] - y  # (E, n)
    n = residual.shape[-1]
    deltas = _backward_unchecked(params, zs, sigma)
    coef = (2.0 / n) * residual.unsqueeze(-1)  # J_i'(F_i)/n, (E, n, 1)
    grads = [_bmm((coef * delta).transpose(1, 2), h) for delta, h in zip(deltas, hs[:-1])]
    return (residual * residual).mean(dim=-1), grads


def loss_and_gradient(params: Sequence[Tensor], X: Tensor, y: Tensor, act) -> tuple[Tensor, list[Tensor]]:
    """``𝓛`` and ``∇_{w_ℓ}𝓛 = (1/n) Σ_i J_i'(F_i) δ_{ℓ,i} h_{ℓ-1,i}ᵀ`` by Lemma 4.2's recursion (no autograd).

    Paper A, Lemma 4.2 (:ref:`ch-setup`). Validates every argument on every call; inside a GD loop use
    :func:`make_loss_and_grad`.

    Parameters
    ----------
    params
        ``L`` tensors ``(E, d_ℓ, d_{ℓ-1})``, ``d_L = 1``.
    X
        Inputs ``(n, d_0)`` or ``(E, n, d_0)``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        The activation σ.

    Returns
    -------
    (loss, grads)
        ``loss (E,)`` and ``[grad_1 (E, d_1, d_0), …, grad_L (E, 1, d_{L-1})]``.
    """
    params = check_params(params)
    _check_data(params, X, y)
    return _loss_and_gradient_unchecked(params, X, y, activations.get(act))


def make_loss_and_grad(X: Tensor, y: Tensor, act, *, params_like: Sequence[Tensor] | None = None):
    """``loss_and_grad(params) -> (𝓛 (E,), grads)`` for :func:`companion.gd.run` (paper A, Lemma 4.2; the GD of
    Theorem 4.8 in :ref:`ch-descent` and :ref:`ch-rate`).

    The same values as :func:`loss_and_gradient`, without its per-call checks (each check of finiteness is a
    host synchronisation on a GPU): the data are validated here, the parameters against them at the first call
    (and again only if their shapes change). ``closure.restrict(index)`` is the closure of the members at
    positions ``index`` (per-member data sliced), the contract of :mod:`companion.model`.

    Parameters
    ----------
    X
        Inputs ``(n, d_0)`` shared by the members, or ``(E, n, d_0)``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        The activation σ.
    params_like
        Optional: parameters of the shapes the closure will see, validated against the data here already.

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), [grad_1, …, grad_L])`` with ``params`` as from :func:`init_params`.

    Raises
    ------
    ValueError
        When ``X`` or ``y`` is not a finite floating tensor of its shape, they do not match, or they lie on different
        devices or dtypes; at the closure's first call, when the parameters do not match the data.

    Examples
    --------
    Three members of a width-4 tanh network fitted by 200 steps of GD:

    >>> from companion import deepnet, device, gd
    >>> g = device.generator(0)
    >>> X = deepnet.ball_data(10, 3, generator=g, device="cpu")
    >>> params = deepnet.init_params([3, 4, 1], 3, generator=g, device="cpu")
    >>> f = deepnet.make_loss_and_grad(X, 0.5 * X[:, 0], "tanh")
    >>> res = gd.run(f, params, 200, 0.5, progress=False)
    >>> bool((res.history["loss"][-1] < res.history["loss"][0]).all())
    True
    """
    first = params_like[0] if isinstance(params_like, (list, tuple)) and params_like else None
    _same_device_only(params=first, X=X, y=y)
    validation.tensor("X", X, ndim=(2, 3))
    validation.tensor("y", y, ndim=(1, 2))
    validation.same_device(X=X, y=y)
    if y.shape[-1] != X.shape[-2]:
        raise ValueError(f"y has {y.shape[-1]} targets but X has n = {X.shape[-2]} samples")
    if X.ndim == 3 and y.ndim == 2 and y.shape[0] != X.shape[0]:
        raise ValueError(f"y has ensemble size {y.shape[0]} but X has {X.shape[0]}")
    sigma = activations.get(act)
    checked: dict = {}

    def check(params: Sequence[Tensor]) -> None:
        _check_data(check_params(params), X, y)
        checked["shapes"] = [tuple(p.shape) for p in params]

    if params_like is not None:
        check(params_like)

    def loss_and_grad(params: Sequence[Tensor]) -> tuple[Tensor, list[Tensor]]:
        if checked.get("shapes") != [tuple(p.shape) for p in params]:
            check(params)
        return _loss_and_gradient_unchecked(params, X, y, sigma)

    def restrict(members: Tensor):
        """The closure for the members ``members`` only (per-member data sliced)."""
        Xs = X[members] if X.ndim == 3 else X
        ys = y[members] if y.ndim == 2 else y
        return make_loss_and_grad(Xs, ys, act)

    loss_and_grad.restrict = restrict
    return loss_and_grad


def loss_and_gradient_autograd(params: Sequence[Tensor], X: Tensor, y: Tensor, act) -> tuple[Tensor, list[Tensor]]:
    """The same as :func:`loss_and_gradient` by reverse-mode autograd (the reference in :ref:`ch-setup`'s check).

    Members are independent, so the gradient of ``Σ_e 𝓛_e`` is each member's own gradient.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs.
    y : Tensor, (n,) or (E, n)
        The targets.
    act : str or Activation
        σ.

    Returns
    -------
    loss : Tensor, (E,)
        As :func:`loss`.
    grads : list of Tensor, each (E, d_ℓ, d_{ℓ-1})
        Its gradient, detached.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    params = [w.detach().requires_grad_(True) for w in check_params(params)]
    with torch.enable_grad():
        value = loss(params, X, y, act)
        grads = torch.autograd.grad(value.sum(), params)
    return value.detach(), [g.detach() for g in grads]


def embed(params: Sequence[Tensor], width: int) -> tuple[list[Tensor], list[Tensor]]:
    """Pad every hidden layer to ``width`` units with zero weights into and out of the new units.

    ``params``: ``L`` tensors ``(E, d_ℓ, d_{ℓ-1})``; returns ``(padded, mask)``, both lists of ``(E, d'_ℓ, d'_{ℓ-1})``
    with ``d'_0 = d_0``, ``d'_ℓ = width`` for ``0 < ℓ < L`` and ``d'_L = 1``; ``mask`` is 1 on the original weights
    and 0 on the padding. Exact for an activation with ``σ(0) = 0`` (linear, tanh): a new unit has pre-activation
    0, outputs ``σ(0) = 0`` and receives zero gradient in and out, so outputs, loss and gradients on the original
    weights are unchanged and GD keeps the padding at zero. Lets one ensemble hold networks of several widths
    (:ref:`ch-descent`'s sweep over ``d_max``). Raises ``ValueError`` if ``width`` is smaller than a hidden width.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    width : int
        The common hidden width, at least every hidden ``d_ℓ``.

    Returns
    -------
    padded : list of Tensor, each (E, d'_ℓ, d'_{ℓ-1})
        The weights, zero on the padding.
    mask : list of Tensor, each (E, d'_ℓ, d'_{ℓ-1})
        1 on the original weights, 0 on the padding.

    Raises
    ------
    ValueError
        As :func:`check_params`, when ``width`` is not a positive int, or smaller than a hidden width.
    """
    params = check_params(params)
    validation.positive_int("width", width)
    widths = widths_of(params)
    if any(w > width for w in widths[1:-1]):
        raise ValueError(f"width {width} is smaller than a hidden width of {widths}")
    new = [widths[0]] + [width] * (len(widths) - 2) + [1]
    padded, mask = [], []
    for ell, w in enumerate(params, start=1):
        E, rows, cols = w.shape
        out = w.new_zeros(E, new[ell], new[ell - 1])
        out[:, :rows, :cols] = w
        m = w.new_zeros(E, new[ell], new[ell - 1])
        m[:, :rows, :cols] = 1
        padded.append(out)
        mask.append(m)
    return padded, mask


def gradient_relative_error(params: Sequence[Tensor], X: Tensor, y: Tensor, act) -> Tensor:
    """``‖g_explicit − g_autograd‖ / ‖g_autograd‖`` per member, all layers together, shape ``(E,)``: Lemma 4.2's
    recursion (:func:`loss_and_gradient`) against reverse-mode autograd (:func:`loss_and_gradient_autograd`).

    Paper A, Lemma 4.2 (:ref:`ch-setup`).

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs.
    y : Tensor, (n,) or (E, n)
        The targets.
    act : str or Activation
        σ.

    Returns
    -------
    Tensor, (E,)
        The relative error of the explicit gradient.
    """
    _, g_exp = loss_and_gradient(params, X, y, act)
    _, g_ref = loss_and_gradient_autograd(params, X, y, act)
    num = torch.sqrt(sum(((a - b) ** 2).flatten(1).sum(1) for a, b in zip(g_exp, g_ref)))
    den = torch.sqrt(sum((b**2).flatten(1).sum(1) for b in g_ref))
    return num / den


# ------------------------------------------------------------- Lemma 4.2 in ball arithmetic
def _arb_matrix(rows: int, cols: int, values) -> object:
    from flint import arb, arb_mat

    return arb_mat(rows, cols, [arb(float(v)) for v in values])


def _arb_map(f, M):
    from flint import arb_mat

    return arb_mat(M.nrows(), M.ncols(), [f(v) for v in M.entries()])


def _check_prec(prec: int) -> int:
    if prec < 53:
        raise ValueError(f"prec must be at least 53 bits, got {prec!r}")
    return prec


@contextlib.contextmanager
def _arb_precision(prec: int):
    """python-flint's working precision set to ``prec`` bits inside the block, restored after it."""
    from flint import ctx

    saved = ctx.prec
    ctx.prec = prec
    try:
        yield
    finally:
        ctx.prec = saved


def _float64_data(X: Tensor, y: Tensor, E: int) -> tuple[Tensor, Tensor]:
    """``X (E, n, d)`` and ``y (E, n)``: float64 copies on the CPU, broadcast to the ``E`` members."""
    X = X.detach().to("cpu", torch.float64)
    y = y.detach().to("cpu", torch.float64)
    return (X.expand(E, -1, -1) if X.ndim == 2 else X), (y.expand(E, -1) if y.ndim == 1 else y)


def _arb_member(params: Sequence[Tensor], X: Tensor, y: Tensor, e: int):
    """Member ``e`` in balls, from float64 CPU tensors (exact in binary): its weights (one ``arb_mat`` per layer),
    its inputs as columns ``H0 (d_0, n)`` and its targets (a list of ``arb``)."""
    from flint import arb

    weights = [_arb_matrix(w.shape[1], w.shape[2], w[e].flatten().tolist()) for w in params]
    H0 = _arb_matrix(X.shape[2], X.shape[1], X[e].T.flatten().tolist())
    return weights, H0, [arb(float(t)) for t in y[e].tolist()]


def _arb_loss_and_gradient(weights, H0, targets, sigma, sigma_prime, gradient: bool = True, sigma_prime_at: str = "z"):
    """Paper A's loss (and its gradient by Lemma 4.2's recursion) for one member, in ``arb_mat`` balls.

    ``weights[ℓ-1]`` is ``w_ℓ`` ``(d_ℓ, d_{ℓ-1})``, ``H0`` the inputs as columns ``(d_0, n)``. With
    ``sigma_prime_at="h"`` the recursion takes σ' at the activation ``h_ℓ = σ(z_ℓ)`` instead of the pre-activation
    ``z_ℓ``: a wrong formula, the negative control of :func:`gradient_gap_in_balls`."""
    from flint import arb_mat

    n = H0.ncols()
    hs, zs = [H0], []
    for W in weights:
        zs.append(W * hs[-1])
        hs.append(_arb_map(sigma, zs[-1]))
    residual = [f - t for f, t in zip(hs[-1].entries(), targets)]
    loss = sum((r * r for r in residual), 0 * residual[0]) / n
    if not gradient:
        return loss, None
    at = zs if sigma_prime_at == "z" else hs[1:]
    # δ_L = σ'(z_L) J'(F) with J' = 2 (F − y); δ_ℓ = σ'(z_ℓ) ⊙ (w_{ℓ+1}ᵀ δ_{ℓ+1}); ∇_{w_ℓ} = (1/n) Σ_i δ_ℓ h_{ℓ−1}ᵀ
    delta = arb_mat(1, n, [sigma_prime(z) * 2 * r for z, r in zip(at[-1].entries(), residual)])
    grads = [None] * len(weights)
    for ell in range(len(weights) - 1, -1, -1):
        grads[ell] = delta * hs[ell].transpose() / n
        if ell > 0:
            back = weights[ell].transpose() * delta
            delta = arb_mat(back.nrows(), n, [sigma_prime(z) * b for z, b in zip(at[ell - 1].entries(), back.entries())])
    return loss, grads


def _arb_directional_derivative(weights, tangents, H0, targets, sigma, sigma_prime):
    """``d/dt 𝓛(W + tV)`` at ``t = 0`` for one member, by forward-mode differentiation in ``arb_mat`` balls
    (tangents pushed through the layers with the network, no backward recursion)."""
    from flint import arb_mat

    n = H0.ncols()
    h, dh = H0, arb_mat(H0.nrows(), n)
    for W, V in zip(weights, tangents):
        z, dz = W * h, V * h + W * dh
        h = _arb_map(sigma, z)
        dh = arb_mat(z.nrows(), n, [sigma_prime(a) * b for a, b in zip(z.entries(), dz.entries())])
    residual = [f - t for f, t in zip(h.entries(), targets)]
    return sum((2 * r * b for r, b in zip(residual, dh.entries())), 0 * residual[0]) / n


def _float_down(x) -> float:
    from flint import arb

    f = float(x)
    return math.nextafter(f, -math.inf) if arb(f) > x else f


def _float_up(x) -> float:
    from flint import arb

    f = float(x)
    return math.nextafter(f, math.inf) if arb(f) < x else f


def gradient_gap_in_balls(
    params: Sequence[Tensor],
    X: Tensor,
    y: Tensor,
    act,
    directions: Sequence[Tensor],
    *,
    prec: int = 256,
    sigma_prime_at: str = "z",
) -> tuple[Tensor, Tensor]:
    """Lemma 4.2's gradient against the derivative of the loss, both in ball arithmetic: an enclosure of
    ``(⟨∇𝓛_rec, V⟩ − d/dt 𝓛(W + tV)|₀) / (‖∇𝓛_rec‖ ‖V‖)`` for every member and direction.

    Paper A, Lemma 4.2 (:ref:`ch-setup`). From the float64 point ``W`` (exact in binary), at ``prec`` bits
    (python-flint balls, every operation enclosing the exact result): ``∇𝓛_rec`` by the lemma's backward
    recursion (eqs. (9)–(11)) and the directional derivative by forward-mode differentiation, which pushes the
    tangent ``V`` through the layers and shares nothing with the recursion but the network and σ'. The lemma holds
    at ``W`` along ``V`` exactly when the enclosure contains 0; its width is the resolution of that test (about
    ``2^{-prec}`` times the conditioning, ``1e-70`` at 256 bits for :ref:`ch-setup`'s networks), so rounding is no
    longer confused with a wrong formula, as it can be in float64 (:func:`gradient_relative_error`).

    Parameters
    ----------
    params
        ``W``: ``L`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    X, y
        Inputs ``(n, d)`` or ``(E, n, d)`` and targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation.
    directions
        ``V``: one tensor ``(E, K, d_ℓ, d_{ℓ−1})`` per layer, ``K`` directions per member (nonzero).
    prec
        Working precision in bits (at least 53).
    sigma_prime_at
        ``"z"``: the lemma's recursion (σ' at the pre-activations). ``"h"``: σ' at the activations ``h_ℓ = σ(z_ℓ)``,
        a wrong formula that a correct test must reject wherever σ' is not constant (the chapter's negative control).

    Returns
    -------
    tuple of Tensor
        ``(low, high)``, each ``(E, K)`` float64, rounded outward: the relative gap lies in ``[low, high]``.

    Raises
    ------
    ValueError
        For a non-smooth activation, directions that do not match the weights or vanish, ``prec < 53`` or an
        unknown ``sigma_prime_at``.

    Examples
    --------
    >>> from companion import deepnet, device
    >>> g = device.generator(0)
    >>> W = deepnet.init_params([3, 4, 1], 2, generator=g, device="cpu")
    >>> X = deepnet.ball_data(8, 3, generator=g, device="cpu")
    >>> V = [device.randn(w.shape, generator=g, device="cpu").unsqueeze(1) for w in W]
    >>> low, high = deepnet.gradient_gap_in_balls(W, X, X[:, 0], "tanh", V)
    >>> bool(((low <= 0) & (0 <= high) & (high - low < 1e-60)).all())   # Lemma 4.2 holds, to 60 digits
    True
    >>> low, high = deepnet.gradient_gap_in_balls(W, X, X[:, 0], "tanh", V, sigma_prime_at="h")
    >>> bool(((low > 0) | (high < 0)).all())   # the wrong recursion is rejected
    True
    """
    from flint import arb

    _check_prec(prec)
    if sigma_prime_at not in ("z", "h"):
        raise ValueError(f"sigma_prime_at must be 'z' (Lemma 4.2) or 'h' (the wrong recursion), got {sigma_prime_at!r}")
    sigma, sigma_prime = activations.ball_functions(act)
    params = check_params(params)
    X, y = _check_data(params, X, y)
    if len(directions) != len(params):
        raise ValueError(f"directions: one tensor per layer expected ({len(params)}), got {len(directions)}")
    E = params[0].shape[0]
    for ell, v in enumerate(directions):
        validation.tensor(f"directions[{ell}]", v, ndim=4)
    K = directions[0].shape[1]
    for ell, (w, v) in enumerate(zip(params, directions)):
        if v.shape[0] != E or v.shape[1] != K or v.shape[2:] != w.shape[1:]:
            raise ValueError(
                f"directions[{ell}] must be (E, K, d_ℓ, d_ℓ-1) = ({E}, {K}, {w.shape[1]}, {w.shape[2]}) (one K for "
                f"every layer), got {tuple(v.shape)}"
            )
    V = [v.detach().to("cpu", torch.float64) for v in directions]
    if K == 0 or bool((sum(v.pow(2).flatten(2).sum(2) for v in V) == 0).any()):
        raise ValueError("directions: every direction must be nonzero (and K >= 1)")
    cpu = [w.detach().to("cpu", torch.float64) for w in params]
    X, y = _float64_data(X, y, E)
    low, high = torch.empty(E, K, dtype=torch.float64), torch.empty(E, K, dtype=torch.float64)
    with _arb_precision(prec):
        for e in range(E):
            weights, H0, targets = _arb_member(cpu, X, y, e)
            _, grads = _arb_loss_and_gradient(weights, H0, targets, sigma, sigma_prime, sigma_prime_at=sigma_prime_at)
            g_norm = sum((g * g for G in grads for g in G.entries()), arb(0)).sqrt()
            for k in range(K):
                tangents = [_arb_matrix(v.shape[2], v.shape[3], v[e, k].flatten().tolist()) for v in V]
                inner = sum((g * t for G, T in zip(grads, tangents) for g, t in zip(G.entries(), T.entries())), arb(0))
                v_norm = sum((t * t for T in tangents for t in T.entries()), arb(0)).sqrt()
                derivative = _arb_directional_derivative(weights, tangents, H0, targets, sigma, sigma_prime)
                gap = (inner - derivative) / (g_norm * v_norm)
                low[e, k], high[e, k] = _float_down(gap.lower()), _float_up(gap.upper())
    return low, high


def norm(params: Sequence[Tensor]) -> Tensor:
    """``‖W‖_F = (Σ_ℓ ‖w_ℓ‖_F²)^{1/2}`` per member, shape ``(E,)``.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L`` (not checked).

    Returns
    -------
    Tensor, (E,)
        ``‖W‖_F`` of every member.
    """
    return torch.sqrt(sum((w**2).sum(dim=(1, 2)) for w in params))


def blockdiag(params: Sequence[Tensor]) -> Tensor:
    """Paper A's ``W = blockdiag(w_1, …, w_L)``, shape ``(E, Σ_{ℓ≥1} d_ℓ, Σ_{ℓ<L} d_ℓ)``.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L``.

    Returns
    -------
    Tensor, (E, Σ_{ℓ≥1} d_ℓ, Σ_{ℓ<L} d_ℓ)
        ``blockdiag(w_1, …, w_L)`` of every member.

    Raises
    ------
    ValueError
        As :func:`check_params`.
    """
    params = check_params(params)
    return torch.stack([torch.block_diag(*[w[e] for w in params]) for e in range(params[0].shape[0])])


def d_max(params: Sequence[Tensor]) -> int:
    """``max_ℓ d_ℓ`` over ℓ = 0..L, as in paper A's constants.

    Parameters
    ----------
    params : sequence of Tensor, each (E, d_ℓ, d_{ℓ-1})
        The weights ``w_1 … w_L`` (not checked).

    Returns
    -------
    int
        ``max(d_0, …, d_L)``.
    """
    return max(widths_of(params))
