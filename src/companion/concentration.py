"""Uniform concentration of the gated second moment (paper B, Theorem 10 and Lemma 11; :ref:`ch-uniform-concentration`).

For data ``x_1..x_n ~ N(0, I_d)`` and a pair of directions ``(w, w*)``,

    M̂(w, w*) = (1/n) Σ_i 1{x_iᵀw ≥ 0} 1{x_iᵀw* ≥ 0} x_i x_iᵀ,     M(w, w*) = E M̂(w, w*)

(the closed form is :func:`companion.population.gate_second_moment`). Theorem 10 bounds
``δ* = sup_{w, w*} ‖M̂(w, w*) − M(w, w*)‖_op``. The supremum over the sphere pair cannot be computed: as a
function of ``(w, w*)``, ``M̂`` is piecewise constant (it changes only when a gate flips, i.e. when ``w`` or ``w*``
crosses one of the ``n`` hyperplanes ``x_iᵀ · = 0``), while ``M`` is smooth. So the deviation is piecewise smooth
with jumps, and gradient methods do not apply. We estimate ``δ*`` **from below**:

* every value we report is the exact deviation at an explicit pair, so it is a certified lower bound on ``δ*``
  for that data set — the search only chooses which pairs to evaluate;
* :func:`search_sup` first evaluates many uniformly random pairs, then runs a batched (1+λ) evolution strategy
  from the best of them: each chain proposes λ nearby pairs (``w ← normalise(w + s ξ)`` and likewise ``w*``,
  ``ξ`` Gaussian), moves to the best proposal only if it increases the deviation (accept-if-better, so the value
  never decreases) and adapts its step ``s`` (×1.5 after a success, ×0.5 after a failure). Small steps move a pair
  across a few hyperplanes — to a nearby sign pattern — where the deviation can jump up; no derivative is used;
* :func:`random_search` is the baseline with the same number of evaluations, all uniformly random.
* :func:`line_search_sup` uses the structure instead: ``‖D‖_op = max_z |zᵀDz|``, and for fixed ``z`` and one side
  of the pair the empirical part of ``zᵀDz`` is piecewise constant along a great circle through the other side,
  with ``2n`` breakpoints; each move goes to the best point of a whole circle (exact for the empirical part, the
  smooth population part in closed form), alternating the two sides, with ``z`` refreshed by a small Krylov
  Rayleigh–Ritz step. It finds much larger deviations than :func:`search_sup` at the same wall time, most at large
  ``d``; its values are exact deviations at explicit pairs too.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from . import population, validation
from .device import randn

__all__ = [
    "empirical_gate_moment",
    "deviation",
    "random_pairs",
    "random_search",
    "search_sup",
    "line_search_sup",
    "LINE_SEARCH_BUDGET",
    "line_search_rounds",
    "lemma11_error",
    "gradient_gap_ratio",
    "path_deviation",
    "segment_integrals",
    "sqrt_law_fit",
    "truncated_square_mean",
    "truncated_tail_mean",
    "single_member_deviation",
    "wedge_suprema",
    "circle_net",
    "net_quadratic_max",
    "net_reduction_certificate",
    "bernstein_tail",
    "chi_square_mean_tail",
    "bernstein_ratio_sup",
    "square_tail_ratio_sup",
]


def _unit(u: Tensor) -> Tensor:
    return u / u.norm(dim=-1, keepdim=True)


def _remove(a: Tensor, b: Tensor) -> Tensor:
    """``a`` without its component along the unit ``b`` (last axis): a tangent vector at ``b``, a Gram–Schmidt step."""
    return a - (a * b).sum(-1, keepdim=True) * b


def _check_pairs(X: Tensor, u: Tensor, w: Tensor) -> None:
    validation.same_device(X=X, u=u, w=w)
    validation.tensor("X", X, ndim=2)
    validation.tensor("u", u, ndim=2)
    validation.tensor("w", w, ndim=2)
    if u.shape != w.shape:
        raise ValueError(f"u and w must have the same shape (B, d), got {tuple(u.shape)} and {tuple(w.shape)}")
    if u.shape[1] != X.shape[1]:
        raise ValueError(f"pairs have dimension {u.shape[1]} but X has d = {X.shape[1]}")


def _chunk(n: int, d: int, B: int, budget: int = 20_000_000) -> int:
    return max(1, min(B, budget // max(n * d, 1)))


def _outer_features(X: Tensor) -> tuple[Tensor, Tensor] | None:
    """The upper triangles of the ``x_i x_iᵀ``, ``(n, d(d+1)/2)``, with their indices; ``None`` when too large
    (then the moments are built pair by pair)."""
    n, d = X.shape
    if n * d * (d + 1) // 2 > 40_000_000:
        return None
    iu = torch.triu_indices(d, d, device=X.device)
    return X[:, iu[0]] * X[:, iu[1]], iu


def _moments(X: Tensor, u: Tensor, w: Tensor, feats) -> Tensor:
    n, d = X.shape
    gates = (((X @ u.T) >= 0) & ((X @ w.T) >= 0)).T.to(X.dtype)  # (B, n)
    if feats is None:
        out = []
        step = _chunk(n, d, u.shape[0])
        for s in range(0, u.shape[0], step):
            Xg = gates[s : s + step].unsqueeze(-1) * X  # (b, n, d)
            out.append(Xg.transpose(1, 2) @ X / n)
        return torch.cat(out, 0)
    Z, iu = feats
    flat = gates @ Z / n  # (B, d(d+1)/2): one matrix product for every pair
    M = torch.zeros(u.shape[0], d, d, dtype=X.dtype, device=X.device)
    M[:, iu[0], iu[1]] = flat
    M[:, iu[1], iu[0]] = flat
    return M


def empirical_gate_moment(X: Tensor, u: Tensor, w: Tensor) -> Tensor:
    """``M̂(u_b, w_b) = (1/n) Σ_i 1{x_iᵀu_b ≥ 0} 1{x_iᵀw_b ≥ 0} x_i x_iᵀ`` for every pair ``b`` (paper B, Section 6.7;
    :ref:`ch-uniform-concentration`). ``X``: ``(n, d)``; ``u, w``: ``(B, d)`` → ``(B, d, d)``. The upper triangles of
    all pairs come from
    one matrix product of the ``(B, n)`` gates with the ``(n, d(d+1)/2)`` outer products ``x_i x_iᵀ``.

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample.
    u, w : Tensor, (B, d)
        The pairs of directions.

    Returns
    -------
    Tensor, (B, d, d)
        ``M̂(u_b, w_b)`` for every pair, symmetric.

    Raises
    ------
    ValueError
        When the shapes, devices or dtypes do not match.
    """
    _check_pairs(X, u, w)
    return _moments(X, u, w, _outer_features(X))


def _deviation(X: Tensor, u: Tensor, w: Tensor, feats) -> Tensor:
    n, d = X.shape
    out = []
    step = max(1, min(u.shape[0], 5_000_000 // (d * d)))
    for s in range(0, u.shape[0], step):
        diff = _moments(X, u[s : s + step], w[s : s + step], feats) - population.gate_second_moment(
            u[s : s + step], w[s : s + step]
        )
        out.append(_sym_opnorm(diff))
    return torch.cat(out, 0)


def deviation(X: Tensor, u: Tensor, w: Tensor) -> Tensor:
    """``‖M̂(u_b, w_b) − M(u_b, w_b)‖_op`` for every pair, shape ``(B,)`` (Theorem 10's quantity; :ref:`ch-uniform-concentration`).
    ``M`` from :func:`companion.population.gate_second_moment`.

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample (standard Gaussian inputs for the population moment ``M`` to apply).
    u, w : Tensor, (B, d)
        The pairs of directions.

    Returns
    -------
    Tensor, (B,)
        ``‖M̂(u_b, w_b) − M(u_b, w_b)‖_op`` for every pair.

    Raises
    ------
    ValueError
        When the shapes, devices or dtypes do not match.
    """
    _check_pairs(X, u, w)
    return _deviation(X, u, w, _outer_features(X))


def _sym_opnorm(A: Tensor) -> Tensor:
    """Operator norm of a batch of symmetric matrices ``(B, d, d) → (B,)``. On a CPU through NumPy's LAPACK:
    torch's batched float64 ``eigvalsh`` there can be tens of times slower when the cores are shared (OpenMP
    threads spinning), which we measured on the book's 2-core build machine."""
    if A.device.type == "cpu":
        ev = np.linalg.eigvalsh(A.numpy())
        return torch.as_tensor(np.abs(ev).max(-1), dtype=A.dtype)
    return torch.linalg.eigvalsh(A).abs().amax(-1)


def random_pairs(
    B: int, d: int, *, generator: torch.Generator | None = None, like: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``B`` pairs ``(u, w)`` uniform on the sphere pair, each ``(B, d)`` (:ref:`ch-uniform-concentration`).

    Parameters
    ----------
    B : int
        The number of pairs.
    d : int
        The dimension.
    generator : torch.Generator or None
        The CPU generator of the draws (:mod:`companion.device`).
    like : Tensor or None
        A tensor whose dtype and device the pairs take (default: the policy's).

    Returns
    -------
    u, w : Tensor, (B, d)
        Unit vectors, independent and uniform on the sphere.

    Raises
    ------
    ValueError
        When ``B`` or ``d`` is not a positive int.
    """
    validation.positive_int("B", B)
    validation.positive_int("d", d)
    kw = {} if like is None else {"dtype": like.dtype, "device": like.device}
    return (_unit(randn((B, d), generator=generator, **kw)), _unit(randn((B, d), generator=generator, **kw)))


def random_search(X: Tensor, evaluations: int, *, generator: torch.Generator | None = None) -> Tensor:
    """Baseline lower bound on ``δ*``: the largest deviation over ``evaluations`` uniformly random pairs, as a
    running maximum of shape ``(evaluations,)`` (:ref:`ch-uniform-concentration`).

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample.
    evaluations : int
        The number of random pairs.
    generator : torch.Generator or None
        The CPU generator of the pairs.

    Returns
    -------
    Tensor, (evaluations,)
        The running maximum of the deviations met, each a lower bound on ``δ*``.

    Raises
    ------
    ValueError
        When ``X`` is not a finite ``(n, d)`` tensor or ``evaluations`` is not a positive int.
    """
    validation.tensor("X", X, ndim=2)
    validation.positive_int("evaluations", evaluations)
    u, w = random_pairs(evaluations, X.shape[1], generator=generator, like=X)
    return torch.cummax(_deviation(X, u, w, _outer_features(X)), 0).values


def search_sup(
    X: Tensor,
    *,
    initial: int = 256,
    chains: int = 8,
    proposals: int = 8,
    rounds: int = 20,
    step: float = 0.3,
    generator: torch.Generator | None = None,
    extra_pairs: tuple[Tensor, Tensor] | None = None,
) -> dict:
    """Lower bound on ``δ* = sup ‖M̂ − M‖_op`` by random start + accept-if-better local search (see module
    docstring; Theorem 10, :ref:`ch-uniform-concentration`).

    ``initial`` random pairs (plus ``extra_pairs`` if given, e.g. pairs met along a GD trajectory) are evaluated; the
    best ``chains`` start a batched (1+λ) evolution strategy with λ = ``proposals`` for ``rounds`` rounds.
    Returns ``{"value": float, "u": (d,), "w": (d,), "trace": (evaluations,) running maximum, "evaluations": int}``.
    Every evaluated value is an exact deviation, so ``value`` (and every entry of ``trace``) is a lower bound.

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample.
    initial : int
        The number of random starting pairs.
    chains : int
        The number of best starts that are refined (at most ``initial``).
    proposals : int
        The proposals per chain and round, λ.
    rounds : int
        The rounds of the evolution strategy.
    step : float
        The initial step on the sphere (scaled by 1.5 after a success, 0.5 after a failure, within ``[1e-4, 2]``).
    generator : torch.Generator or None
        The CPU generator of the draws.
    extra_pairs : tuple of Tensor, each (B', d), or None
        Further starting pairs ``(u, w)``, normalised here.

    Returns
    -------
    dict
        ``"value"`` (float, the best deviation found), ``"u"``, ``"w"`` (``(d,)``, its pair), ``"trace"``
        (``(evaluations,)``, the running maximum) and ``"evaluations"`` (int).

    Raises
    ------
    ValueError
        When ``X`` is not a finite ``(n, d)`` tensor, a count is not a positive int, ``chains > initial``, ``step`` is
        negative, or ``extra_pairs`` lie on another device or dtype.
    """
    validation.tensor("X", X, ndim=2)
    for name, v in (("initial", initial), ("chains", chains), ("proposals", proposals), ("rounds", rounds)):
        validation.positive_int(name, v)
    if chains > initial:
        raise ValueError(f"chains ({chains}) cannot exceed initial ({initial})")
    validation.nonnegative("step", step)
    d = X.shape[1]
    u, w = random_pairs(initial, d, generator=generator, like=X)
    if extra_pairs is not None:
        eu, ew = extra_pairs
        validation.same_device(X=X, extra_u=eu, extra_w=ew)
        u, w = torch.cat([u, _unit(eu)]), torch.cat([w, _unit(ew)])
    feats = _outer_features(X)  # shared by every evaluation of the search
    vals = _deviation(X, u, w, feats)
    trace = [vals]
    best = torch.topk(vals, chains).indices
    cu, cw, cv = u[best], w[best], vals[best]
    s = torch.full((chains,), step, dtype=X.dtype, device=X.device)
    for _ in range(rounds):
        xi = randn((2, chains, proposals, d), generator=generator, dtype=X.dtype, device=X.device) / math.sqrt(d)
        pu = _unit(cu.unsqueeze(1) + s.view(-1, 1, 1) * xi[0])
        pw = _unit(cw.unsqueeze(1) + s.view(-1, 1, 1) * xi[1])
        pv = _deviation(X, pu.reshape(-1, d), pw.reshape(-1, d), feats).view(chains, proposals)
        trace.append(pv.reshape(-1))
        top, idx = pv.max(1)
        ok = top > cv
        ar = torch.arange(chains, device=X.device)
        cu = torch.where(ok[:, None], pu[ar, idx], cu)
        cw = torch.where(ok[:, None], pw[ar, idx], cw)
        cv = torch.where(ok, top, cv)
        s = torch.where(ok, s * 1.5, s * 0.5).clamp(1e-4, 2.0)
    trace = torch.cummax(torch.cat(trace), 0).values
    b = int(cv.argmax())
    return {"value": float(cv[b]), "u": cu[b], "w": cw[b], "trace": trace, "evaluations": int(trace.numel())}


# ------------------------------------------------------------------------------------------ exact line searches
def _gate_moment_times(u: Tensor, w: Tensor, z: Tensor) -> Tensor:
    """``M(u, w) z`` without forming ``M`` (unit ``u, w``; ``(C, d)`` each, ``z`` ``(C, d)`` or ``(C, k, d)``)."""
    zz = z if z.ndim == 3 else z[:, None]
    c = (u * w).sum(-1).clamp(-1.0, 1.0)[:, None, None]
    s = torch.sqrt((1 - c * c).clamp_min(0)).clamp_min(1e-12)
    pu, pw = (zz * u[:, None]).sum(-1, keepdim=True), (zz * w[:, None]).sum(-1, keepdim=True)
    cross = u[:, None] * pw + w[:, None] * pu - c * (u[:, None] * pu + w[:, None] * pw)
    out = ((math.pi - torch.arccos(c)) * zz + cross / s) / (2 * math.pi)
    return out if z.ndim == 3 else out[:, 0]


def _quadratic_population(p: Tensor, q: Tensor, c: Tensor) -> Tensor:
    """``zᵀ M(u, w) z`` from ``p = zᵀu``, ``q = zᵀw``, ``c = uᵀw`` (unit vectors; any broadcast shape)."""
    c = c.clamp(-1.0, 1.0)
    s = torch.sqrt((1 - c * c).clamp_min(0)).clamp_min(1e-12)
    return (math.pi - torch.arccos(c) + (2 * p * q - c * (p * p + q * q)) / s) / (2 * math.pi)


def _top_ritz(X: Tensor, u: Tensor, w: Tensor, z: Tensor, krylov: int) -> tuple[Tensor, Tensor]:
    """Rayleigh–Ritz on the Krylov space of ``D = M̂(u, w) − M(u, w)`` from ``z``: ``(signed value, unit z)``,
    ``(C,)`` and ``(C, d)``; ``|value| ≥ |zᵀDz|`` because the space contains ``z``. Only products ``D v``
    (``O(n d)`` each) are formed, never ``D``."""
    n = X.shape[0]
    gate = (((u @ X.T) >= 0) & ((w @ X.T) >= 0)).to(X.dtype)  # (C, n)

    def times(v):  # D v, (C, d)
        return (gate * (v @ X.T)) @ X / n - _gate_moment_times(u, w, v)

    basis, images = [_unit(z)], []
    for j in range(krylov):
        images.append(times(basis[-1]))
        if j == krylov - 1:
            break
        nxt = images[-1]
        for _ in range(2):  # Gram–Schmidt, twice
            for b in basis:
                nxt = _remove(nxt, b)
        norm = nxt.norm(dim=-1, keepdim=True)
        basis.append(torch.where(norm > 1e-12, nxt / norm.clamp_min(1e-300), torch.zeros_like(nxt)))
    V, DV = torch.stack(basis, 1), torch.stack(images, 1)  # (C, k, d)
    T = V @ DV.transpose(1, 2)
    T = (T + T.transpose(1, 2)) / 2
    ev, Y = torch.linalg.eigh(T)
    k = ev.abs().argmax(-1)
    ar = torch.arange(u.shape[0], device=X.device)
    znew = _unit((Y[ar, :, k][:, :, None] * V).sum(1))
    value = (znew * times(znew)).sum(-1)  # the exact quadratic form at the Ritz vector
    return value, znew


def _circle_search(X: Tensor, move: Tensor, fixed: Tensor, z: Tensor, sign: Tensor, v: Tensor) -> Tensor:
    """Exact maximum of ``sign · zᵀ(M̂ − M)(move(θ), fixed) z`` over the great circle ``move(θ) = cos θ move +
    sin θ v``, ``θ ∈ [0, 2π)`` (``v ⊥ move``, unit; ``M̂`` and ``M`` are symmetric in the pair, so either side can
    move): ``(C, d)``, the best point. Sample ``i``'s gate is open on the half-circle within ``π/2`` of
    ``φ_i = atan2(x_iᵀv, x_iᵀmove)``, so the empirical term is constant between the ``2n`` ends of those arcs
    (sorted, with cumulative sums); the population term ``zᵀMz`` is a closed form in the angles, evaluated at the
    middle of every segment and at 33 points inside the eight best segments."""
    n = X.shape[0]
    a = move @ X.T  # (C, n): x_iᵀmove(θ) = a_i cos θ + b_i sin θ
    phi = torch.atan2(v @ X.T, a)
    weight = ((fixed @ X.T) >= 0).to(X.dtype) * (z @ X.T) ** 2 / n
    pos = torch.remainder(torch.cat([phi - math.pi / 2, phi + math.pi / 2], 1), 2 * math.pi)
    pos, order = pos.sort(1)
    steps = torch.gather(torch.cat([weight, -weight], 1), 1, order).cumsum(1)
    start = (weight * (a >= 0)).sum(1, keepdim=True)  # the empirical term at θ = 0
    C = move.shape[0]
    lo = torch.cat([pos.new_zeros(C, 1), pos], 1)
    hi = torch.cat([pos, pos.new_full((C, 1), 2 * math.pi)], 1)
    empirical = torch.cat([start, start + steps], 1)[..., None]  # (C, 2n + 1, 1), one value per segment
    zm, zv, zf = ((z * x).sum(1)[:, None, None] for x in (move, v, fixed))
    mf, vf = ((x * fixed).sum(1)[:, None, None] for x in (move, v))

    def objective(level, lo, hi, fractions):  # (C, S, 1) level on the segments (lo, hi), (C, S)
        theta = lo[..., None] + fractions * (hi - lo)[..., None]  # (C, S, F)
        cos, sin = theta.cos(), theta.sin()
        pop = _quadratic_population(cos * zm + sin * zv, zf, cos * mf + sin * vf)
        value = sign[:, None, None] * (level - pop)
        return torch.where((hi - lo)[..., None] > 1e-12, value, torch.full_like(value, -math.inf)), theta

    coarse, _ = objective(empirical, lo, hi, pos.new_tensor((0.5,)))
    top = coarse[..., 0].topk(min(8, lo.shape[1]), dim=1).indices  # the best segments, refined
    fine, theta = objective(
        torch.gather(empirical, 1, top[..., None]),
        torch.gather(lo, 1, top),
        torch.gather(hi, 1, top),
        torch.linspace(1e-3, 1 - 1e-3, 33, dtype=X.dtype, device=X.device),
    )
    best = fine.reshape(C, -1).argmax(1)
    t = theta.reshape(C, -1)[torch.arange(C, device=X.device), best][:, None]
    return _unit(t.cos() * move + t.sin() * v)


def _smoothed_ascent(X: Tensor, move: Tensor, fixed: Tensor, z: Tensor, sign: Tensor, tau: float) -> Tensor:
    """The gradient in ``move`` of ``sign · zᵀ(M̃ − M)z``, ``M̃`` with the moving gate smoothed to
    ``σ(x_iᵀ move / τ)``: ``(C, d)``, a direction that flips the gates near the boundary favourably."""
    n = X.shape[0]
    weight = ((fixed @ X.T) >= 0).to(X.dtype) * (z @ X.T) ** 2 / n
    with torch.enable_grad():
        m = move.detach().clone().requires_grad_(True)
        smooth = (weight * torch.sigmoid((m @ X.T) / tau)).sum(1)
        pop = _quadratic_population((z * m).sum(1), (z * fixed).sum(1), (m * fixed).sum(1))
        (grad,) = torch.autograd.grad((sign * (smooth - pop)).sum(), m)
    return grad


def _direction(X: Tensor, move: Tensor, fixed: Tensor, z: Tensor, sign: Tensor, tau: float, noise: float, kw) -> Tensor:
    """The circle's tangent direction at ``move``: the smoothed gradient plus ``noise`` times a random one."""
    grad = _smoothed_ascent(X, move, fixed, z, sign, tau)
    rand = randn(move.shape, **kw)
    v = _unit(_remove(grad, move)) + noise * _unit(_remove(rand, move))
    return _unit(_remove(v, move))


def line_search_sup(
    X: Tensor,
    *,
    chains: int = 8,
    rounds: int = 20,
    tau: float = 0.3,
    noise: float = 1.0,
    krylov: int = 6,
    generator: torch.Generator | None = None,
) -> dict:
    """Lower bound on ``δ* = sup ‖M̂ − M‖_op`` by coordinate ascent with exact line searches over the gate
    breakpoints (paper B, Theorem 10; :ref:`ch-uniform-concentration`).

    ``‖D‖_op = max_{‖z‖=1} |zᵀDz|`` for ``D = M̂(u, w) − M(u, w)``. Each chain keeps a pair ``(u, w)``, a unit
    ``z`` and the sign ``s`` of ``zᵀDz``, and alternates: (i) a move of ``u`` along a great circle
    ``u(θ) = cos θ u + sin θ v``, ``θ ∈ [0, 2π)``, to the maximiser of ``s · zᵀD(u(θ), w)z`` — the empirical
    part is piecewise constant in ``θ`` with ``2n`` breakpoints (where ``x_iᵀu(θ) = 0``), summed exactly from the
    sorted breakpoints, and the population part ``zᵀM z`` is a closed form in the angles, evaluated at the middle of
    every segment and at 33 points of the best eight (so the move is exact for the empirical part); (ii) the
    same move of ``w`` (``M̂`` and ``M`` are symmetric in the pair); (iii) after each move, ``z``
    becomes the Ritz vector of largest ``|eigenvalue|`` of ``D`` on a Krylov space of dimension ``krylov``
    started at ``z`` (matrix-vector products only, ``O(n d)`` each). The circle's direction ``v`` is the
    tangent gradient of a smoothed objective (the moving gate replaced by ``σ(x_iᵀu/τ)``: it flips the gates near
    the boundary favourably) plus ``noise`` times a random tangent direction. A move is kept only if the exact
    quadratic form grows, so each chain's value never decreases. The chains start from uniform random pairs; at the
    end the exact deviation :func:`deviation` is computed at every chain's pair, so ``value`` and ``values`` are
    certified lower bounds on ``δ*`` for this data set. Everything runs in ``X``'s dtype and on its device (CPU or
    CUDA); the random draws come from the CPU ``generator`` (:func:`companion.device.randn`), so one seed gives the
    same starts and directions on every device.

    Parameters
    ----------
    X : Tensor, (n, d)
        The sample.
    chains : int
        The independent chains (restarts), batched on a leading axis.
    rounds : int
        The rounds; each moves ``u`` once and ``w`` once.
    tau : float
        The smoothing scale of the direction's gate, ``> 0``.
    noise : float
        The weight of the random tangent direction added to the smoothed gradient's, ``≥ 0``.
    krylov : int
        The dimension of the Krylov space of each ``z`` update, at least 1.
    generator : torch.Generator or None
        The CPU generator of the starts and directions (:mod:`companion.device`).

    Returns
    -------
    dict
        ``"value"`` (float, the largest exact deviation), ``"u"``, ``"w"`` (``(d,)``, its pair), ``"values"``
        (``(chains,)``, the exact deviation at each chain's final pair), ``"trace"`` (``(rounds + 1,)``, the best
        chain's quadratic form ``|zᵀDz|`` after each round, each a lower bound on the deviation at its pair).

    Raises
    ------
    ValueError
        When ``X`` is not a finite ``(n, d)`` tensor, ``chains``, ``rounds`` or ``krylov`` is not a positive int,
        ``tau`` is not positive or ``noise`` is negative.

    Examples
    --------
    >>> import torch
    >>> from companion import concentration as cc
    >>> X = torch.randn(80, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> res = cc.line_search_sup(X, chains=2, rounds=4, generator=torch.Generator().manual_seed(1))
    >>> exact = cc.deviation(X, res["u"][None], res["w"][None])
    >>> bool(abs(exact[0] - res["value"]) < 1e-12)
    True
    """
    validation.tensor("X", X, ndim=2)
    for name, value in (("chains", chains), ("rounds", rounds), ("krylov", krylov)):
        validation.positive_int(name, value)
    _positive("tau", tau)
    validation.nonnegative("noise", noise)
    d = X.shape[1]
    kw = {"generator": generator, "dtype": X.dtype, "device": X.device}
    u, w = random_pairs(chains, d, generator=generator, like=X)
    value, z = _top_ritz(X, u, w, _unit(randn((chains, d), **kw)), krylov)
    trace = [float(value.abs().max())]
    for _ in range(rounds):
        for side in (0, 1):  # u moves, then w
            move, fixed = (u, w) if side == 0 else (w, u)
            sign = torch.sign(value)
            new = _circle_search(X, move, fixed, z, sign, _direction(X, move, fixed, z, sign, tau, noise, kw))
            nu, nw = (new, w) if side == 0 else (u, new)
            nvalue, nz = _top_ritz(X, nu, nw, z, krylov)
            ok = nvalue.abs() > value.abs()
            u, w = torch.where(ok[:, None], nu, u), torch.where(ok[:, None], nw, w)
            value, z = torch.where(ok, nvalue, value), torch.where(ok[:, None], nz, z)
        trace.append(float(value.abs().max()))
    values = deviation(X, u, w)
    b = int(values.argmax())
    return {"value": float(values[b]), "u": u[b], "w": w[b], "values": values, "trace": torch.tensor(trace, dtype=X.dtype)}


LINE_SEARCH_BUDGET = (8, 10, 0.5)
"""The budget of :func:`line_search_sup` in :ref:`ch-uniform-concentration`: ``(chains, rounds at d = 0, rounds
per dimension)``, so 8 chains of ``10 + d/2`` rounds (see :func:`line_search_rounds`)."""


def line_search_rounds(d: int, budget: tuple = LINE_SEARCH_BUDGET) -> int:
    """The rounds of :func:`line_search_sup` at dimension ``d`` under ``budget`` ``(chains, base, per_dim)``:
    ``int(base + per_dim · d)``, a budget that grows with ``d`` (paper B, Theorem 10; :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    d : int
        The dimension (positive).
    budget : tuple
        ``(chains, base, per_dim)``; the chains are not used here.

    Returns
    -------
    int
        The rounds.

    Raises
    ------
    ValueError
        When ``d`` is not a positive int.

    Examples
    --------
    >>> line_search_rounds(10), line_search_rounds(80)
    (15, 50)
    """
    validation.positive_int("d", d)
    _, base, per_dim = budget
    return int(base + per_dim * d)


# ------------------------------------------------------------------------------------------ Lemma 11
def lemma11_error(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """Lemma 11's error ``e = ‖h1‖ + ‖h2‖``, ``h1 = v1 w1 − a``, ``h2 = v2 w2 + a`` (paper B, the paper's ``v_i > 0``;
    here ``v = [+v1, −v2]`` signed), the quantity the lemma's gradient gap is measured against
    (:ref:`ch-uniform-concentration`). ``(E, 2, d), (E, 2), (d,) → (E,)``; it needs no data, so a stop rule of
    :func:`companion.gd.run` can evaluate it on any subset of the members.

    Parameters
    ----------
    W : Tensor, (E, 2, d)
        The first-layer weights.
    v : Tensor, (E, 2)
        The signed output weights ``[+v1, −v2]``.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    Tensor, (E,)
        ``‖v1 w1 − a‖ + ‖v2 w2 + a‖``, zero exactly at the global minimum ``v1 w1 = a``, ``v2 w2 = −a``.

    Raises
    ------
    ValueError
        When ``k ≠ 2``, the shapes do not match, or the tensors lie on different devices or dtypes.

    Examples
    --------
    >>> import torch
    >>> from companion import concentration as cc
    >>> a = torch.tensor([1.0, 0.0], dtype=torch.float64)
    >>> W = torch.stack([a, -a])[None]  # w1 = a, w2 = -a
    >>> cc.lemma11_error(W, torch.tensor([[1.0, -1.0]], dtype=torch.float64), a)
    tensor([0.], dtype=torch.float64)
    """
    validation.same_device(W=W, v=v, a=a)
    validation.tensor("W", W, ndim=3)
    validation.tensor("v", v, ndim=2)
    validation.tensor("a", a, ndim=1)
    if W.shape[1] != 2 or v.shape != W.shape[:2] or a.shape[0] != W.shape[2]:
        raise ValueError(f"need k = 2: W (E, 2, d), v (E, 2), a (d,), got {tuple(W.shape)}, {tuple(v.shape)}, {tuple(a.shape)}")
    return _lemma11_error(W, v, a)


def _lemma11_error(W: Tensor, v: Tensor, a: Tensor) -> Tensor:
    """:func:`lemma11_error` on inputs already checked."""
    h1 = v[:, 0:1] * W[:, 0] - a
    h2 = v[:, 1:2].abs() * W[:, 1] + a
    return h1.norm(dim=-1) + h2.norm(dim=-1)


def gradient_gap_ratio(W: Tensor, v: Tensor, X: Tensor, a: Tensor) -> dict:
    """Lemma 11's ratio along a trajectory (paper B; :ref:`ch-uniform-concentration`), for ``k = 2`` with signed ``v
    = [+v1, −v2]``.

    With ``h1 = v1 w1 − a``, ``h2 = v2 w2 + a`` (the paper's notation, ``v_i > 0``), error ``e = ‖h1‖ + ‖h2‖``:
    ``ratio_i = ‖∇̂_{w_i} L − ∇_{w_i} L‖ / (v_i e)``, empirical gradient from
    :func:`companion.relunet.loss_and_gradient_wv`, population gradient from :func:`companion.population.gradient`.
    ``W``: ``(E, 2, d)``, ``v``: ``(E, 2)``, ``X``: ``(n, d)`` shared or ``(E, n, d)`` one data set per member,
    ``a``: ``(d,)``. Returns ``{"ratio": (E, 2), "gap": (E, 2), "difference": (E, 2, d), "error": (E,)}``. Lemma 11
    says ``ratio ≤ δ`` with ``δ`` from Theorem 10.

    Parameters
    ----------
    W : Tensor, (E, 2, d)
        The first-layer weights along the trajectory (one member per point).
    v : Tensor, (E, 2)
        The output weights, ``v[:, 0] > 0 > v[:, 1]``.
    X : Tensor, (n, d) or (E, n, d)
        The sample, shared or one per member.
    a : Tensor, (d,)
        The target.

    Returns
    -------
    dict of str to Tensor
        ``"ratio"`` ``(E, 2)``, ``"gap"`` ``(E, 2)`` (``‖∇̂_{w_i} L − ∇_{w_i} L‖``), ``"difference"`` ``(E, 2, d)``
        (``∇̂_{w_i} L − ∇_{w_i} L`` itself, the left side of the proof's identity, :func:`segment_integrals`) and
        ``"error"`` ``(E,)``.

    Raises
    ------
    ValueError
        When ``k ≠ 2``, the signs of ``v`` are not ``[+, −]``, the shapes do not match, or the tensors lie on different
        devices or dtypes.
    """
    from . import relunet

    validation.same_device(W=W, v=v, X=X, a=a)
    validation.tensor("W", W, ndim=3)
    validation.tensor("v", v, ndim=2)
    if W.shape[1] != 2 or v.shape != W.shape[:2]:
        raise ValueError(f"need k = 2: W (E, 2, d) and v (E, 2), got {tuple(W.shape)} and {tuple(v.shape)}")
    if not bool(((v[:, 0] > 0) & (v[:, 1] < 0)).all()):
        raise ValueError("Lemma 11 is stated for the sign pattern v = [+v1, -v2] with v1, v2 > 0")
    validation.tensor("X", X, ndim=(2, 3))
    if X.ndim == 3 and X.shape[0] != W.shape[0]:
        raise ValueError(f"per-member data must have {W.shape[0]} members, got {X.shape[0]}")
    Y = X @ a
    _, gW_emp, _ = relunet.loss_and_gradient_wv(W, v, X, Y)
    gW_pop, _ = population.gradient(W, v, a)
    difference = gW_emp - gW_pop
    gap = difference.norm(dim=-1)
    err = _lemma11_error(W, v, a)  # W, v checked above, a by population.gradient
    return {"ratio": gap / (v.abs() * err.unsqueeze(-1)), "gap": gap, "difference": difference, "error": err}


def path_deviation(W: Tensor, v: Tensor, X: Tensor, a: Tensor, points: int = 33) -> Tensor:
    """The largest ``‖M̂ − M‖_op`` over the pairs that Lemma 11's proof integrates over
    (:ref:`ch-uniform-concentration`): for neuron
    ``w_1`` the pairs ``(a + t h1, w1)`` and ``(−a + t h2, w1)``, for ``w_2`` the pairs ``(a + t h1, w2)`` and
    ``(−a + t h2, w2)``, ``t`` on a grid of ``points`` values in ``[0, 1]``. Since
    ``∇̂_{w1} − ∇_{w1} = v1 [∫ (M̂ − M)(a + t h1, w1) dt h1 − ∫ (M̂ − M)(−a + t h2, w1) dt h2]`` (and likewise for
    ``w2``), ``ratio_i ≤ sup_t`` of these deviations. ``X``: ``(n, d)`` or ``(E, n, d)``. Returns ``(E, 2)``.

    Parameters
    ----------
    W : Tensor, (E, 2, d)
        The first-layer weights.
    v : Tensor, (E, 2)
        The output weights, ``[+v1, −v2]``.
    X : Tensor, (n, d) or (E, n, d)
        The sample, shared or one per member.
    a : Tensor, (d,)
        The target.
    points : int
        The grid size of ``t``.

    Returns
    -------
    Tensor, (E, 2)
        For each member and neuron, the largest deviation over the pairs of the path.

    Raises
    ------
    ValueError
        When ``points`` is not a positive int or the tensors lie on different devices or dtypes.
    """
    validation.positive_int("points", points)
    validation.same_device(W=W, v=v, X=X, a=a)
    E, _, d = W.shape
    if X.ndim == 3:
        return torch.cat([path_deviation(W[e : e + 1], v[e : e + 1], X[e], a, points) for e in range(E)])
    t = torch.linspace(0, 1, points, dtype=W.dtype, device=W.device).view(1, -1, 1)
    h1 = (v[:, 0:1] * W[:, 0] - a).unsqueeze(1)
    h2 = (v[:, 1:2].abs() * W[:, 1] + a).unsqueeze(1)
    p1 = a + t * h1  # (E, T, d)
    p2 = -a + t * h2
    out = []
    for i in range(2):
        wi = W[:, i].unsqueeze(1).expand_as(p1)
        u = torch.cat([p1, p2], 1).reshape(-1, d)
        ww = torch.cat([wi, wi], 1).reshape(-1, d)
        ok = u.norm(dim=-1) > 0
        dev = torch.zeros(u.shape[0], dtype=W.dtype, device=W.device)
        dev[ok] = deviation(X, u[ok], ww[ok])
        out.append(dev.view(E, -1).max(1).values)
    return torch.stack(out, -1)


def _gate_length(X: Tensor, p0: Tensor, h: Tensor) -> Tensor:
    """``∫_0^1 1{x_iᵀ(p0 + t h) ≥ 0} dt`` per sample, exactly: ``X`` ``(n, d)``, ``p0, h`` ``(d,)`` → ``(n,)``."""
    start, slope = X @ p0, X @ h
    safe = torch.where(slope == 0, torch.ones_like(slope), slope)
    root = (-start / safe).clamp(0, 1)  # the breakpoint t_i, clipped to the segment
    length = torch.where(slope > 0, 1 - root, root)
    return torch.where(slope == 0, (start >= 0).to(X.dtype), length)


def segment_integrals(W: Tensor, v: Tensor, X: Tensor, a: Tensor, nodes: int = 64) -> dict:
    """Lemma 11's integral identity with exact integrals (paper B, Appendix C.7; :ref:`ch-uniform-concentration`).

    For neuron ``i`` the proof writes ``∇̂_{w_i} L − ∇_{w_i} L = ±v_i [I_A h1 − I_B h2]`` with
    ``I_A = ∫_0^1 (M̂ − M)(a + t h1, w_i) dt`` and ``I_B = ∫_0^1 (M̂ − M)(−a + t h2, w_i) dt``. ``M̂`` is piecewise
    constant along a segment — sample ``j``'s gate switches once, at the breakpoint ``t_j = −x_jᵀp0 / x_jᵀh`` — so
    ``∫ M̂ dt = (1/n) Σ_j ℓ_j 1{x_jᵀw_i ≥ 0} x_j x_jᵀ`` with ``ℓ_j`` the exact length of the segment on which the gate
    is open; ``M`` is smooth along it and integrated by ``nodes``-point Gauss–Legendre quadrature. Along the segment
    ``M = [(π − θ) I + sin θ (b̄b̄ᵀ − c̄c̄ᵀ)]/(2π)`` (:func:`companion.population.gate_second_moment`) has ``b̄, c̄`` in
    the span of ``p0``, ``h`` and ``w_i``, so the quadrature sums the scalar ``π − θ`` and a ``3 × 3`` matrix of
    coefficients in that basis: ``O(nodes · d + d²)`` per segment instead of ``O(nodes · d²)``, the same arithmetic
    as evaluating ``M`` at every node.

    Parameters
    ----------
    W : Tensor, shape (E, 2, d)
    v : Tensor, shape (E, 2)
        Signed output weights ``[+v1, −v2]``.
    X : Tensor, shape (n, d) or (E, n, d)
    a : Tensor, shape (d,)
    nodes : int
        Gauss–Legendre nodes for the smooth ``∫ M dt``.

    Returns
    -------
    dict
        ``"gap"``: ``(E, 2, d)``, the identity's right side ``v_i [I_A h1 − I_B h2]`` (the sign of ``v_i`` included);
        ``"norms"``: ``(E, 2, 2)``, ``‖I_A‖_op`` and ``‖I_B‖_op`` per neuron.

    Raises
    ------
    ValueError
        On shapes that do not match or a non-positive ``nodes``.
    """
    validation.positive_int("nodes", nodes)
    validation.same_device(W=W, v=v, X=X, a=a)
    validation.tensor("W", W, ndim=3)
    if W.shape[1] != 2 or v.shape != W.shape[:2]:
        raise ValueError(f"need k = 2: W (E, 2, d) and v (E, 2), got {tuple(W.shape)} and {tuple(v.shape)}")
    E, _, d = W.shape
    t, weight = (torch.as_tensor(x, dtype=W.dtype, device=W.device) for x in _unit_interval_rule(nodes))
    gaps, norms = torch.zeros(E, 2, d, dtype=W.dtype, device=W.device), torch.zeros(E, 2, 2, dtype=W.dtype)
    for e in range(E):
        Xe = X if X.ndim == 2 else X[e]
        h1 = v[e, 0] * W[e, 0] - a
        h2 = v[e, 1].abs() * W[e, 1] + a
        for i in range(2):
            wi = W[e, i]
            integral = []
            for p0, h in ((a, h1), (-a, h2)):
                open_ = _gate_length(Xe, p0, h) * (Xe @ wi >= 0).to(W.dtype)
                emp = (Xe * open_[:, None]).T @ Xe / Xe.shape[0]
                integral.append(emp - _segment_moment(p0, h, wi, t, weight))
            gaps[e, i] = v[e, i] * (integral[0] @ h1 - integral[1] @ h2)
            norms[e, i] = _sym_opnorm(torch.stack(integral)).cpu()
    return {"gap": gaps, "norms": norms}


@functools.lru_cache(maxsize=8)
def _unit_interval_rule(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on ``[0, 1]`` (computed once per ``nodes``: 20 ms at 512, against 60 ms for
    a whole :func:`segment_integrals` call at ``d = 100``)."""
    t, weight = np.polynomial.legendre.leggauss(nodes)
    return (t + 1) / 2, weight / 2


def _segment_moment(p0: Tensor, h: Tensor, w: Tensor, t: Tensor, weight: Tensor) -> Tensor:
    """``Σ_k weight_k M(p0 + t_k h, w)`` ``(d, d)``: the quadrature of :func:`segment_integrals`, in the basis
    ``[p0, h, w̄]`` of the span that ``b̄`` and ``c̄`` stay in. A node where ``p0 + t h`` is much shorter than
    ``‖p0‖ + t‖h‖`` (its coefficients would cancel: more than four digits) or zero, or a zero ``w``, is summed densely
    instead."""
    pts = p0 + t[:, None] * h  # (nodes, d)
    norm, w_norm = pts.norm(dim=-1), w.norm()
    good = norm > 1e-4 * (p0.norm() + t.abs() * h.norm())
    if not bool(w_norm > 0):
        good = torch.zeros_like(good)
    bad = ~good
    out = (weight[bad, None, None] * population.gate_second_moment(pts[bad], w.expand_as(pts[bad]))).sum(0)
    if not bool(good.any()):
        return out
    t, weight, pts, norm = t[good], weight[good], pts[good], norm[good]
    ub, wb = pts / norm[:, None], w / w_norm
    theta = population.angle(ub, wb.expand_as(ub))
    coef = torch.stack([1 / norm, t / norm, torch.zeros_like(t)], -1)  # ū in the basis [p0, h, w̄]
    e3 = torch.tensor([0.0, 0.0, 1.0], dtype=t.dtype, device=t.device)  # w̄ in the same basis
    frame = []
    for vec, c in ((ub + wb, coef + e3), (ub - wb, coef - e3)):  # b̄ and c̄ before normalising
        length = vec.norm(dim=-1)
        frame.append(torch.where(length[:, None] > 0, c / length.clamp_min(torch.finfo(t.dtype).tiny)[:, None], 0.0))
    beta, gamma = frame
    ws = weight * torch.sin(theta)
    inner = torch.einsum("k,ki,kj->ij", ws, beta, beta) - torch.einsum("k,ki,kj->ij", ws, gamma, gamma)
    basis = torch.stack([p0, h, wb], -1)  # (d, 3)
    eye = torch.eye(p0.shape[0], dtype=p0.dtype, device=p0.device)
    return out + ((weight * (math.pi - theta)).sum() * eye + basis @ inner @ basis.T) / (2 * math.pi)


# ------------------------------------------------------------------------------------------ the rate
def sqrt_law_fit(ratios, deviations, confidence: float = 0.99):
    """Fit ``δ̂ ≈ c1 √(d/n) + c2 d/n`` per curve and average over curves (paper B, Theorem 10; :ref:`ch-uniform-concentration`).

    ``ratios``: ``(K,)`` values of ``n/d``; ``deviations``: ``(K, E)``, one curve of searched deviations per member
    (a dimension and a data set). Each member's ``(c1, c2)`` is the least-squares fit without intercept; the result
    is a pair of :class:`companion.stats.Estimate` (:func:`companion.stats.mean` over members). The ``√(d/n)`` term
    is Theorem 10's rate; the ``d/n`` term is the finite-size term that the sample covariance and the proof's bound
    (Appendix C.6, Step 4) also carry. A pure ``d/n`` law has ``c1 = 0``; a decay slower than ``√(d/n)`` forces
    ``c2 < 0``.

    Parameters
    ----------
    ratios : array_like, (K,)
        The values of ``n/d``, positive, ``K ≥ 3``.
    deviations : array_like, (K, E)
        One curve of searched deviations per member, finite, ``E ≥ 2``.
    confidence : float
        The confidence of the intervals, in ``(0, 1)``.

    Returns
    -------
    c1, c2 : Estimate
        The coefficients of ``√(d/n)`` and ``d/n``: their mean over members with a t-interval.

    Raises
    ------
    ValueError
        When the shapes are wrong, a ratio is not positive, a deviation is not finite, or ``confidence`` is not in
        ``(0, 1)``.
    """
    from dataclasses import replace

    from .stats import mean

    rho = np.asarray(ratios, dtype=float).ravel()
    Y = np.asarray(deviations, dtype=float)
    if Y.ndim != 2 or Y.shape[0] != rho.size or rho.size < 3 or Y.shape[1] < 2:
        raise ValueError(f"need deviations (K, E) with K = len(ratios) >= 3 and E >= 2, got {Y.shape}")
    if np.any(rho <= 0) or not np.all(np.isfinite(Y)):
        raise ValueError("ratios must be positive and deviations finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    A = np.stack([rho**-0.5, 1 / rho], 1)  # (K, 2)
    coef = np.linalg.lstsq(A, Y, rcond=None)[0]  # (2, E)
    c1, c2 = (replace(mean(c, confidence=confidence), method="t-interval over members") for c in coef)
    return c1, c2


# ------------------------------------------------------------------------------------------ Appendix C.6
def _positive(name: str, value: float) -> float:
    v = validation.nonnegative(name, value)
    if v == 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return v


def truncated_square_mean(tau: float) -> float:
    """``E min(Z², τ)`` for ``Z ~ N(0, 1)``, in closed form (paper B, Appendix C.6, Step 2's truncation ``T_τ``;
    :ref:`ch-uniform-concentration`).

    With ``s = √τ``: ``E Z² 1{|Z| ≤ s} = erf(s/√2) − 2 s φ(s)`` and ``τ P(|Z| > s) = τ erfc(s/√2)``.

    Parameters
    ----------
    tau : float
        The truncation level, ``τ > 0``.

    Returns
    -------
    float
        ``E min(Z², τ)``; it rises from 0 to 1 as ``τ`` grows.

    Raises
    ------
    ValueError
        If ``τ`` is not positive and finite.

    Examples
    --------
    >>> round(truncated_square_mean(1e6), 6)
    1.0
    """
    _positive("tau", tau)
    s = math.sqrt(tau)
    phi = math.exp(-tau / 2) / math.sqrt(2 * math.pi)
    return math.erf(s / math.sqrt(2)) - 2 * s * phi + tau * math.erfc(s / math.sqrt(2))


def truncated_tail_mean(tau: float) -> float:
    """``E (Z² − τ)₊`` for ``Z ~ N(0, 1)``, in closed form (paper B, Appendix C.6, Step 2's remainder ``R_τ`` and
    Lemma 15; :ref:`ch-uniform-concentration`).

    With ``s = √τ``: ``E Z² 1{|Z| > s} = erfc(s/√2) + 2 s φ(s)``, so ``E (Z² − τ)₊ = (1 − τ) erfc(s/√2) + 2 s φ(s)``;
    it equals ``1 − E min(Z², τ)`` (:func:`truncated_square_mean`).

    Parameters
    ----------
    tau : float
        The truncation level ``τ > 0``.

    Returns
    -------
    float
        ``E (Z² − τ)₊``, in ``(0, 1)``.

    Raises
    ------
    ValueError
        If ``τ`` is not positive and finite.

    Examples
    --------
    >>> abs(truncated_tail_mean(2.0) + truncated_square_mean(2.0) - 1) < 1e-12
    True
    """
    _positive("tau", tau)
    s = math.sqrt(tau)
    phi = math.exp(-tau / 2) / math.sqrt(2 * math.pi)
    return (1 - tau) * math.erfc(s / math.sqrt(2)) + 2 * s * phi


def single_member_deviation(
    n: int,
    tau: float,
    reps: int,
    *,
    part: str = "truncated",
    generator: torch.Generator | None = None,
    chunk: int = 2_000_000,
) -> Tensor:
    """``|(P_n − P) f₀|`` on ``reps`` independent samples of size ``n`` for one member ``f₀`` of a class that the
    proof of Theorem 10 bounds uniformly (paper B, Appendix C.6: Lemma 21, Bousquet's consequence and the
    truncated-term bound; :ref:`ch-uniform-concentration`).

    ``part="truncated"``: ``f₀(x) = min(⟨x, u⟩², τ) 1{⟨x, u⟩ ≥ 0}``, the member of Lemma 21's class ``F_{u,τ}`` with
    ``w = w* = u``, ``P f₀ = ½ E min(Z², τ)`` (:func:`truncated_square_mean`). ``part="remainder"``:
    ``f₀(x) = (⟨x, u⟩² − τ)₊``, the remainder ``G_u`` of Step 3 at one ``u`` of the net, ``P f₀ = E (Z² − τ)₊``
    (:func:`truncated_tail_mean`). Both depend on ``x`` only through ``Z = ⟨x, u⟩ ~ N(0, 1)``, so ``Z`` is drawn
    directly (any ``d``). Since ``f₀`` belongs to the class, the supremum over the class is at least
    ``|(P_n − P) f₀|``, which falls like ``n^{-1/2}`` (central limit theorem): a lower bound that no ``C τ d/n``
    (or ``C d/n``) can stay above as ``n`` grows.

    Parameters
    ----------
    n, reps : int
        Sample size and number of independent samples.
    tau : float
        Truncation level ``τ > 0``.
    part : {"truncated", "remainder"}
        Which member (see above).
    generator : torch.Generator, optional
        The random stream.
    chunk : int
        At most this many normals are drawn at once (memory).

    Returns
    -------
    Tensor, shape (reps,)
        ``|(1/n) Σ_i f₀(Z_i) − P f₀|`` per sample, in the default dtype.

    Raises
    ------
    ValueError
        On a non-positive ``n``, ``reps``, ``chunk`` or ``τ``, or an unknown ``part``.
    """
    validation.positive_int("n", n)
    validation.positive_int("reps", reps)
    validation.positive_int("chunk", chunk)
    _positive("tau", tau)
    if part not in ("truncated", "remainder"):
        raise ValueError(f"part must be 'truncated' or 'remainder', got {part!r}")
    mean = 0.5 * truncated_square_mean(tau) if part == "truncated" else truncated_tail_mean(tau)
    rows = max(1, chunk // n)
    out = []
    for start in range(0, reps, rows):
        z = randn((min(rows, reps - start), n), generator=generator)
        if part == "truncated":
            f = torch.clamp(z * z, max=tau) * (z >= 0)
        else:
            f = torch.clamp(z * z - tau, min=0)
        out.append((f.mean(1) - mean).abs())
    return torch.cat(out)


def _arc_mass(tau: float, points: int, dtype: torch.dtype, device: torch.device):
    """``Γ(φ) = ∫₀^φ g``, ``g(φ) = cos²φ (1 − e^{−τ/(2cos²φ)})/π`` the density in the angle of ``E min(⟨x, e₁⟩², τ)``
    for ``x ~ N(0, I₂)``, on ``points + 1`` equally spaced angles of ``[0, 2π]`` (trapezoid rule); returns
    ``(grid, Γ)``."""
    grid = torch.linspace(0, 2 * math.pi, points + 1, dtype=dtype, device=device)
    c2 = torch.cos(grid) ** 2
    g = c2 * -torch.expm1(-tau / (2 * c2)) / math.pi  # 0 where cos = 0
    step = 2 * math.pi / points
    mass = torch.cat([g.new_zeros(1), torch.cumsum((g[1:] + g[:-1]) * (step / 2), 0)])
    return grid, mass


def wedge_suprema(X: Tensor, signs: Tensor, tau: float, *, points: int = 1 << 16, budget: int = 2_000_000) -> dict[str, Tensor]:
    """Exact suprema over Lemma 21's class ``F_{u,τ}`` in ``d = 2``: the empirical process and its Rademacher average
    (paper B, Appendix C.6, Step 4: symmetrisation, Theorem 20 and Lemma 21; :ref:`ch-uniform-concentration`).

    With ``u = e₁``, ``f_{w,w*}(x) = min(⟨x, u⟩², τ) 1{⟨x, w⟩ ≥ 0} 1{⟨x, w*⟩ ≥ 0}``. In the plane the product of the
    two indicators is the indicator of a closed arc of directions of length ``π − ∠(w, w*) ∈ [0, π]``, so the class
    is ``{min(⟨x,u⟩², τ) 1{arg x ∈ A}}`` over such arcs ``A``. The empirical part depends on ``A`` only through the
    run of consecutive sample angles it contains, and ``P f = Γ(end) − Γ(start)`` grows with ``A``; a half-plane
    (length ``π``) always has ``P f = ½ E min(Z², τ)``, since the density ``g`` of ``Γ`` has period ``π``. So

    * ``sup (P_n − P) f`` is the largest ``(1/n) Σ_run f(x_i) − P(arc from its first to its last angle)`` over runs
      spanning at most ``π`` (or 0);
    * ``sup (P − P_n) f`` is the largest ``min(P(open gap around the run), ½ E min(Z², τ)) − (1/n) Σ_run f(x_i)``;
    * ``sup (1/n) Σ ε_i f(x_i)`` is the largest ``ε``-weighted run sum (or 0, the empty arc),

    each a maximum over the ``n (n + 1)`` runs, computed exactly; ``Γ`` is tabulated once (trapezoid rule on
    ``points`` intervals, error below ``1e-9`` at the default).

    Parameters
    ----------
    X : Tensor, shape (E, n, 2)
        ``E`` samples of ``n`` points in the plane (standard Gaussian for ``P`` to be the population).
    signs : Tensor, shape (E, n)
        Rademacher signs ``ε_i ∈ {−1, +1}``, one set per sample.
    tau : float
        The truncation level ``τ > 0``.
    points : int
        Intervals of the table of ``Γ``.
    budget : int
        At most this many run values are held at once (memory); samples are processed in chunks.

    Returns
    -------
    dict of Tensor, each shape (E,)
        ``"deviation"``: ``sup_f |(P_n − P) f|``; ``"rademacher"``: ``sup_f (1/n) Σ ε_i f(x_i)`` (as printed in the
        symmetrisation step, no absolute value); ``"rademacher_abs"``: ``sup_f |(1/n) Σ ε_i f(x_i)|``.

    Raises
    ------
    ValueError
        On shapes other than ``(E, n, 2)`` and ``(E, n)``, non-finite points, signs other than ``±1``, different
        devices or dtypes, or a non-positive ``τ``, ``points`` or ``budget``.

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)  # two points on the u-axis
    >>> out = wedge_suprema(X, torch.tensor([[1.0, -1.0]], dtype=torch.float64), tau=4.0)
    >>> round(out["rademacher"].item(), 6)  # the arc holding the first point only: (1/2) min(1, 4)
    0.5
    """
    validation.tensor("X", X, ndim=3)
    validation.tensor("signs", signs, ndim=2)
    if X.shape[-1] != 2 or signs.shape != X.shape[:2]:
        raise ValueError(f"need X of shape (E, n, 2) and signs of shape (E, n), got {tuple(X.shape)}, {tuple(signs.shape)}")
    validation.same_device(X=X, signs=signs)
    if not bool(((signs == 1) | (signs == -1)).all()):
        raise ValueError("signs must be -1 or +1")
    _positive("tau", tau)
    validation.positive_int("points", points)
    validation.positive_int("budget", budget)
    E, n = X.shape[0], X.shape[1]
    grid, mass = _arc_mass(tau, points, X.dtype, X.device)
    total = mass[-1]
    step = 2 * math.pi / points

    def gamma(phi):  # Γ on all of ℝ: Γ(φ + 2πk) = Γ(φ) + k Γ(2π), linear between the table's nodes
        turns = torch.floor(phi / (2 * math.pi))
        rest = phi - 2 * math.pi * turns
        pos = (rest / step).clamp(0, points - 1e-9)
        lo = pos.floor().long()
        frac = pos - lo
        return turns * total + mass[lo] + frac * (mass[lo + 1] - mass[lo])

    angle = torch.remainder(torch.atan2(X[..., 1], X[..., 0]), 2 * math.pi)
    angle, order = torch.sort(angle, dim=-1)
    weight = torch.gather(torch.clamp(X[..., 0] ** 2, max=tau), 1, order) / n
    eps_weight = weight * torch.gather(signs, 1, order)
    out = {key: [] for key in ("deviation", "rademacher", "rademacher_abs")}
    rows = max(1, budget // (n * (n + 1)))
    starts = torch.arange(n, device=X.device) + n  # each point's index in the tripled arrays
    length = torch.arange(n + 1, device=X.device)  # run lengths 0..n
    first = starts[:, None].expand(n, n + 1)
    last = first + length[None] - 1  # index of the run's last point (r >= 1)
    after = first + length[None]  # the first point after the run
    before = first - 1
    for lo_e in range(0, E, rows):
        phi = angle[lo_e : lo_e + rows]
        phi3 = torch.cat([phi - 2 * math.pi, phi, phi + 2 * math.pi], -1)  # (e, 3n)
        zero = phi.new_zeros(phi.shape[0], 1)
        cum = torch.cat([zero, torch.cumsum(weight[lo_e : lo_e + rows].repeat(1, 3), -1)], -1)
        cum_eps = torch.cat([zero, torch.cumsum(eps_weight[lo_e : lo_e + rows].repeat(1, 3), -1)], -1)
        g3 = gamma(phi3)
        take = lambda t, idx: t[:, idx.flatten()].view(t.shape[0], *idx.shape)
        run = take(cum, after) - take(cum, first)  # (e, n, n + 1): (1/n) Σ_run f
        run_eps = take(cum_eps, after) - take(cum_eps, first)
        span = take(phi3, last.clamp(min=0)) - take(phi3, first)
        fits = (length[None, None] == 0) | (span <= math.pi)
        closed = take(g3, last.clamp(min=0)) - take(g3, first)  # P of the arc from the first to the last angle
        gap = torch.minimum(take(g3, after) - take(g3, before), total / 2)
        nonempty = fits & (length[None, None] > 0)
        upper = torch.where(nonempty, run - closed, -torch.inf).amax((-2, -1)).clamp(min=0)
        lower = torch.where(fits, gap - run, -torch.inf).amax((-2, -1))
        out["deviation"].append(torch.maximum(upper, lower))
        best = torch.where(fits, run_eps, -torch.inf).amax((-2, -1))  # r = 0 gives 0: the empty arc
        worst = torch.where(fits, run_eps, torch.inf).amin((-2, -1))
        out["rademacher"].append(best)
        out["rademacher_abs"].append(torch.maximum(best, -worst))
    return {key: torch.cat(parts) for key, parts in out.items()}


def circle_net(points: int) -> tuple[Tensor, float]:
    """An ``ε``-net of the unit circle: ``points`` equally spaced unit vectors and its exact covering radius
    ``ε = 2 sin(π / (2 · points))`` (paper B, Appendix C.6, Step 1; :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    points : int
        The number of points of the net, at least 3.

    Returns
    -------
    (Tensor, float)
        ``(points, 2)`` unit vectors and ``ε``: every unit vector lies within ``ε`` of one of them.

    Raises
    ------
    ValueError
        If ``points < 3``.
    """
    validation.positive_int("points", points)
    if points < 3:
        raise ValueError(f"a net of the circle needs at least 3 points, got {points}")
    t = torch.arange(points, dtype=torch.get_default_dtype()) * (2 * math.pi / points)
    return torch.stack([t.cos(), t.sin()], 1), 2 * math.sin(math.pi / (2 * points))


def net_quadratic_max(A: Tensor, net: Tensor) -> Tensor:
    """``max_{u ∈ U} |uᵀ A u|`` for a batch of symmetric matrices (paper B, Appendix C.6, Step 1, the net
    reduction ``‖A‖ ≤ (1 − 2ε)⁻¹ max_{u ∈ U} |uᵀAu|``; :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    A : Tensor, shape (B, d, d)
        Symmetric matrices.
    net : Tensor, shape (N, d)
        Unit vectors (the net ``U``).

    Returns
    -------
    Tensor, shape (B,)

    Raises
    ------
    ValueError
        On shapes that do not match, or a non-symmetric ``A``.
    """
    validation.tensor("A", A, ndim=3)
    validation.tensor("net", net, ndim=2)
    if A.shape[1] != A.shape[2] or A.shape[2] != net.shape[1]:
        raise ValueError(f"need A (B, d, d) and net (N, d), got {tuple(A.shape)} and {tuple(net.shape)}")
    if not torch.allclose(A, A.transpose(1, 2)):
        raise ValueError("A must be symmetric")
    return torch.einsum("nd,bde,ne->bn", net, A, net).abs().max(1).values


def net_reduction_certificate(points: int, *, tol: float = 1e-4):
    """A certified enclosure of ``min_A max_{u ∈ U} |uᵀAu| / ‖A‖`` over every non-zero symmetric ``2 × 2`` matrix
    ``A``, ``U`` the net of :func:`circle_net` (paper B, Appendix C.6, Step 1, the net reduction
    ``‖A‖ ≤ (1 − 2ε)⁻¹ max_{u ∈ U} |uᵀAu|``, which holds for every ``A`` when the minimum is at least ``1 − 2ε``;
    :ref:`ch-uniform-concentration`).

    Scaling ``A`` (and changing its sign) leaves the ratio unchanged, so ``A = R_θ diag(1, r) R_θᵀ`` with
    ``r ∈ [−1, 1]`` and its top eigenvector at the angle ``θ``; the net is invariant under rotations by ``2π/N``, so
    ``θ ∈ [0, 2π/N]`` covers every ``A``. On that box :func:`companion.certify.maximum` encloses the supremum of
    ``−max_k |(1 + r)/2 + (1 − r)/2 · cos 2(φ_k − θ)|`` in ball arithmetic (``φ_k = 2πk/N``).

    Parameters
    ----------
    points : int
        The net's number of points ``N`` (at least 3).
    tol : float
        The enclosure's precision (positive), as :func:`companion.certify.maximum`.

    Returns
    -------
    companion.certify.Certificate
        ``value``: a proved lower bound of the minimum; ``attained``: the ratio at the matrix ``at = (θ, r)``, proved
        to be at most this, so the minimum lies in ``[value, attained]``; ``margin``: ``value − (1 − 2ε)``, positive
        when the net reduction is proved for every ``A``; ``holds``: the enclosure reached ``tol``.

    Raises
    ------
    ValueError
        On ``points < 3`` or a non-positive ``tol``.

    Examples
    --------
    >>> c = net_reduction_certificate(8)     # the minimum is cos(2π/8) = 0.7071, at r = −1 between two net points
    >>> c.holds, round(c.value, 3), c.margin > 0, round(c.at[1], 3)
    (True, 0.707, True, -1.0)
    """
    from flint import arb

    from . import certify

    _, eps = circle_net(points)
    _positive("tol", tol)
    phis = [arb(2 * k) * arb.pi() / points for k in range(points)]

    def negated(theta, r):
        values = [abs((1 + r) / 2 + (1 - r) / 2 * (2 * (phi - theta)).cos()) for phi in phis]
        top = values[0]
        for v in values[1:]:
            top = top.max(v)
        return -top

    c = certify.maximum(negated, [(0.0, 2 * math.pi / points), (-1.0, 1.0)], tol=tol)
    return certify.Certificate(c.holds, -c.value, -c.attained, c.at, c.boxes, -c.value - (1 - 2 * eps))


def bernstein_tail(n, s, sigma2: float, b: float, *, log: bool = False):
    """The sub-exponential Bernstein bound ``2 exp(−(n/2) min(s²/σ², s/b))`` on ``P((1/n) Σ X_i ≥ s)`` (paper B,
    Appendix C.6, Step 3, the refined Bernstein-type inequality; :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    n, s : array_like
        Sample sizes and thresholds (broadcast together), ``n > 0``, ``s ≥ 0``.
    sigma2, b : float
        The ``(σ², b)`` sub-exponential parameters, both positive.
    log : bool
        Return the natural logarithm of the bound (no underflow for large ``n s``).

    Returns
    -------
    numpy.ndarray
        The bound (or its log), broadcast shape of ``n`` and ``s``.

    Raises
    ------
    ValueError
        On a non-positive ``σ²``, ``b`` or ``n``, or a negative ``s``.
    """
    _positive("sigma2", sigma2)
    _positive("b", b)
    n, s = np.broadcast_arrays(np.asarray(n, float), np.asarray(s, float))
    if np.any(n <= 0) or np.any(s < 0):
        raise ValueError("need n > 0 and s >= 0")
    exponent = math.log(2) - 0.5 * n * np.minimum(s**2 / sigma2, s / b)
    return exponent if log else np.exp(exponent)


def chi_square_mean_tail(n, s, *, log: bool = False):
    """The exact tail ``P((1/n) Σ (Z_i² − 1) ≥ s)`` for ``Z_i ~ N(0, 1)`` i.i.d., i.e. ``P(χ²_n ≥ n (1 + s))``
    (``scipy.stats.chi2.sf``; paper B, Appendix C.6, Step 3: the test case of the Bernstein inequality;
    :ref:`ch-uniform-concentration`).

    Parameters
    ----------
    n, s : array_like
        Sample sizes and thresholds (broadcast together), ``n > 0``, ``s ≥ 0``.
    log : bool
        Return the natural logarithm of the tail (``scipy.stats.chi2.logsf``).

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    ValueError
        On a non-positive ``n`` or a negative ``s``.
    """
    from scipy.stats import chi2

    n, s = np.broadcast_arrays(np.asarray(n, float), np.asarray(s, float))
    if np.any(n <= 0) or np.any(s < 0):
        raise ValueError("need n > 0 and s >= 0")
    return chi2.logsf(n * (1 + s), n) if log else chi2.sf(n * (1 + s), n)


def bernstein_ratio_sup(n: int, sigma2: float, b: float, *, s_max: float = 100.0, tol: float = 1e-4):
    """A certified enclosure of ``sup_{0 ≤ s ≤ s_max} P(χ²_n ≥ n (1 + s)) / (2 exp(−(n/2) min(s²/σ², s/b)))``, the
    exact tail of the mean of ``Z_i² − 1`` over the sub-exponential Bernstein bound (paper B, Appendix C.6, Step 3;
    :ref:`ch-uniform-concentration`): the inequality holds on the whole interval when the enclosure's upper end is
    at most 1.

    The interval is split at the kink ``s = σ²/b`` of the minimum; on each piece :func:`companion.certify.maximum`
    evaluates the ratio ``Q(n/2, n (1 + s)/2) exp((n/2) m(s)) / 2`` (``Q`` the regularized upper incomplete gamma
    function, ``m`` the piece's branch of the minimum) in ball arithmetic over sub-intervals, so every ``s`` of the
    interval is covered, not a grid of them.

    Parameters
    ----------
    n : int
        The number of variables (positive).
    sigma2, b : float
        The ``(σ², b)`` sub-exponential parameters, both positive.
    s_max : float
        The upper end of the interval of thresholds (positive).
    tol : float
        The enclosure's precision (relative where the supremum exceeds 1), as :func:`companion.certify.maximum`.

    Returns
    -------
    companion.certify.Certificate
        ``value``: a proved upper bound of the supremum; ``attained``: the ratio proved at the point ``at`` (``(s,)``),
        a lower bound of it; ``holds``: both pieces enclosed to ``tol``; ``boxes``: the sub-intervals of both.

    Raises
    ------
    ValueError
        On a non-positive or non-integer ``n``, a non-positive ``σ²``, ``b``, ``s_max`` or ``tol``.

    Examples
    --------
    >>> c = bernstein_ratio_sup(10, 4.0, 4.0)        # Z² − 1 is (4, 4)-sub-exponential
    >>> c.holds, round(c.value, 3), c.value <= 1
    (True, 0.22, True)
    >>> wrong = bernstein_ratio_sup(1000, 2.0, 4.0)   # σ² = 2, the variance of Z² − 1, is not enough
    >>> wrong.attained > 1, round(wrong.at[0], 2)         # fails near the kink s = σ²/b
    (True, 0.5)
    """
    from flint import arb

    from . import certify

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    for name, value in (("sigma2", sigma2), ("b", b), ("s_max", s_max), ("tol", tol)):
        _positive(name, value)
    half = arb(int(n)) / 2
    pieces = [(0.0, min(sigma2 / b, s_max), lambda s: s * s / sigma2)]
    if sigma2 / b < s_max:
        pieces.append((sigma2 / b, float(s_max), lambda s: s / b))

    def ratio(branch):
        return lambda s: (half * (1 + s)).gamma_upper(half, regularized=1) * (half * branch(s)).exp() / 2

    found = [certify.maximum(ratio(branch), [(lo, hi)], tol=tol) for lo, hi, branch in pieces]
    top = max(found, key=lambda c: c.attained)
    return certify.Certificate(
        all(c.holds for c in found),
        max(c.value for c in found),
        top.attained,
        top.at,
        sum(c.boxes for c in found),
        method="interval branch and bound (python-flint arb balls) of the regularized incomplete gamma function",
    )


def square_tail_ratio_sup(t_max: float = 200.0, *, rate: float = 0.5, factor: float = 2.0, tol: float = 1e-6):
    """A certified enclosure of ``sup_{0 ≤ t ≤ t_max} P(Z² > t) / (factor · e^{−rate · t})`` for ``Z ~ N(0, 1)``, with
    ``P(Z² > t) = erfc(√(t/2))`` (paper B, Lemma 15's tail ``P(Z² > t) ≤ 2e^{−t/2}``, used in Appendix C.6, Step 3;
    :ref:`ch-uniform-concentration`): the tail bound holds on the whole interval when the upper end is at most 1.

    :func:`companion.certify.maximum` evaluates the ratio in ball arithmetic over sub-intervals of ``[0, t_max]``, so
    every ``t`` is covered. At Lemma 15's constants the ratio is ``erfcx(√(t/2)) / 2``, which decreases from its
    value ``1/2`` at ``t = 0``, so no ``t`` beyond the interval can exceed it.

    Parameters
    ----------
    t_max : float
        The upper end of the interval (positive).
    rate, factor : float
        The bound's rate and constant (Lemma 15: ``1/2`` and ``2``), both positive.
    tol : float
        The enclosure's precision (relative where the supremum exceeds 1), as :func:`companion.certify.maximum`.

    Returns
    -------
    companion.certify.Certificate
        ``value``: a proved upper bound of the supremum; ``attained``: the ratio proved at the point ``at``
        (``(t,)``), a lower bound of it; ``holds``: the enclosure reached ``tol``.

    Raises
    ------
    ValueError
        On a non-positive ``t_max``, ``rate``, ``factor`` or ``tol``.

    Examples
    --------
    >>> c = square_tail_ratio_sup()                # P(Z² > t) ≤ 2 e^{−t/2}: the ratio is largest at t = 0
    >>> c.holds, round(c.value, 6), c.at
    (True, 0.5, (0.0,))
    >>> square_tail_ratio_sup(rate=1.0).attained > 1   # a rate of 1 fails for large t
    True
    """
    from flint import arb

    from . import certify

    for name, value in (("t_max", t_max), ("rate", rate), ("factor", factor), ("tol", tol)):
        _positive(name, value)
    r, f = arb(rate), arb(factor)
    return certify.maximum(lambda t: (t / 2).sqrt().erfc() * (r * t).exp() / f, [(0.0, float(t_max))], tol=tol)
