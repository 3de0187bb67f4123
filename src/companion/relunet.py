"""Paper B's two-layer ReLU network on Gaussian data, batched over an ensemble (:ref:`ch-three-phases` to :ref:`ch-beyond-two`).

Network ``x ↦ Vᵀ ReLU(W x)`` with ``W ∈ R^{k×d}`` and output weights ``v ∈ R^k`` (one output) or
``V ∈ R^{k×r}`` (``r`` outputs, :ref:`ch-beyond-two`). Data ``x ~ N(0, I_d)``, targets ``y = A x`` with
``A = aᵀ`` (one output, default ``a = e1``) or ``A ∈ R^{r×d}`` with orthonormal rows. Empirical loss
(paper B, eq. (1))::

    L(V, W) = (1/2n) Σ_i ‖Vᵀ ReLU(W x_i) − y_i‖².

The paper writes the k = 2 network as ``v1 ReLU(w1ᵀx) − v2 ReLU(w2ᵀx)`` with ``v1, v2 > 0``; here the
sign lives inside ``v`` (``v = [+|v1|, −|v2|]``), so its planted solution ``W* = [a, −a]ᵀ`` for the
*effective weights* ``diag(|v|) W`` reads ``|v_i| w_i = sign(v_i) a`` (:func:`planted_error`).

Shapes. Every parameter carries a leading ensemble axis ``E``: ``W (E, k, d)``, ``v (E, k)`` or
``V (E, k, r)``. Data are shared by all members, ``X (n, d)`` and ``Y (n,)``/``(n, r)``, or drawn per
member, ``X (E, n, d)`` and ``Y (E, n)``/``(E, n, r)``. The engine's parameter list is ``[W, v]``
(trainable output weights) or ``[W]`` (output weights fixed), see :func:`make_loss_and_grad`.

The module speaks the verbs of :mod:`companion.model` over that list: :func:`init_params`, :func:`forward`,
:func:`loss_and_gradient` and :func:`make_loss_and_grad`. Per-tensor forms take ``(W, V)`` separately:
:func:`predict`, :func:`loss` and :func:`loss_and_gradient_wv`, the unchecked hot path of the closure.

The gradients are explicit (ReLU mask reused in the backward pass, two GEMMs per step for shared data);
:func:`loss_and_grad_autograd` is the reference they are tested against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import model, validation
from .device import randn, resolve

__all__ = [
    "unit_target",
    "orthonormal_rows",
    "gaussian_data",
    "init_params",
    "xavier_init",
    "gaussian_init",
    "theorem2_init",
    "forward",
    "predict",
    "loss",
    "loss_and_gradient",
    "loss_and_gradient_wv",
    "make_loss_and_grad",
    "loss_and_grad_autograd",
    "angles",
    "angles_to_target",
    "neuron_norms",
    "imbalance",
    "planted_error",
    "grouped_sums",
    "make_observers",
    "pairing_error",
    "growth_sign",
]

SCHEMES = ("xavier", "gaussian", "theorem2")


# ----------------------------------------------------------------------------------------------- data
def unit_target(d: int, *, device=None, dtype=None) -> Tensor:
    """The paper's target direction ``a = e1 ∈ R^d`` (Section 4), shape ``(d,)`` (:ref:`ch-three-phases` to
    :ref:`ch-sample-complexity`).

    Parameters
    ----------
    d : int
        The input dimension.
    device, dtype : optional
        Where the target goes (default: the policy of :mod:`companion.device`).

    Returns
    -------
    Tensor, (d,)
        ``e1``.

    Raises
    ------
    ValueError
        When ``d`` is not a positive int.
    """
    validation.positive_int("d", d)
    dev, dt = resolve(device, dtype)
    a = torch.zeros(d, device=dev, dtype=dt)
    a[0] = 1.0
    return a


def orthonormal_rows(r: int, d: int, *, generator: torch.Generator | None = None, device=None, dtype=None) -> Tensor:
    """A random ``A ∈ R^{r×d}`` with orthonormal rows (``A Aᵀ = I_r``), the multi-output target of
    Appendix E.1 (:ref:`ch-beyond-two`). QR of a Gaussian matrix, signs fixed so the law is Haar.

    Parameters
    ----------
    r : int
        The number of outputs, ``r ≤ d``.
    d : int
        The input dimension.
    generator : torch.Generator or None
        The CPU generator of the draw (:mod:`companion.device`).
    device, dtype : optional
        Where the matrix goes.

    Returns
    -------
    Tensor, (r, d)
        ``A`` with ``A Aᵀ = I_r``.

    Raises
    ------
    ValueError
        When ``r`` or ``d`` is not a positive int, or ``r > d``.
    """
    validation.positive_int("r", r)
    validation.positive_int("d", d)
    if r > d:
        raise ValueError(f"need r <= d for orthonormal rows, got r={r}, d={d}")
    dev, dt = resolve(device, dtype)
    g = randn((d, r), generator=generator, device=dev, dtype=dt)
    q, rr = torch.linalg.qr(g)
    q = q * torch.sign(torch.diagonal(rr)).unsqueeze(0)
    return q.T.contiguous()


def gaussian_data(
    n: int,
    d: int,
    target: Tensor,
    *,
    ensemble: int | None = None,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> tuple[Tensor, Tensor]:
    """``n`` samples ``x ~ N(0, I_d)`` with targets ``y = A x`` (paper B, Section 1.2; :ref:`ch-three-phases` to
    :ref:`ch-beyond-two`).

    ``target``: ``a (d,)`` (single output, ``y (…, n)``) or ``A (r, d)`` (``y (…, n, r)``).
    ``ensemble=None`` gives one shared data set ``X (n, d)``; ``ensemble=E`` gives independent data sets
    per member, ``X (E, n, d)``.

    Parameters
    ----------
    n : int
        The number of samples.
    d : int
        The input dimension.
    target : Tensor, (d,) or (r, d)
        ``a`` or ``A``.
    ensemble : int or None
        ``None`` for one shared data set, ``E`` for one per member.
    generator : torch.Generator or None
        The CPU generator of the draws.
    device, dtype : optional
        Where the data go.

    Returns
    -------
    X : Tensor, (n, d) or (E, n, d)
        The inputs.
    Y : Tensor, (n,), (n, r), (E, n) or (E, n, r)
        The targets ``A x``.

    Raises
    ------
    ValueError
        When a size is not a positive int, or ``target`` is not a finite ``(d,)`` or ``(r, d)`` tensor.
    """
    validation.positive_int("n", n)
    validation.positive_int("d", d)
    validation.tensor("target", target, ndim=(1, 2))
    if target.shape[-1] != d:
        raise ValueError(f"target has {target.shape[-1]} columns but d = {d}")
    dev, dt = resolve(device, dtype)
    shape = (n, d) if ensemble is None else (validation.positive_int("ensemble", ensemble), n, d)
    X = randn(shape, generator=generator, device=dev, dtype=dt)
    A = target.to(device=dev, dtype=dt)
    Y = X @ A if A.ndim == 1 else X @ A.T
    return X, Y


# ----------------------------------------------------------------------------------------------- init
def init_params(
    k: int,
    d: int,
    ensemble: int,
    sigma: float,
    *,
    scheme: str = "xavier",
    r: int | None = None,
    signs: Sequence[float] | None = None,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> list[Tensor]:
    """Paper B's initialisations as the engine's parameter list ``[W, v]`` (Section 4's Xavier-normal scale, the
    Gaussian of Section 3's remark, or Theorem 2's; :ref:`ch-three-phases`, :ref:`ch-failures`).

    Parameters
    ----------
    k, d
        Neurons and input dimension.
    ensemble
        Number of independent members ``E``.
    sigma
        The initial scale ``σ``.
    scheme
        ``"xavier"`` (:func:`xavier_init`, the default), ``"gaussian"`` (:func:`gaussian_init`) or ``"theorem2"``
        (:func:`theorem2_init`); the draws are those of the named function.
    r
        Number of outputs (``"xavier"`` only); ``None`` for one output.
    signs
        ``"theorem2"`` only: the output signs, ``k`` values ±1 (default ``[+, −, +, −, …]``).
    generator, device, dtype
        As everywhere in :mod:`companion.device`.

    Returns
    -------
    list[Tensor]
        ``[W (E, k, d), v (E, k)]`` (``V (E, k, r)`` for ``r`` outputs).

    Raises
    ------
    ValueError
        When ``scheme`` is unknown, ``r`` is given for a scheme other than ``'xavier'``, ``signs`` for one other than
        ``'theorem2'`` or with other than ``k`` entries, a size is not a positive int, or ``sigma`` is negative.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if r is not None and scheme != "xavier":
        raise ValueError(f"r outputs are drawn by the 'xavier' scheme only, not {scheme!r}")
    if signs is not None and scheme != "theorem2":
        raise ValueError(f"signs belong to the 'theorem2' scheme, not {scheme!r}")
    kw = dict(generator=generator, device=device, dtype=dtype)
    if scheme == "xavier":
        return list(xavier_init(k, d, ensemble, sigma, r=r, **kw))
    if scheme == "gaussian":
        return list(gaussian_init(k, d, ensemble, sigma, **kw))
    validation.positive_int("k", k)
    s = [(-1.0) ** i for i in range(k)] if signs is None else list(signs)
    if len(s) != k:
        raise ValueError(f"signs must have k = {k} entries, got {len(s)}")
    return list(theorem2_init(d, ensemble, sigma, signs=s, **kw))


def xavier_init(
    k: int,
    d: int,
    ensemble: int,
    sigma: float,
    *,
    r: int | None = None,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> tuple[Tensor, Tensor]:
    """PyTorch's Xavier-normal initialisation times ``σ`` (paper B, Section 4; :ref:`ch-failures` to :ref:`ch-beyond-two`).

    ``W_ij ~ N(0, σ² · 2/(k + d))``; the output layer ``nn.Linear(k, r)`` gets ``N(0, σ² · 2/(r + k))``
    (``r = 1`` when ``r is None``). Returns ``W (E, k, d)`` and ``v (E, k)`` (``r is None``) or
    ``V (E, k, r)``. The signs of ``v`` are i.i.d. fair coins: for k = 2 they agree with probability 1/2.

    Parameters
    ----------
    k : int
        The number of neurons.
    d : int
        The input dimension.
    ensemble : int
        The number of members ``E``.
    sigma : float
        The scale ``σ ≥ 0``.
    r : int or None
        The number of outputs (``None``: one, with ``v (E, k)``).
    generator : torch.Generator or None
        The CPU generator of the draws.
    device, dtype : optional
        Where the weights go.

    Returns
    -------
    W : Tensor, (E, k, d)
        The first-layer weights.
    V : Tensor, (E, k) or (E, k, r)
        The output weights.

    Raises
    ------
    ValueError
        When a size is not a positive int or ``sigma`` is negative.
    """
    validation.positive_int("k", k)
    validation.positive_int("d", d)
    validation.positive_int("ensemble", ensemble)
    validation.nonnegative("sigma", sigma)
    rr = 1 if r is None else validation.positive_int("r", r)
    dev, dt = resolve(device, dtype)
    W = sigma * math.sqrt(2.0 / (k + d)) * randn((ensemble, k, d), generator=generator, device=dev, dtype=dt)
    shape = (ensemble, k) if r is None else (ensemble, k, rr)
    V = sigma * math.sqrt(2.0 / (rr + k)) * randn(shape, generator=generator, device=dev, dtype=dt)
    return W, V


def gaussian_init(
    k: int, d: int, ensemble: int, sigma: float, *, generator: torch.Generator | None = None, device=None, dtype=None
) -> tuple[Tensor, Tensor]:
    """``w_i ~ N(0, σ²/d I_d)``, ``v_i ~ N(0, σ²/k)`` (Section 3's remark on large k; :ref:`ch-failures`'s k sweep).

    Returns ``W (E, k, d)``, ``v (E, k)``.

    Parameters
    ----------
    k : int
        The number of neurons.
    d : int
        The input dimension.
    ensemble : int
        The number of members ``E``.
    sigma : float
        The scale ``σ ≥ 0``.
    generator : torch.Generator or None
        The CPU generator of the draws.
    device, dtype : optional
        Where the weights go.

    Returns
    -------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.

    Raises
    ------
    ValueError
        When a size is not a positive int or ``sigma`` is negative.
    """
    validation.positive_int("k", k)
    validation.positive_int("d", d)
    validation.positive_int("ensemble", ensemble)
    validation.nonnegative("sigma", sigma)
    dev, dt = resolve(device, dtype)
    W = sigma / math.sqrt(d) * randn((ensemble, k, d), generator=generator, device=dev, dtype=dt)
    v = sigma / math.sqrt(k) * randn((ensemble, k), generator=generator, device=dev, dtype=dt)
    return W, v


def theorem2_init(
    d: int,
    ensemble: int,
    sigma: float,
    *,
    signs: Sequence[float] = (1.0, -1.0),
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> tuple[Tensor, Tensor]:
    """Theorem 2's initialisation (paper B, Section 3; :ref:`ch-three-phases` to :ref:`ch-sample-complexity`).

    ``w_i ~ N(0, σ²/d I_d)`` and ``v_i = s_i (σ/√d) ξ_i`` with ``ξ_i² ~ χ²_d`` (``ξ_i`` the norm of an
    independent ``N(0, I_d)`` vector) and the sign pattern ``s = signs`` (default ``[+, −]``, the
    paper's ``v1 ReLU(w1ᵀx) − v2 ReLU(w2ᵀx)``). So ``|v_i| ≈ σ ≈ ‖w_i‖``. Returns ``W (E, k, d)``, ``v (E, k)``
    with ``k = len(signs)``.

    Parameters
    ----------
    d : int
        The input dimension.
    ensemble : int
        The number of members ``E``.
    sigma : float
        The scale ``σ ≥ 0``.
    signs : sequence of float
        The signs ``s_i`` of the output weights, each ±1; ``k = len(signs)``.
    generator : torch.Generator or None
        The CPU generator of the draws.
    device, dtype : optional
        Where the weights go.

    Returns
    -------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.

    Raises
    ------
    ValueError
        When a size is not a positive int, ``sigma`` is negative, or ``signs`` is empty or not all ±1.
    """
    validation.positive_int("d", d)
    validation.positive_int("ensemble", ensemble)
    validation.nonnegative("sigma", sigma)
    s = [float(x) for x in signs]
    if not s or any(x not in (1.0, -1.0) for x in s):
        raise ValueError(f"signs must be a non-empty sequence of +1/-1, got {list(signs)!r}")
    k = len(s)
    dev, dt = resolve(device, dtype)
    W = sigma / math.sqrt(d) * randn((ensemble, k, d), generator=generator, device=dev, dtype=dt)
    xi = randn((ensemble, k, d), generator=generator, device=dev, dtype=dt).norm(dim=-1)  # ξ² ~ χ²_d
    v = torch.tensor(s, device=dev, dtype=dt) * (sigma / math.sqrt(d)) * xi
    return W, v


# ------------------------------------------------------------------------------------- loss, gradient
def _check(W: Tensor, V: Tensor, X: Tensor, Y: Tensor | None = None) -> None:
    validation.same_device(W=W, v=V, X=X, **({} if Y is None else {"Y": Y}))
    validation.tensor("W", W, ndim=3, finite=False)
    validation.tensor("v", V, ndim=(2, 3), finite=False)
    E, k, d = W.shape
    if V.shape[:2] != (E, k):
        raise ValueError(
            f"output weights have shape {tuple(V.shape)}, expected ({E}, {k}) or ({E}, {k}, r) for W {tuple(W.shape)}"
        )
    validation.tensor("X", X, ndim=(2, 3))
    if X.shape[-1] != d:
        raise ValueError(f"X has {X.shape[-1]} features but W expects d = {d}")
    if X.ndim == 3 and X.shape[0] != E:
        raise ValueError(f"X has ensemble size {X.shape[0]} but W has E = {E}")
    if Y is not None:
        validation.tensor("Y", Y)
        n = X.shape[-2]
        want = (n,) if V.ndim == 2 else (n, V.shape[2])
        got = tuple(Y.shape[1:]) if Y.ndim == len(want) + 1 else tuple(Y.shape)
        per_member_y = Y.ndim == len(want) + 1
        if got != want or per_member_y != (X.ndim == 3) or (per_member_y and Y.shape[0] != E):
            raise ValueError(
                f"Y has shape {tuple(Y.shape)}; expected {want} (shared data) or ({E}, *{want}) "
                f"with per-member X, for X {tuple(X.shape)} and output weights {tuple(V.shape)}"
            )


def _forward(W: Tensor, V: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
    """Hidden activations ``H = ReLU(Z)`` and predictions in the engine's internal layout.

    Shared ``X (n, d)``: ``H (n, k, E)`` (one GEMM against all ``k·E`` neurons at once, the ensemble axis
    innermost so the sums over ``k`` vectorise over members), predictions ``(n, E)`` or ``(n, E, r)``.
    Per-member ``X (E, n, d)``: ``H (E, n, k)`` (one bmm), predictions ``(E, n)`` or ``(E, n, r)``.
    The ReLU is applied in place: the mask ``1{Z > 0}`` is recovered later as ``H > 0``.
    """
    E, k, d = W.shape
    if X.ndim == 2:
        Wk = W.transpose(0, 1).reshape(k * E, d)  # neuron-major copy, (k·E, d)
        H = torch.mm(X, Wk.T).view(X.shape[0], k, E).clamp_min_(0)
        if V.ndim == 2:
            VT = V.T
            P = H[:, 0] * VT[0]
            for i in range(1, k):
                P.addcmul_(H[:, i], VT[i])
        else:
            P = torch.einsum("nke,ekr->ner", H, V)
    else:
        H = torch.bmm(X, W.transpose(1, 2)).clamp_min_(0)  # (E, n, k)
        P = torch.bmm(H, V.unsqueeze(-1)).squeeze(-1) if V.ndim == 2 else torch.bmm(H, V)
    return H, P


def predict(W: Tensor, V: Tensor, X: Tensor) -> Tensor:
    """Network outputs ``Vᵀ ReLU(W x_i)`` (paper B, Section 1.2; :ref:`ch-three-phases`): ``(E, n)`` or ``(E, n, r)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    V : Tensor, (E, k) or (E, k, r)
        The output weights.
    X : Tensor, (n, d) or (E, n, d)
        The inputs, shared or one sample per member.

    Returns
    -------
    Tensor, (E, n) or (E, n, r)
        The outputs.

    Raises
    ------
    ValueError
        When the shapes do not match, or the tensors lie on different devices or dtypes.
    """
    _check(W, V, X)
    _, P = _forward(W, V, X)
    return P.transpose(0, 1) if X.ndim == 2 else P


def forward(params: Sequence[Tensor], X: Tensor) -> Tensor:
    """Paper B's network outputs ``Vᵀ ReLU(W x_i)`` (Section 1.2; :ref:`ch-three-phases`).

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k) or V (E, k, r)]`` (output weights held fixed in training are passed here too).
    X
        Inputs ``(n, d)`` shared by the members, or ``(E, n, d)``.

    Returns
    -------
    Tensor
        ``(E, n)``, or ``(E, n, r)`` for ``r`` outputs.
    """
    W, V = model.two_layer_weights(params)
    return predict(W, V, X)


def loss(W: Tensor, V: Tensor, X: Tensor, Y: Tensor) -> Tensor:
    """Empirical loss ``(1/2n) Σ_i ‖Vᵀ ReLU(W x_i) − y_i‖²`` per member (paper B, eq. (1); :ref:`ch-three-phases`), ``(E,)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    V : Tensor, (E, k) or (E, k, r)
        The output weights.
    X : Tensor, (n, d) or (E, n, d)
        The inputs.
    Y : Tensor, (n,), (n, r), (E, n) or (E, n, r)
        The targets, shared with ``X`` or one set per member.

    Returns
    -------
    Tensor, (E,)
        The loss of every member.

    Raises
    ------
    ValueError
        As :func:`predict`, or when ``Y`` does not match.
    """
    _check(W, V, X, Y)
    return loss_and_gradient_wv(W, V, X, Y, need_grad=False)[0]


def loss_and_gradient(
    params: Sequence[Tensor], X: Tensor, Y: Tensor, *, fixed_v: Tensor | None = None
) -> tuple[Tensor, list[Tensor]]:
    """Paper B's empirical loss, eq. (1), and its explicit gradient (:ref:`ch-three-phases`; Theorem 2's GD).

    The values of :func:`make_loss_and_grad`'s closure, with every argument validated on every call.

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k) or V (E, k, r)]``, or ``[W]`` with ``fixed_v``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)``.
    Y
        Targets ``(n,)`` / ``(n, r)``, or ``(E, n)`` / ``(E, n, r)`` with per-member ``X``.
    fixed_v
        Output weights held fixed: ``(k,)`` / ``(k, r)`` for every member, or ``(E, k)`` / ``(E, k, r)``.

    Returns
    -------
    (loss, grads)
        ``loss (E,)`` and ``[grad_W, grad_v]`` (``[grad_W]`` with ``fixed_v``), shaped like ``params``.
    """
    return make_loss_and_grad(X, Y, fixed_v=fixed_v)(params)


def loss_and_gradient_wv(
    W: Tensor, V: Tensor, X: Tensor, Y: Tensor, *, train_v: bool = True, need_grad: bool = True
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Empirical loss and its explicit gradients for separate ``W`` and ``V`` (paper B, eq. (1);
    :ref:`ch-three-phases` to :ref:`ch-beyond-two`).
    No shape or value checks (this is the hot path of :func:`make_loss_and_grad`, which validates once).

    With ``R_i = Vᵀ ReLU(W x_i) − y_i`` and the mask ``D_i = diag(1{W x_i > 0})``::

        ∇_V L = (1/n) Σ_i ReLU(W x_i) R_iᵀ,     ∇_W L = (1/n) Σ_i D_i V R_i x_iᵀ.

    For one output, ``ReLU(z) = z·1{z > 0}`` gives both from one GEMM: with
    ``M_j = (1/n) Σ_i 1{w_jᵀx_i > 0} R_i x_i``, ``∇_{w_j} L = v_j M_j`` and ``∂L/∂v_j = ⟨w_j, M_j⟩``.
    Returns ``(loss (E,), grad_W (E, k, d), grad_V (E, k[, r]))``; ``grad_V`` is ``None`` when
    ``train_v=False``; both grads are ``None`` when ``need_grad=False``. Only the devices and dtypes are checked
    (a few attribute comparisons).

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    V : Tensor, (E, k) or (E, k, r)
        The output weights.
    X : Tensor, (n, d) or (E, n, d)
        The inputs. Per-member inputs stored feature-major (``X = Xt.mT`` for a contiguous ``Xt (E, d, n)``, as
        :func:`make_loss_and_grad` keeps them) take the GEMMs ``W Xᵀ`` and ``Xᵀ Sᵀ``, which read that layout at
        about the machine's bandwidth (17 % faster a call at ``E = 100, n = 1200, d = 200`` on a 2-core CPU);
        otherwise ``(X Wᵀ)ᵀ`` and ``S X``. The two agree to rounding.
    Y : Tensor, (n,), (n, r), (E, n) or (E, n, r)
        The targets.
    train_v : bool
        Whether to compute ``grad_V``.
    need_grad : bool
        Whether to compute any gradient.

    Returns
    -------
    loss : Tensor, (E,)
        The loss of every member.
    grad_W : Tensor, (E, k, d), or None
        Its gradient in ``W``.
    grad_V : Tensor, (E, k) or (E, k, r), or None
        Its gradient in ``V``.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=V, X=X, Y=Y)
    E, k, d = W.shape
    shared = X.ndim == 2
    n = X.shape[-2]
    if shared and V.ndim == 2:
        # The fast path (shared data, one output; benchmarks/README.md): member-major layout (E, k, n), the
        # forward GEMM Z = W Xᵀ with the ReLU in place, prediction and residual in one baddbmm, the mask
        # applied in place as sign(ReLU(Z))·R, and the backward GEMM Mᵀ = Xᵀ Sᵀ. Xᵀ is written X.t(): traced into
        # gd.run's compiled loop, two `.T` reads of the closed-over X would become two aliased graph inputs, which
        # torch.while_loop refuses; a method call is a view made inside the graph.
        A = torch.mm(W.reshape(E * k, d), X.t()).view(E, k, n).clamp_min_(0)  # ReLU(Z), (E, k, n)
        R = torch.baddbmm(Y.neg().view(1, 1, n), V.reshape(E, 1, k), A)  # residuals (E, 1, n)
        value = torch.bmm(R, R.mT).view(E).div_(2 * n)  # Σ_i R_i² per member
        if not need_grad:
            return value, None, None
        S = A.sign_().mul_(R)  # 1{Z > 0} R, in place
        M = torch.mm(X.t(), S.view(E * k, n).T).T.contiguous().view(E, k, d).div_(n)  # (E, k, d)
        return value, M * V.unsqueeze(-1), (torch.linalg.vecdot(W, M) if train_v else None)
    if not shared and V.ndim == 2:
        # Per-member data, one output: the same member-major layout as the shared fast path, with batched GEMMs
        # that each read X once, without a transposed copy, in the order that suits its layout: feature-major X
        # (a transposed view of a contiguous (E, d, n) tensor, make_loss_and_grad's) Z = W Xᵀ and Mᵀ = Xᵀ Sᵀ;
        # sample-major Z = (X Wᵀ)ᵀ (whose n × k output runs at up to twice the rate of W Xᵀ on the CPU for k = 2)
        # and M = S X. Xᵀ by X.transpose, not the X.mT attribute: traced into gd.run's compiled loop, each attribute
        # read of the closed-over X would become a graph input of its own, aliased to the others (refused).
        Xt = X.transpose(1, 2)
        feature_major = Xt.is_contiguous() and not X.is_contiguous()
        A = (torch.bmm(W, Xt) if feature_major else torch.bmm(X, W.mT).mT).clamp_min_(0)  # ReLU(Z), (E, k, n)
        R = torch.baddbmm(Y.neg().unsqueeze(1), V.unsqueeze(1), A)  # residuals (E, 1, n)
        value = torch.bmm(R, R.mT).view(E).div_(2 * n)
        if not need_grad:
            return value, None, None
        S = A.sign_().mul_(R)  # 1{Z > 0} R, in place
        M = (torch.bmm(Xt, S.mT).mT if feature_major else torch.bmm(S, X)).div_(n)  # (E, k, d)
        return value, M * V.unsqueeze(-1), (torch.linalg.vecdot(W, M) if train_v else None)
    H, P = _forward(W, V, X)
    # residual R in the internal layout: (n, E[, r]) for shared data, (E, n[, r]) per member
    R = P.sub_(Y.unsqueeze(1) if shared else Y)
    sq = R * R if V.ndim == 2 else (R * R).sum(-1)
    value = sq.sum(0 if shared else 1).div_(2 * n)
    if not need_grad:
        return value, None, None
    if V.ndim == 2:
        # M (E, k, d): masked residual-weighted data means, one GEMM / bmm
        if shared:
            G = torch.where(H > 0, R.unsqueeze(1), 0.0)  # (n, k, E)
            M = torch.mm(G.view(n, k * E).T, X).view(k, E, d).transpose(0, 1)
        else:
            G = torch.where(H > 0, R.unsqueeze(-1), 0.0)  # (E, n, k)
            M = torch.bmm(G.transpose(1, 2), X)
        M = M.div_(n) if M.is_contiguous() else M.contiguous().div_(n)
        gW = M * V.unsqueeze(-1)
        gV = (M * W).sum(-1) if train_v else None
        return value, gW, gV
    if shared:  # r outputs, internal layout (n, k, E)
        G = torch.where(H > 0, torch.einsum("ner,ekr->nke", R, V), 0.0)
        gW = torch.mm(G.view(n, k * E).T, X).view(k, E, d).transpose(0, 1).contiguous().div_(n)
        gV = torch.einsum("nke,ner->ekr", H, R).div_(n) if train_v else None
    else:  # r outputs, internal layout (E, n, k)
        G = torch.where(H > 0, torch.bmm(R, V.transpose(1, 2)), 0.0)
        gW = torch.bmm(G.transpose(1, 2), X).div_(n)
        gV = torch.bmm(H.transpose(1, 2), R).div_(n) if train_v else None
    return value, gW, gV


def make_loss_and_grad(X: Tensor, Y: Tensor, *, fixed_v: Tensor | None = None) -> model.LossAndGrad:
    """Closure for :func:`companion.gd.run` on paper B's empirical loss, eq. (1) (Theorem 2's GD in
    :ref:`ch-three-phases`; :ref:`ch-failures`, :ref:`ch-sample-complexity`, :ref:`ch-beyond-two`).

    The data are validated once here; the parameters' shapes against them at the first call. Trainable and
    fixed output weights are handled by :func:`companion.model.two_layer_closure`, as for the population loss.
    ``closure.restrict(index)`` is the closure of the members at positions ``index`` (per-member data and
    output weights sliced), the contract of :mod:`companion.model`. Per-member inputs with one output are kept
    as a feature-major copy (``E·n·d`` numbers besides the caller's ``X``), which :func:`loss_and_gradient_wv`'s
    GEMMs read at bandwidth.

    Parameters
    ----------
    X
        Inputs ``(n, d)`` shared by the members, or ``(E, n, d)``.
    Y
        Targets ``(n,)`` / ``(n, r)``, or ``(E, n)`` / ``(E, n, r)`` with per-member ``X``.
    fixed_v
        ``None``: ``params = [W (E, k, d), v (E, k) or V (E, k, r)]``, grads ``[grad_W, grad_v]``. Otherwise the
        output weights held fixed, ``(k,)`` / ``(k, r)`` for every member or ``(E, k)`` / ``(E, k, r)``:
        ``params = [W]``, grads ``[grad_W]``.

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), grads)``, the values of :func:`loss_and_gradient`.

    Raises
    ------
    ValueError
        When ``X`` or ``Y`` is not a finite floating tensor of its shape, or they (and ``fixed_v``) lie on different
        devices or dtypes; at the closure's first call, when the parameters do not match the data.

    Examples
    --------
    Theorem 2 in miniature: its initialisation at a small scale, ``n = 10 d`` samples, GD with ``μ = 0.1``
    reaches the planted solution:

    >>> from companion import device, gd, relunet
    >>> g = device.generator(0)
    >>> a = relunet.unit_target(10, device="cpu")
    >>> X, Y = relunet.gaussian_data(100, 10, a, generator=g, device="cpu")
    >>> params = relunet.init_params(2, 10, 4, 1e-3, scheme="theorem2", generator=g, device="cpu")
    >>> res = gd.run(relunet.make_loss_and_grad(X, Y), params, 1500, 0.1, progress=False)
    >>> bool(relunet.planted_error(*res.params, a).max() < 1e-6)
    True
    """
    validation.same_device(X=X, Y=Y, **({} if fixed_v is None else {"fixed_v": fixed_v}))
    validation.tensor("X", X, ndim=(2, 3))
    validation.tensor("Y", Y, ndim=(1, 2, 3))
    per_member = X.ndim == 3
    if per_member and Y.ndim == 2 and X.shape[-1] > 1 and X.shape[-2] > 1:
        X = X.mT.contiguous().mT  # feature-major, once: the GEMMs of loss_and_gradient_wv read it at bandwidth

    def rebuild(index: Tensor, v: Tensor | None) -> model.LossAndGrad:
        return make_loss_and_grad(X[index] if per_member else X, Y[index] if per_member else Y, fixed_v=v)

    return model.two_layer_closure(
        lambda W, V, train_v: loss_and_gradient_wv(W, V, X, Y, train_v=train_v),
        lambda W, V: _check(W, V, X, Y),
        rebuild,
        fixed_v,
        vector_outputs=Y.ndim == X.ndim,
    )


def loss_and_grad_autograd(W: Tensor, V: Tensor, X: Tensor, Y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Reference for :func:`loss_and_gradient_wv` by reverse-mode autograd through ``torch.relu`` (:ref:`ch-three-phases`'s
    check; tests). Returns ``(loss (E,), grad_W, grad_V)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    V : Tensor, (E, k) or (E, k, r)
        The output weights.
    X : Tensor, (n, d) or (E, n, d)
        The inputs.
    Y : Tensor, (n,), (n, r), (E, n) or (E, n, r)
        The targets.

    Returns
    -------
    loss : Tensor, (E,)
        The loss of every member.
    grad_W : Tensor, (E, k, d)
        Its gradient in ``W``.
    grad_V : Tensor, (E, k) or (E, k, r)
        Its gradient in ``V``.

    Raises
    ------
    ValueError
        As :func:`loss`.
    """
    _check(W, V, X, Y)
    W = W.detach().clone().requires_grad_(True)
    V = V.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        Xe = X.expand(W.shape[0], *X.shape) if X.ndim == 2 else X
        H = torch.relu(Xe @ W.transpose(1, 2))  # (E, n, k)
        P = H @ V.unsqueeze(-1) if V.ndim == 2 else H @ V
        P = P.squeeze(-1) if V.ndim == 2 else P
        Ye = Y.expand(W.shape[0], *Y.shape) if Y.ndim == P.ndim - 1 else Y
        value = 0.5 * ((P - Ye) ** 2).reshape(W.shape[0], -1).sum(1) / X.shape[-2]
        gW, gV = torch.autograd.grad(value.sum(), (W, V))
    return value.detach(), gW, gV


# -------------------------------------------------------------------------------------------- observers
def _unit(a: Tensor) -> Tensor:
    return a / a.norm()


def angles(W: Tensor, a: Tensor) -> Tensor:
    """Angle in ``[0, π]`` between each ``w_i`` and ``a`` (:ref:`ch-three-phases`), ``(E, k)``; ``π/2`` at ``w_i = 0``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (E, k)
        The angle of each neuron to ``a``.

    Raises
    ------
    ValueError
        When ``W`` and ``a`` lie on different devices or dtypes.
    """
    validation.same_device(W=W, a=a)
    cos = (W @ _unit(a)) / W.norm(dim=-1).clamp_min(torch.finfo(W.dtype).tiny)
    return torch.arccos(cos.clamp(-1.0, 1.0))


def angles_to_target(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """Angle θ_i between ``w_i`` and ``sign(v_i) a`` (its planted direction ±a; Lemma 4, :ref:`ch-three-phases`), ``(E, k)``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (E, k)
        θ_i, in ``[0, π]``.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v, a=a)
    th = angles(W, a)
    return torch.where(v >= 0, th, math.pi - th)


def neuron_norms(W: Tensor) -> Tensor:
    """``‖w_i‖`` per neuron, ``(E, k)`` (Lemma 5, :ref:`ch-three-phases`).

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.

    Returns
    -------
    Tensor, (E, k)
        ``‖w_i‖``.
    """
    return W.norm(dim=-1)


def imbalance(W: Tensor, v: Tensor) -> Tensor:
    """Lemma 3's imbalance ``b_i = ‖w_i‖² − v_i²`` (``‖v_i‖²`` for vector outputs), ``(E, k)`` (:ref:`ch-three-phases`).

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k) or (E, k, r)
        The output weights.

    Returns
    -------
    Tensor, (E, k)
        ``b_i``.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v)
    vv = v * v if v.ndim == 2 else (v * v).sum(-1)
    return (W * W).sum(-1) - vv


def planted_error(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """``‖diag(|v|) W − W*‖_F`` with ``W*_i = sign(v_i) a`` (Theorem 2's error; :ref:`ch-three-phases` to
    :ref:`ch-sample-complexity`), ``(E,)``.

    For k = 2 and signs ``[+, −]`` this is the paper's ``‖diag([v1, v2]) W − [a, −a]ᵀ‖``. Equivalently
    ``‖diag(v) W − 1 aᵀ‖_F``: every neuron's contribution ``v_i w_i`` should equal ``a``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (E,)
        The planted error.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v, a=a)
    return (v.unsqueeze(-1) * W - a).flatten(1).norm(dim=1)


def grouped_sums(W: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Sums of ``|v_i| w_i`` over the neurons with ``v_i > 0`` and with ``v_i < 0`` (Section 4, Figure 2;
    :ref:`ch-beyond-two`): ``(E, d)`` each; they should recover ``+a`` and ``−a``.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights.
    v : Tensor, (E, k)
        The output weights.

    Returns
    -------
    pos, neg : Tensor, (E, d)
        The sums over the neurons with positive and with negative output weight.

    Raises
    ------
    ValueError
        When the tensors lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v)
    vw = v.abs().unsqueeze(-1) * W
    pos = (vw * (v > 0).unsqueeze(-1)).sum(1)
    neg = (vw * (v < 0).unsqueeze(-1)).sum(1)
    return pos, neg


def make_observers(a: Tensor, *, fixed_v: Tensor | None = None) -> dict[str, Callable]:
    """Observers for :func:`companion.gd.run` (:ref:`ch-three-phases`): ``theta (E, k)`` (angle to ``sign(v_i) a``),
    ``v (E, k)``, ``w_norm (E, k)``, ``imbalance (E, k)``, ``error (E,)`` (:func:`planted_error`).

    Params are ``[W, v]``, or ``[W]`` with ``fixed_v``.

    Parameters
    ----------
    a : Tensor, (d,)
        The target.
    fixed_v : Tensor, (k,) or (E, k), or None
        The output weights when they are held fixed (params ``[W]``).

    Returns
    -------
    dict of str to callable
        Observers ``(params, loss, grads) -> Tensor`` named ``"theta"``, ``"v"``, ``"w_norm"``, ``"imbalance"`` and
        ``"error"``.

    Raises
    ------
    ValueError
        When ``a`` is not a finite 1-d tensor, or ``a`` and ``fixed_v`` lie on different devices or dtypes.
    """
    if fixed_v is not None:
        validation.same_device(a=a, fixed_v=fixed_v)
    validation.tensor("a", a, ndim=1)

    def vof(params):
        return params[1] if fixed_v is None else fixed_v.expand(params[0].shape[0], *fixed_v.shape[-1:])

    return {
        "theta": lambda p, l, g: angles_to_target(p[0], vof(p), a),
        "v": lambda p, l, g: vof(p).clone(),
        "w_norm": lambda p, l, g: neuron_norms(p[0]),
        "imbalance": lambda p, l, g: imbalance(p[0], vof(p)),
        "error": lambda p, l, g: planted_error(p[0], vof(p), a),
    }


# ----------------------------------------------------------------------------------- pairing (r outputs)
def pairing_error(W: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
    """Appendix E.1's pairing ``W∞ ≈ [I_r, −I_r]ᵀ W``, ``V∞ ≈ [I_r, −I_r]ᵀ V`` (:ref:`ch-beyond-two`).

    For each member, the best partition of the ``k = 2r`` neurons into ``r`` pairs ``(i, j)`` minimising
    ``Σ_pairs ‖θ_i + θ_j‖²`` with ``θ_i = (w_i, v_i) ∈ R^{d+r}`` (an exact minimum-weight perfect
    matching, networkx); the pairing error is ``(Σ_pairs ‖θ_i + θ_j‖² / Σ_i ‖θ_i‖²)^{1/2}``: 0 for an
    exact pairing, about 1 for unrelated neurons. Returns ``(error (E,), pairs (E, r, 2) long)``.
    CPU, Python loop over members (a post-processing step, not the training hot path).

    Parameters
    ----------
    W : Tensor, (E, 2r, d)
        The first-layer weights.
    V : Tensor, (E, 2r) or (E, 2r, r)
        The output weights.

    Returns
    -------
    error : Tensor, (E,)
        The pairing error.
    pairs : Tensor, (E, r, 2), int64
        The best pairs of neurons.

    Raises
    ------
    ValueError
        When the shapes are not ``(E, 2r, d)`` and ``(E, 2r[, r])``, or the tensors lie on different devices or
        dtypes.
    """
    import networkx as nx

    validation.same_device(W=W, V=V)
    validation.tensor("W", W, ndim=3)
    validation.tensor("V", V, ndim=(2, 3))
    E, k, _ = W.shape
    if V.shape[:2] != (E, k) or k % 2:
        raise ValueError(f"need W (E, 2r, d) and V (E, 2r[, r]); got {tuple(W.shape)}, {tuple(V.shape)}")
    T = torch.cat([W, V.reshape(E, k, -1)], dim=-1).detach().cpu().double()
    cost = ((T.unsqueeze(2) + T.unsqueeze(1)) ** 2).sum(-1).numpy()  # (E, k, k)
    total = (T**2).sum((1, 2)).numpy()
    errs, pairs = [], []
    big = float(cost.max()) + 1.0
    for e in range(E):
        g = nx.Graph()
        for i in range(k):
            for j in range(i + 1, k):
                g.add_edge(i, j, weight=big - cost[e, i, j])
        m = nx.max_weight_matching(g, maxcardinality=True)
        pe = sorted(tuple(sorted(p)) for p in m)
        pairs.append(pe)
        errs.append(math.sqrt(sum(cost[e, i, j] for i, j in pe) / max(total[e], 1e-300)))
    return torch.tensor(errs, dtype=torch.float64), torch.tensor(pairs, dtype=torch.long)


def growth_sign(W: Tensor, v: Tensor, a: Tensor, X: Tensor | None = None) -> Tensor:
    """The sign each ``v_i`` ends the small-initialisation phase with (Section 4's failure mechanism; :ref:`ch-failures`).

    Near the origin the loss is ``L ≈ ½‖a‖² − Σ_i v_i w_iᵀ c_i`` with ``c_i = E[1{w_iᵀx > 0} x xᵀ] a`` (``= a/2``
    for the population; ``(1/n) Σ_j 1{w_iᵀx_j > 0} x_j x_jᵀ a`` for data ``X (n, d)``), so GD moves
    ``(v_i, w_iᵀĉ_i)`` by ``μ‖c_i‖ [[0, 1], [1, 0]]``: the mode ``v_i + w_iᵀĉ_i`` grows by ``1 + μ‖c_i‖`` per
    step and ``v_i − w_iᵀĉ_i`` decays. The sign of ``v_i`` after the growth phase is therefore
    ``sign(v_i(0) + w_i(0)ᵀĉ_i)``, which differs from ``sign(v_i(0))`` when ``|v_i(0)| < |w_i(0)ᵀĉ_i|``
    (possible whenever ``‖w_i‖ > |v_i|``, e.g. Xavier initialisation). ``W (E, k, d)``, ``v (E, k)``,
    ``a (d,)`` → ``(E, k)`` of ±1.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The initial first-layer weights.
    v : Tensor, (E, k)
        The initial output weights.
    a : Tensor, (d,)
        The target.
    X : Tensor, (n, d), or None
        The sample, or ``None`` for the population.

    Returns
    -------
    Tensor, (E, k)
        ±1, the sign of each ``v_i`` after the growth phase.

    Raises
    ------
    ValueError
        When a tensor is not finite of its shape, or they lie on different devices or dtypes.
    """
    validation.same_device(W=W, v=v, a=a, **({} if X is None else {"X": X}))
    validation.tensor("W", W, ndim=3)
    validation.tensor("v", v, ndim=2)
    validation.tensor("a", a, ndim=1)
    if X is None:
        c = (a / 2).expand_as(W)
    else:
        validation.tensor("X", X, ndim=2)
        E, k, d = W.shape
        mask = (X @ W.reshape(E * k, d).T > 0).to(X.dtype)  # (n, E·k)
        c = ((mask * (X @ a).unsqueeze(1)).T @ X / X.shape[0]).view(E, k, d)
    chat = c / c.norm(dim=-1, keepdim=True)
    return torch.sign(v + (W * chat).sum(-1))
