"""Curvature of a loss of a flat parameter vector: Hessian-vector products and extreme eigenvalues (:ref:`ch-smoothness`).

Generic over the model: a *loss function* here maps a batch of flat parameter vectors ``theta`` of shape
``(E, P)`` to one loss per member, shape ``(E,)``, with members independent (member ``e``'s loss depends on
``theta[e]`` only). Then the Hessian of ``Σ_e loss_e`` is block diagonal and one forward-over-reverse pass
(``torch.func.jvp`` of ``torch.func.grad``) gives every member's Hessian-vector product at once.

* :func:`hvp` — ``H_e v_e`` for all members, ``(E, P)``;
* :func:`hessian` — dense ``(E, P, P)`` Hessians (small ``P``; the reference for validation);
* :func:`lanczos` / :func:`extreme_eigenvalues` / :func:`top_eigenvalue` / :func:`spectral_norm` — the package's
  one Lanczos iteration, vectorised over the ensemble (torch, CPU or GPU): full reorthogonalisation by default, or
  the three-vector recurrence for operators too large to store a Krylov basis of (paper C's output Hessians,
  :ref:`ch-parameter-ball`), with the running extreme Ritz values and the top Ritz vector on request (:class:`LanczosResult`);
* :func:`eigsh` — the same quantities through ``scipy.sparse.linalg.eigsh`` on a ``LinearOperator``, one
  member at a time (an independent reference);
* :func:`flatten` / :func:`unflatten` / :func:`deepnet_loss_fn` — adapters for parameter lists (paper A's
  :mod:`companion.deepnet`, paper C's :mod:`companion.widenet`, :ref:`ch-parameter-ball`) and for dicts of tensors.

Validated in float64 against the dense Hessian to ``rtol = 1e-8`` (``tests/unit/test_curvature.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from . import deepnet, validation
from .device import randn

__all__ = [
    "flatten",
    "unflatten",
    "deepnet_loss_fn",
    "hvp",
    "hessian",
    "LanczosResult",
    "lanczos",
    "extreme_eigenvalues",
    "top_eigenvalue",
    "spectral_norm",
    "eigsh",
    "loss_fn_member",
]

LossFn = Callable[[Tensor], Tensor]  # (E, P) -> (E,)


def _check_theta(theta: Tensor) -> Tensor:
    return validation.tensor("theta", theta, ndim=2)


def _loss_values(loss_fn: LossFn, theta: Tensor) -> Tensor:
    out = loss_fn(theta)
    if not isinstance(out, Tensor) or out.shape != theta.shape[:1]:
        raise ValueError(
            f"loss_fn must map theta (E, P) to a loss of shape (E,) = ({theta.shape[0]},), got {getattr(out, 'shape', type(out))}"
        )
    return out


# --------------------------------------------------------------------------------------------- adapters
FLATTEN_COPY_MIN = 1 << 16  # numbers from which flatten copies block by block instead of concatenating


def flatten(params: Sequence[Tensor] | dict) -> Tensor:
    """Concatenate parameter tensors ``(E, …)`` into flat vectors ``(E, P)`` (row-major, layer by layer).

    ``params``: a list/tuple of tensors (the parameter lists of :mod:`companion.model`, e.g. paper C's
    :mod:`companion.widenet`, :ref:`ch-parameter-ball`), or a dict of them (flattened in its key order).

    Parameters
    ----------
    params : sequence of Tensor, each (E, ...), or dict of str to Tensor
        A non-empty parameter list (or dict) with one leading ensemble size, on one device with one dtype.

    Returns
    -------
    Tensor, (E, P)
        ``P`` the number of parameters of one member.

    Raises
    ------
    ValueError
        When ``params`` is empty or not a list, tuple or dict, its tensors differ in ``E``, device or dtype.
    """
    if isinstance(params, dict):
        params = list(params.values())
    if not isinstance(params, (list, tuple)) or not params:
        raise ValueError("params must be a non-empty list (or dict) of tensors with a leading ensemble axis")
    E = params[0].shape[0]
    if any(p.shape[0] != E for p in params):
        raise ValueError("every parameter tensor needs the same leading ensemble size")
    validation.same_device(**{f"params[{i}]": p for i, p in enumerate(params)})
    sizes = [p[0].numel() for p in params]  # per member
    if E * sum(sizes) < FLATTEN_COPY_MIN:
        return torch.cat([p.reshape(E, -1) for p in params], dim=1)  # few numbers: the fewest operations
    out = torch.empty((E, sum(sizes)), dtype=params[0].dtype, device=params[0].device)
    offset = 0
    for p, size in zip(params, sizes):
        # each tensor copied once into its block, whatever its strides (a reshape of a transposed gradient would
        # copy it first, and a concatenation copy it again); the same numbers as the concatenation
        out[:, offset : offset + size].view(p.shape).copy_(p)
        offset += size
    return out


def unflatten(theta: Tensor, shapes: Sequence[Sequence[int]] | dict) -> list[Tensor] | dict:
    """Inverse of :func:`flatten`: ``theta (E, P)`` into tensors ``(E, *shape)`` for each per-member ``shape``.

    ``shapes``: a list of per-member shapes (returns a list of views), or a dict ``{name: shape}`` (returns a
    dict in that key order).

    Parameters
    ----------
    theta : Tensor, (E, P)
        Flat parameter vectors, ``P`` the total size of ``shapes``.
    shapes : sequence of sequence of int, or dict of str to sequence of int
        The per-member shapes, in order.

    Returns
    -------
    list of Tensor or dict of str to Tensor
        Views of ``theta`` of shapes ``(E, *shape)``, a dict when ``shapes`` is one.

    Raises
    ------
    ValueError
        When ``theta`` is not ``(E, P)`` with ``P`` the total size of ``shapes``.
    """
    names = None
    if isinstance(shapes, dict):
        names, shapes = list(shapes), list(shapes.values())
    sizes = [math.prod(s) for s in shapes]
    if theta.ndim != 2 or theta.shape[1] != sum(sizes):
        raise ValueError(f"theta must be (E, {sum(sizes)}) for shapes {list(map(tuple, shapes))}, got {tuple(theta.shape)}")
    out, i = [], 0
    for s, n in zip(shapes, sizes):
        out.append(theta[:, i : i + n].reshape(theta.shape[0], *s))
        i += n
    return out if names is None else dict(zip(names, out))


def deepnet_loss_fn(params_like: Sequence[Tensor], X: Tensor, y: Tensor, act) -> LossFn:
    """Paper A's loss ``𝓛`` as a function of flat parameters ``(E, P) -> (E,)`` for networks shaped like
    ``params_like`` (a parameter list, :mod:`companion.deepnet`). Paper A, Lemma 4.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    params_like : sequence of Tensor, each (E, ...)
        A parameter list of :mod:`companion.deepnet` giving the shapes (its values are not used).
    X : Tensor, (n, d_0) or (E, n, d_0)
        The inputs.
    y : Tensor, (n,) or (E, n)
        The targets.
    act : str or Activation
        The activation.

    Returns
    -------
    callable, Tensor (E, P) -> Tensor (E,)
        The loss of every member at flat parameters.
    """
    params_like = deepnet.check_params(params_like)
    shapes = [tuple(p.shape[1:]) for p in params_like]
    return lambda theta: deepnet.loss(unflatten(theta, shapes), X, y, act)


# ------------------------------------------------------------------------------------------ HVP, dense
def hvp(loss_fn: LossFn, theta: Tensor, v: Tensor) -> Tensor:
    """Hessian-vector products ``∇²loss_e(θ_e) v_e`` for every member, forward-over-reverse
    (``torch.func.jvp`` of ``torch.func.grad``). ``theta``, ``v``: ``(E, P)``; returns ``(E, P)``.

    Used for the local smoothness of paper A's loss, Lemma 4.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent (module docstring).
    theta : Tensor, (E, P)
        The point.
    v : Tensor, (E, P)
        One direction per member.

    Returns
    -------
    Tensor, (E, P)
        ``∇²loss_e(θ_e) v_e``, detached.

    Raises
    ------
    ValueError
        When ``theta`` or ``v`` is not a finite floating ``(E, P)`` tensor, they differ in shape, device or dtype, or
        ``loss_fn`` does not return ``(E,)``.
    """
    validation.same_device(theta=theta, v=v)
    _check_theta(theta)
    validation.tensor("v", v, ndim=2)
    if v.shape != theta.shape:
        raise ValueError(f"v must have the shape of theta {tuple(theta.shape)}, got {tuple(v.shape)}")
    _loss_values(loss_fn, theta.detach())
    total = lambda th: loss_fn(th).sum()
    return torch.func.jvp(torch.func.grad(total), (theta.detach(),), (v,))[1].detach()


def hessian(loss_fn: LossFn, theta: Tensor) -> Tensor:
    """Dense Hessians ``(E, P, P)`` by ``P`` Hessian-vector products against the unit vectors (small ``P`` only).

    The reference that :func:`lanczos` is validated against (:ref:`ch-smoothness`).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point.

    Returns
    -------
    Tensor, (E, P, P)
        Every member's Hessian, symmetrised.

    Raises
    ------
    ValueError
        As :func:`hvp`.
    """
    _check_theta(theta)
    E, P = theta.shape
    cols = [
        hvp(loss_fn, theta, torch.zeros_like(theta).index_fill_(1, torch.tensor([k], device=theta.device), 1.0)) for k in range(P)
    ]
    H = torch.stack(cols, dim=2)
    return 0.5 * (H + H.transpose(1, 2))


# -------------------------------------------------------------------------------------------- Lanczos
@dataclass(frozen=True)
class LanczosResult:
    """What :func:`lanczos` returns when asked for more than the Ritz values.

    ``ritz``: the Ritz values after the last step, ascending, ``(E, k)``; ``low``/``high``: the smallest and
    largest Ritz value after each step, ``(E, k)`` (column ``j`` after ``j + 1`` steps: extreme Ritz values converge
    monotonically from inside the spectrum, so ``max(|low|, |high|)`` is a lower estimate of the operator norm
    that increases with ``j``); ``vector``: the unit Ritz vector of the Ritz value of largest modulus, ``(E, P)``
    (``None`` unless asked)."""

    ritz: Tensor
    low: Tensor
    high: Tensor
    vector: Tensor | None = None

    @property
    def norm(self) -> Tensor:
        """``max(|λ_min|, |λ_max|)`` of the Ritz values per member, ``(E,)``: the estimate of ``‖A‖_op``."""
        return torch.maximum(self.ritz[:, 0].abs(), self.ritz[:, -1].abs())


def _project_out(w: Tensor, vecs: Sequence[Tensor]) -> Tensor:
    for q in vecs:
        w = w - (w * q).sum(1, keepdim=True) * q
    return w


def lanczos(
    matvec: Callable[[Tensor], Tensor],
    E: int,
    P: int,
    steps: int,
    *,
    generator: torch.Generator | None = None,
    device=None,
    dtype=torch.float64,
    v0: Tensor | None = None,
    reorthogonalize: bool = True,
    history: bool = False,
    vector: bool = False,
    keep_basis: bool = False,
):
    """Batched Lanczos on ``E`` symmetric ``P×P`` operators at once (the package's one Lanczos iteration).

    ``matvec``: ``(E, P) -> (E, P)``, member ``e``'s operator applied to row ``e``. Runs ``k = min(steps, P)``
    iterations from ``v0`` (``(E, P)``; default a Gaussian draw from ``generator``, drawn on the CPU).

    * ``reorthogonalize=True`` (default): full reorthogonalisation against the stored Krylov basis
      (``E·k·P`` numbers). When a member's Krylov space is exhausted (``β ≈ 0``) it restarts with a fresh random
      vector orthogonal to the previous ones (``β = 0`` in ``T``), so with ``k = P`` the Ritz values are all the
      eigenvalues.
    * ``reorthogonalize=False``: the plain three-term recurrence, holding three vectors per member whatever
      ``k`` (for operators too large to store a basis of, such as paper C's output Hessians at width 4096,
      :ref:`ch-parameter-ball`). Lost orthogonality only duplicates converged Ritz values; the extremes are not moved.
      With ``keep_basis`` the recurrence's vectors are also stored (``E·k·P`` numbers, nothing reorthogonalised), so
      that the Ritz vector is read from them instead of rebuilt: the same vector, without the second pass.

    Returns the Ritz values, ascending, ``(E, k)``; with ``history`` or ``vector`` a :class:`LanczosResult`
    (the running extremes, and the unit Ritz vector of the largest-modulus Ritz value — without
    reorthogonalisation it is rebuilt by a second, identical pass of the recurrence, so memory stays at three
    vectors). Paper A, Lemma 4.5 (:ref:`ch-smoothness`) and paper C's output Hessian (:ref:`ch-parameter-ball`).

    Parameters
    ----------
    matvec : callable, Tensor (E, P) -> Tensor (E, P)
        Applies member ``e``'s symmetric operator to row ``e``.
    E, P : int
        The number of operators and their size.
    steps : int
        The number of iterations (at most ``P`` are run).
    generator : torch.Generator or None
        The CPU generator of the start vector and of restarts.
    device : torch.device, str or None
        Where the vectors live (default: ``v0``'s device, else the policy of :mod:`companion.device`).
    dtype : torch.dtype
        The vectors' dtype.
    v0 : Tensor, (E, P), or None
        The start vectors (a non-zero row per member), normalised here.
    reorthogonalize : bool
        Full reorthogonalisation against the stored basis, or the three-vector recurrence.
    history : bool
        Also return the extreme Ritz values after every iteration.
    vector : bool
        Also return the unit Ritz vector of the largest-modulus Ritz value.
    keep_basis : bool
        With ``reorthogonalize=False``: store the recurrence's vectors for the Ritz vector (no second pass).

    Returns
    -------
    Tensor, (E, k), or LanczosResult
        The Ritz values, ascending, ``k = min(steps, P)``; a :class:`LanczosResult` with ``history`` or ``vector``.

    Raises
    ------
    ValueError
        When ``E``, ``P`` or ``steps`` is not a positive int, ``v0`` is not ``(E, P)`` or has a zero row, or
        ``matvec`` does not return ``(E, P)``.
    """
    validation.positive_int("E", E)
    validation.positive_int("P", P)
    validation.positive_int("steps", steps)
    k = min(steps, P)
    dev = torch.device(device) if device is not None else None
    if v0 is None:
        q = randn((E, P), generator=generator, dtype=dtype, device=dev)
    else:
        validation.tensor("v0", v0, ndim=2)
        if v0.shape != (E, P):
            raise ValueError(f"v0 must have shape ({E}, {P}), got {tuple(v0.shape)}")
        q = v0.to(dtype=dtype, device=dev if dev is not None else v0.device)
        if bool((q.norm(dim=1) == 0).any()):
            raise ValueError("v0 must have a non-zero row for every member")
    q = q / q.norm(dim=1, keepdim=True)
    q_start = q
    Q = torch.zeros(E, k, P, dtype=dtype, device=q.device) if reorthogonalize or (keep_basis and vector) else None
    alphas = torch.zeros(E, k, dtype=dtype, device=q.device)
    betas = torch.zeros(E, max(k - 1, 0), dtype=dtype, device=q.device)
    scale = torch.zeros(E, dtype=dtype, device=q.device)
    restarts = {}
    q_prev = None
    for j in range(k):
        if Q is not None:
            Q[:, j] = q
        w = matvec(q)
        if not isinstance(w, Tensor) or w.shape != (E, P):
            raise ValueError(f"matvec must return shape ({E}, {P}), got {tuple(getattr(w, 'shape', ()))}")
        alphas[:, j] = torch.einsum("ep,ep->e", w, q)  # batched dot products, no (E, P) temporary
        scale = torch.maximum(scale, w.norm(dim=1))
        if reorthogonalize:
            basis = Q[:, : j + 1]
            for _ in range(2):  # full reorthogonalisation, twice ("twice is enough")
                w = w - torch.einsum("ejp,ej->ep", basis, torch.einsum("ejp,ep->ej", basis, w))
        else:
            w = _three_term(w, q, alphas[:, j], q_prev, None if q_prev is None else betas[:, j - 1])
        if j == k - 1:
            break
        beta = w.norm(dim=1)
        norm = beta
        dead = beta <= 1e-10 * scale.clamp_min(torch.finfo(dtype).tiny)
        if bool(dead.any()):  # restart those members with a random vector orthogonal to their basis
            r = randn((E, P), generator=generator, dtype=dtype, device=q.device)
            for _ in range(2):
                if reorthogonalize:
                    r = r - torch.einsum("ejp,ej->ep", Q[:, : j + 1], torch.einsum("ejp,ep->ej", Q[:, : j + 1], r))
                else:
                    r = _project_out(r, [q] + ([] if q_prev is None else [q_prev]))
            w = torch.where(dead[:, None], r, w)
            beta = torch.where(dead, torch.zeros_like(beta), beta)
            restarts[j] = (dead, r / r.norm(dim=1, keepdim=True))
            norm = w.norm(dim=1)
        betas[:, j] = beta
        q_prev, q = q, w.div_(norm[:, None])  # w is this iteration's own tensor
    T = torch.diag_embed(alphas) + torch.diag_embed(betas, 1) + torch.diag_embed(betas, -1)
    if not (history or vector):
        return torch.linalg.eigvalsh(T)
    ev, vecs = torch.linalg.eigh(T)
    y = None
    if vector:
        idx = torch.where(ev[:, -1].abs() >= ev[:, 0].abs(), k - 1, 0)
        coef = vecs[torch.arange(E, device=vecs.device), :, idx]  # (E, k)
        if Q is not None:
            y = torch.einsum("ej,ejp->ep", coef, Q)
        else:
            y = _lanczos_rebuild(matvec, q_start, alphas, betas, coef, restarts)
        y = y / y.norm(dim=1, keepdim=True)
    if history:
        low, high = _running_ritz_extremes(alphas, betas)
    else:
        low, high = ev[:, :1].expand(E, k), ev[:, -1:].expand(E, k)
    return LanczosResult(ev, low, high, y)


def _running_ritz_extremes(alphas: Tensor, betas: Tensor) -> tuple[Tensor, Tensor]:
    """Smallest and largest eigenvalue of every leading block ``T[:j+1, :j+1]`` of the Lanczos tridiagonal,
    ``(E, k)`` each, from ``alphas (E, k)`` and ``betas (E, k−1)``: one batched eigensolve over the members per block
    size (:func:`torch.linalg.eigvalsh`), on the CPU after the iteration, so the loop itself never synchronises."""
    a, b = alphas.detach().cpu(), betas.detach().cpu()
    T = torch.diag_embed(a) + torch.diag_embed(b, 1) + torch.diag_embed(b, -1)
    low, high = a.clone(), a.clone()
    for j in range(1, a.shape[1]):
        ev = torch.linalg.eigvalsh(T[:, : j + 1, : j + 1])
        low[:, j], high[:, j] = ev[:, 0], ev[:, -1]
    return low.to(alphas), high.to(alphas)


def _three_term(w: Tensor, q: Tensor, alpha: Tensor, q_prev: Tensor | None, beta: Tensor | None) -> Tensor:
    """``w − α q − β q_prev`` row by row as one new ``(E, P)`` tensor (``w``, the matvec's output, is not written
    to); both passes of :func:`lanczos` use it, so the second reproduces the first exactly."""
    w = torch.addcmul(w, q, alpha[:, None], value=-1.0)
    return w if q_prev is None else w.addcmul_(q_prev, beta[:, None], value=-1.0)


def _lanczos_rebuild(matvec, q: Tensor, alphas: Tensor, betas: Tensor, coef: Tensor, restarts: dict) -> Tensor:
    """Second pass of the three-term recurrence with the first pass's coefficients: ``Σ_j coef_j q_j``."""
    k = alphas.shape[1]
    y = coef[:, :1] * q
    q_prev = None
    for j in range(k - 1):
        w = _three_term(matvec(q), q, alphas[:, j], q_prev, None if q_prev is None else betas[:, j - 1])
        nxt = w.div_(w.norm(dim=1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny))
        if j in restarts:
            dead, r = restarts[j]
            nxt = torch.where(dead[:, None], r, nxt)
        q_prev, q = q, nxt
        y = y + coef[:, j + 1 : j + 2] * q
    return y


def extreme_eigenvalues(loss_fn: LossFn, theta: Tensor, steps: int = 60, *, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Smallest and largest Hessian eigenvalue of every member by batched Lanczos, each ``(E,)``.

    Paper A, the local smoothness of Lemma 4.5 (:ref:`ch-smoothness`).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point.
    steps : int
        Lanczos iterations.
    seed : int
        The seed of the CPU generator of the start vectors (the same on every device).

    Returns
    -------
    lo, hi : Tensor, (E,)
        The smallest and the largest Ritz value of every member's Hessian.
    """
    _check_theta(theta)
    E, P = theta.shape
    gen = torch.Generator().manual_seed(seed)  # CPU: the same start vectors on every device
    ritz = lanczos(lambda v: hvp(loss_fn, theta, v), E, P, steps, generator=gen, device=theta.device, dtype=theta.dtype)
    return ritz[:, 0], ritz[:, -1]


def top_eigenvalue(loss_fn: LossFn, theta: Tensor, steps: int = 60, *, seed: int = 0) -> Tensor:
    """Largest (algebraic) Hessian eigenvalue ``λ_max(∇²loss_e)`` per member, ``(E,)``, by Lanczos. :ref:`ch-smoothness`.

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point.
    steps : int
        Lanczos iterations.
    seed : int
        The seed of the start vectors.

    Returns
    -------
    Tensor, (E,)
        ``λ_max`` of every member's Hessian.
    """
    return extreme_eigenvalues(loss_fn, theta, steps, seed=seed)[1]


def spectral_norm(loss_fn: LossFn, theta: Tensor, steps: int = 60, *, seed: int = 0) -> Tensor:
    """``‖∇²loss_e‖_op = max(|λ_min|, |λ_max|)`` per member, ``(E,)``: the local smoothness constant that
    Lemma 4.5 bounds (paper A, :ref:`ch-smoothness`).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point.
    steps : int
        Lanczos iterations.
    seed : int
        The seed of the start vectors.

    Returns
    -------
    Tensor, (E,)
        ``max(|λ_min|, |λ_max|)`` of every member's Hessian.
    """
    lo, hi = extreme_eigenvalues(loss_fn, theta, steps, seed=seed)
    return torch.maximum(lo.abs(), hi.abs())


def eigsh(loss_fn: LossFn, theta: Tensor, which: str = "LA", k: int = 1, tol: float = 0.0) -> Tensor:
    """Reference: ``scipy.sparse.linalg.eigsh`` on a ``LinearOperator`` wrapping :func:`hvp`, member by member.

    ``which`` as in scipy (``'LA'`` largest algebraic, ``'SA'`` smallest, ``'LM'`` largest magnitude).
    Returns ``(E, k)`` eigenvalues in scipy's order (ascending). :ref:`ch-smoothness` (validation of :func:`lanczos`).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point.
    which : str
        scipy's ``which``.
    k : int
        The number of eigenvalues, ``1 ≤ k < P``.
    tol : float
        scipy's relative accuracy (0: machine precision).

    Returns
    -------
    Tensor, (E, k)
        Each member's eigenvalues, ascending, on ``theta``'s device.

    Raises
    ------
    ValueError
        When ``theta`` is not a finite floating ``(E, P)`` tensor or ``k`` is not in ``[1, P)``.
    """
    from scipy.sparse.linalg import LinearOperator
    from scipy.sparse.linalg import eigsh as _eigsh

    _check_theta(theta)
    E, P = theta.shape
    if not 1 <= k < P:
        raise ValueError(f"eigsh needs 1 <= k < P = {P}, got k = {k}")
    out = []
    for e in range(E):
        member = theta[e : e + 1]

        def mv(x, member=member):
            v = torch.as_tensor(np.asarray(x).reshape(1, P), dtype=theta.dtype, device=theta.device)
            return hvp(loss_fn_member(loss_fn, theta, e), member, v)[0].cpu().numpy()

        op = LinearOperator((P, P), matvec=mv, dtype=np.float64)
        vals = _eigsh(op, k=k, which=which, tol=tol, v0=np.ones(P) / math.sqrt(P))
        out.append(torch.as_tensor(np.sort(vals[0] if isinstance(vals, tuple) else vals), dtype=theta.dtype))
    return torch.stack(out).to(theta.device)


def loss_fn_member(loss_fn: LossFn, theta: Tensor, e: int) -> LossFn:
    """Member ``e``'s loss as a function of a single flat vector ``(1, P) -> (1,)`` (the other members fixed at ``theta``).

    Parameters
    ----------
    loss_fn : callable, Tensor (E, P) -> Tensor (E,)
        A loss with members independent.
    theta : Tensor, (E, P)
        The point at which the other members are held.
    e : int
        The member.

    Returns
    -------
    callable, Tensor (1, P) -> Tensor (1,)
        Member ``e``'s loss as a function of its own flat vector.
    """

    def f(th: Tensor) -> Tensor:
        full = torch.cat([theta[:e].detach(), th, theta[e + 1 :].detach()], dim=0)
        return loss_fn(full)[e : e + 1]

    return f
