"""Fused formulations of the engine's hot paths for compilers (``torch.compile`` / inductor; :ref:`ch-setup`).

:func:`companion.relunet.loss_and_gradient_wv` is written for the eager CPU engine: in-place ReLU, ``sign_`` and
``baddbmm`` so that every pass over the ``(E, k, n)`` activations reuses one buffer. Those in-place tricks
hide the dataflow from a compiler. The functions here state the same computation out of place, so that
inductor can fuse the elementwise work into as few passes as it finds (on CUDA it emits Triton kernels; with
``mode="max-autotune-no-cudagraphs"`` it may also fuse the ReLU into the forward GEMM's epilogue and the
masked residual into the backward GEMM's prologue, so that each activation is written once and read once).

The eager CPU formulation stays the default everywhere (it is faster there: ``benchmarks/gpu/README.md``);
this module is opt-in, e.g. ``gd.run(fused.make_loss_and_grad(X, y), [W, v], ...)``. The compiled closure is
CUDA-graph safe, so :func:`companion.gd.run` captures it like the eager one.

It is an alternative closure of :mod:`companion.relunet` (shared data, one output, trainable output weights) and
speaks the same verbs of :mod:`companion.model`: :func:`init_params` and :func:`forward` are relunet's,
:func:`loss_and_gradient` and :func:`make_loss_and_grad` run the formulation here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import model, relunet, validation

__all__ = ["init_params", "forward", "loss_and_gradient", "paper_b_loss_and_grad", "make_loss_and_grad", "compiled"]


def init_params(k: int, d: int, ensemble: int, sigma: float, *, scheme: str = "xavier", **kw) -> list[Tensor]:
    """Paper B's initialisations ``[W (E, k, d), v (E, k)]`` (one output): :func:`companion.relunet.init_params`,
    the same draws (Theorem 2's in :ref:`ch-three-phases`, Xavier-normal in :ref:`ch-failures`).

    Parameters
    ----------
    k, d, ensemble, sigma
        Neurons, input dimension, members ``E`` and the initial scale ``σ``.
    scheme
        ``"xavier"`` (default), ``"gaussian"`` or ``"theorem2"``.
    **kw
        ``signs`` (``"theorem2"``), ``generator``, ``device``, ``dtype``.

    Returns
    -------
    list[Tensor]
        ``[W (E, k, d), v (E, k)]``.
    """
    return relunet.init_params(k, d, ensemble, sigma, scheme=scheme, **kw)


def forward(params: Sequence[Tensor], X: Tensor) -> Tensor:
    """Paper B's network outputs ``vᵀReLU(W x_i)`` (Section 1.2; :ref:`ch-three-phases`):
    :func:`companion.relunet.forward`.

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k)]``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)``.

    Returns
    -------
    Tensor
        ``(E, n)``.
    """
    return relunet.forward(params, X)


def loss_and_gradient(
    params: Sequence[Tensor], X: Tensor, y: Tensor, *, mode: str | None = "default"
) -> tuple[Tensor, list[Tensor]]:
    """Paper B's empirical loss, eq. (1), and its gradient by this module's formulation (:ref:`ch-three-phases`),
    validated on every call: the values of :func:`make_loss_and_grad`'s closure.

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k)]``.
    X
        Inputs ``(n, d)`` shared by the members.
    y
        Targets ``(n,)``.
    mode
        The ``torch.compile`` mode (:func:`compiled`); ``None`` runs the formulation eagerly.

    Returns
    -------
    (loss, grads)
        ``loss (E,)`` and ``[grad_W (E, k, d), grad_v (E, k)]``.
    """
    return make_loss_and_grad(X, y, mode=mode)(params)


def paper_b_loss_and_grad(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Paper B's empirical loss and gradients, eq. (1) (:ref:`ch-three-phases` to :ref:`ch-beyond-two`), shared data
    and one output, out of place.

    ``W (E, k, d)``, ``v (E, k)``, ``X (n, d)``, ``y (n,)`` → ``(loss (E,), grad_W (E, k, d), grad_v (E, k))``,
    the same quantities as :func:`companion.relunet.loss_and_gradient_wv` (to rounding). With ``Z = W Xᵀ``
    ``(E, k, n)``, residuals ``R = vᵀReLU(Z) − y`` ``(E, n)`` and ``M_j = (1/n) Σ_i 1{z_ji > 0} R_i x_i``:
    ``grad_W = v ⊙ M`` and ``grad_v_j = ⟨w_j, M_j⟩`` (ReLU's homogeneity). Two GEMMs, ``4 n d k E`` FLOPs;
    everything else is elementwise or a reduction over ``k`` or ``n`` that a compiler can fuse.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights of every member.
    v : Tensor, (E, k)
        The output weights.
    X : Tensor, (n, d)
        The inputs, shared by the members.
    y : Tensor, (n,)
        The targets.

    Returns
    -------
    loss : Tensor, (E,)
        ``(1/2n) Σ_i (vᵀReLU(W x_i) − y_i)²`` per member.
    grad_W : Tensor, (E, k, d)
        Its gradient in ``W``.
    grad_v : Tensor, (E, k)
        Its gradient in ``v``.
    """
    E, k, d = W.shape
    n = X.shape[0]
    Z = torch.mm(W.reshape(E * k, d), X.T).view(E, k, n)
    R = (v.unsqueeze(-1) * torch.relu(Z)).sum(1) - y  # (E, n)
    loss = 0.5 * (R * R).sum(1) / n
    S = torch.where(Z > 0, R.unsqueeze(1), torch.zeros((), dtype=Z.dtype, device=Z.device))
    M = torch.mm(S.view(E * k, n), X).view(E, k, d) / n
    return loss, M * v.unsqueeze(-1), (W * M).sum(-1)


_COMPILED: dict = {}


def compiled(mode: str | None = "default", *, dynamic: bool = False) -> Callable:
    """:func:`paper_b_loss_and_grad` compiled by ``torch.compile`` with ``mode`` (cached per mode). ``mode=None``
    returns the function itself (eager), for comparisons.

    Parameters
    ----------
    mode : str or None
        ``torch.compile``'s mode (``"default"``, ``"reduce-overhead"``, ``"max-autotune"``); ``None`` for eager.
    dynamic : bool
        ``torch.compile``'s ``dynamic`` (shapes that may change between calls).

    Returns
    -------
    callable
        ``(W, v, X, y) -> (loss, grad_W, grad_v)`` as :func:`paper_b_loss_and_grad`, compiled with ``fullgraph=True``
        (the same object for the same ``mode`` and ``dynamic``).
    """
    if mode is None:
        return paper_b_loss_and_grad
    key = (mode, dynamic)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(paper_b_loss_and_grad, mode=mode, dynamic=dynamic, fullgraph=True)
    return _COMPILED[key]


def make_loss_and_grad(X: Tensor, y: Tensor, *, mode: str | None = "default") -> model.LossAndGrad:
    """Closure for :func:`companion.gd.run` on paper B's empirical loss, eq. (1), with trainable
    ``[W (E, k, d), v (E, k)]`` (Theorem 2's GD, :ref:`ch-three-phases`; :ref:`ch-three-phases` to
    :ref:`ch-beyond-two`), through :func:`compiled`.

    The data are validated once; the parameters' shapes at the first call (the first call also compiles). Same
    contract as :func:`companion.relunet.make_loss_and_grad`: the data are shared by every member, so
    ``closure.restrict(index)`` is the closure itself.

    Parameters
    ----------
    X
        Inputs ``(n, d)`` shared by the members.
    y
        Targets ``(n,)``.
    mode
        The ``torch.compile`` mode (:func:`compiled`); ``None`` runs the formulation eagerly.

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), [grad_W, grad_v])``.

    Raises
    ------
    ValueError
        When ``X`` is not a finite ``(n, d)`` tensor, ``y`` not a finite ``(n,)`` one, or they lie on different devices
        or dtypes; at a call, when the parameters are not ``[W (E, k, d), v (E, k)]``.

    Examples
    --------
    The eager formulation (``mode=None``) gives relunet's values to rounding:

    >>> import torch
    >>> from companion import device, fused, relunet
    >>> g = device.generator(0)
    >>> X, y = relunet.gaussian_data(40, 4, relunet.unit_target(4, device="cpu"), generator=g, device="cpu")
    >>> params = fused.init_params(3, 4, 2, 1.0, generator=g, device="cpu")
    >>> loss, grads = fused.make_loss_and_grad(X, y, mode=None)(params)
    >>> ref, ref_grads = relunet.make_loss_and_grad(X, y)(params)
    >>> bool(torch.allclose(loss, ref) and all(torch.allclose(a, b) for a, b in zip(grads, ref_grads)))
    True
    """
    validation.tensor("X", X, ndim=2)
    validation.tensor("y", y, ndim=1)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y has {y.shape[0]} entries but X has n = {X.shape[0]} rows")
    validation.same_device(X=X, y=y)
    fn = compiled(mode)
    checked: dict = {}

    def loss_and_grad_fn(params: Sequence[Tensor]):
        if len(params) != 2:
            raise ValueError("params must be [W (E, k, d), v (E, k)]")
        W, v = params
        if checked.get("shapes") != (tuple(W.shape), tuple(v.shape)):
            if v.ndim != 2:
                raise ValueError(f"fused.make_loss_and_grad is for one output: v must be (E, k), got {tuple(v.shape)}")
            _check(W, v, X)
            checked["shapes"] = (tuple(W.shape), tuple(v.shape))
        value, gW, gv = fn(W, v, X, y)
        return value, [gW, gv]

    loss_and_grad_fn.restrict = lambda members: loss_and_grad_fn  # the data are shared by every member
    return loss_and_grad_fn


def _check(W: Tensor, v: Tensor, X: Tensor) -> None:
    validation.tensor("W", W, ndim=3, finite=False)
    validation.tensor("v", v, ndim=2, finite=False)
    if v.shape != W.shape[:2]:
        raise ValueError(f"v has shape {tuple(v.shape)}, expected {tuple(W.shape[:2])} for W {tuple(W.shape)}")
    if X.shape[1] != W.shape[2]:
        raise ValueError(f"X has {X.shape[1]} features but W expects d = {W.shape[2]}")
    validation.same_device(W=W, v=v, X=X)
