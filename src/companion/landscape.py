"""The search for stationary points of paper B's Theorem 1, continued until each run is decided.

A zero-finder (:func:`find_stationary`, then :func:`polish_stationary`, on the closed forms of
:mod:`companion.population`) started from random points ends either at a stationary point or somewhere it has not
converged. Instead of
setting the second kind aside by a rule about where they ended, :func:`continue_search` runs them on, in rounds of
the same search, and records after every round the parameter norm ``‖θ‖`` and the gradient norm ``‖∇L‖``.
:func:`escaping` then decides each run by what it *does*: it reached a stationary point (``‖∇L‖ ≤ c ε S``,
:func:`companion.population.stationarity_ratio`), or it escapes — ``‖θ‖`` grows and ``‖∇L‖`` falls at every round, the
signature of a critical point at infinity. A run the rounds leave undecided (far out on a valley whose narrow,
curved floor a free step leaves) goes on along spheres of growing radius, :func:`continue_in_radius`, where it
escapes (``‖∇L‖`` falling from sphere to sphere) or passes near a stationary point; a run that does none of these
has stalled, which counts against the search. Explained in :ref:`ch-landscape`.

Examples
--------
>>> import torch
>>> from companion import landscape
>>> theta = torch.tensor([[1.0, 2.0], [1.5, 1.5], [2.0, 3.0]])   # (rounds + 1, runs)
>>> grad = torch.tensor([[1e-3, 1e-3], [5e-4, 2e-3], [1e-4, 1e-4]])
>>> landscape.escaping(theta, grad).tolist()
[True, False]
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from . import population, validation

__all__ = [
    "find_stationary",
    "polish_stationary",
    "Continuation",
    "ValleyTolerance",
    "continue_search",
    "continue_in_radius",
    "escaping",
    "neuron_tilt",
    "valley_tolerance",
]


def _scaled_gradient(theta: Tensor, a: Tensor, k: int, d: int) -> tuple[Tensor, Tensor]:
    """The search's residual ``ρ = (∇_{w_l}L/v_l, ∇_{v_l}L/‖w_l‖)_l`` ``(E, p)`` and its Jacobian ``(E, p, p)`` at the
    flat parameters ``theta (E, p)`` (closed-form Hessian and the product rule; :func:`find_stationary`)."""
    WW, vv = population.unflatten_params(theta, k, d)
    gW, gv = population._loss_gradient(WW, vv, a)[1:]
    n = WW.norm(dim=-1)  # (E, k)
    rho = torch.cat([(gW / vv[..., None]).flatten(-2), gv / n], -1)
    H = population.hessian(WW, vv, a)
    Jm = H * torch.cat([(1 / vv)[..., None].expand(*vv.shape, d).flatten(-2), 1 / n], -1)[..., :, None]
    wb = WW / n[..., None]
    kd = k * d
    for l in range(k):  # d/dw_l of 1/‖w_l‖ and d/dv_l of 1/v_l
        Jm[..., kd + l, l * d : (l + 1) * d] -= (gv[..., l] / n[..., l] ** 2)[..., None] * wb[..., l, :]
        Jm[..., l * d : (l + 1) * d, kd + l] -= gW[..., l, :] / vv[..., l : l + 1] ** 2
    return rho, Jm


def _levenberg_marquardt(
    theta: Tensor, a: Tensor, k: int, d: int, *, iters: int, damping: float = 1e-3, on_sphere: bool = False
) -> Tensor:
    """Batched Levenberg–Marquardt on ``‖ρ(θ)‖²`` (:func:`_scaled_gradient`) from ``theta (E, p)``; returns ``(E, p)``.

    A step solves ``(JᵀJ + λI) δ = −Jᵀρ`` and is kept only if ``‖ρ‖`` decreases (then λ ÷ 3, else λ × 4). With
    ``on_sphere`` the search stays on the sphere ``‖θ‖ = ‖theta‖``: ``J`` is replaced by ``JP``, ``P`` the projection
    onto the sphere's tangent space at the current point (so ``δ`` lies in it), and ``θ + δ`` is scaled back to the
    sphere (:func:`continue_in_radius`)."""
    theta = theta.clone()
    lam = torch.full(theta.shape[:-1], float(damping), dtype=theta.dtype, device=theta.device)
    eye = torch.eye(theta.shape[-1], dtype=theta.dtype, device=theta.device)
    radius = theta.norm(dim=-1, keepdim=True)
    rho, Jm = _scaled_gradient(theta, a, k, d)
    rn = rho.norm(dim=-1)
    for _ in range(iters):
        if on_sphere:
            u = theta / radius
            Jm_step = Jm - (Jm @ u[..., :, None]) * u[..., None, :]  # J P, P = I - u uᵀ
        else:
            Jm_step = Jm
        JT = Jm_step.transpose(-1, -2)
        step = -torch.linalg.solve(JT @ Jm_step + lam[..., None, None] * eye, (JT @ rho[..., None]))[..., 0]
        new = theta + step
        if on_sphere:
            new = new * (radius / new.norm(dim=-1, keepdim=True))
        rho_new, J_new = _scaled_gradient(new, a, k, d)
        rn_new = rho_new.norm(dim=-1)
        ok = torch.isfinite(rn_new) & (rn_new < rn) & torch.isfinite(J_new).flatten(-2).all(-1)
        theta = torch.where(ok[..., None], new, theta)
        rho = torch.where(ok[..., None], rho_new, rho)
        Jm = torch.where(ok[..., None, None], J_new, Jm)
        rn = torch.where(ok, rn_new, rn)
        lam = torch.where(ok, lam / 3, lam * 4).clamp(1e-15, 1e12)
    return theta


def find_stationary(W: Tensor, v: Tensor, a: Tensor, iters: int = 100, damping: float = 1e-3) -> tuple[Tensor, Tensor, Tensor]:
    """Search for stationary points with nonzero neurons by batched Levenberg–Marquardt (Theorem 1, :ref:`ch-landscape`).

    Minimises ``‖ρ(θ)‖²`` for the scaled gradient ``ρ = (∇_{v_l}L/‖w_l‖, ∇_{w_l}L/v_l)_l`` (proof D.1's
    ``[1/v1, 1/v2] ∇_W L``): its zeros with ``v_l, w_l ≠ 0`` are exactly the stationary points, but unlike
    ``‖∇L‖²`` it does not vanish on the degenerate set ``v_l = 0``. Its Jacobian comes from the closed-form
    Hessian by the product rule. A step solves ``(JᵀJ + λI) δ = −Jᵀρ`` and is kept only if ``‖ρ‖`` decreases
    (then λ ÷ 3, else λ × 4). ``W (E, k, d)``, ``v (E, k)``, ``a (d,)``.
    Returns ``(W, v, ‖∇L‖ (E,))`` at the end (the unscaled gradient norm, for classification).

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The starting first-layer weights.
    v : Tensor, (E, k)
        The starting signed output weights.
    a : Tensor, (d,)
        The target.
    iters : int
        The Levenberg–Marquardt steps.
    damping : float
        The initial damping ``λ``.

    Returns
    -------
    W : Tensor, (E, k, d)
        The first-layer weights found.
    v : Tensor, (E, k)
        The output weights found.
    grad_norm : Tensor, (E,)
        ``‖∇L‖`` there.

    Raises
    ------
    ValueError
        As :func:`companion.population.loss`, or when ``iters`` is not a positive int.
    """
    population._check_net(W, v, a)
    validation.positive_int("iters", iters)
    k, d = W.shape[-2], W.shape[-1]
    theta = _levenberg_marquardt(population.flatten_params(W, v), a, k, d, iters=iters, damping=damping)
    W_out, v_out = population.unflatten_params(theta, k, d)
    gW, gv = population._loss_gradient(W_out, v_out, a)[1:]
    return W_out, v_out, population.flatten_params(gW, gv).norm(dim=-1)


def polish_stationary(
    W: Tensor, v: Tensor, a: Tensor, *, iters: int = 60, rcond: float = 1e-12
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Newton polish of approximate stationary points to the dtype's resolution (Theorem 1, :ref:`ch-landscape`).

    Each step is the minimum-norm least-squares solution of ``H δ = −∇L`` (closed-form Hessian, pseudo-inverse by
    its eigendecomposition, eigenvalues below ``rcond`` times the largest in modulus dropped: the stationary sets
    are manifolds, so ``H`` is singular on them), with backtracking (``δ, δ/4, δ/16, …``) that keeps a step only
    if ``‖∇L‖`` decreases. Newton's step converges
    quadratically onto a manifold of zeros with a constant-rank Hessian and linearly along directions where the
    gradient is quadratic (Theorem 1's flat valleys). Stops when no member improves for three iterations.
    ``W (E, k, d)``, ``v (E, k)``, ``a (d,)``. Returns ``(W, v, ratio (E,), steps_taken (E,))`` with ``ratio`` from
    :func:`companion.population.stationarity_ratio`.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The approximate stationary first-layer weights.
    v : Tensor, (E, k)
        The signed output weights.
    a : Tensor, (d,)
        The target.
    iters : int
        The most Newton steps.
    rcond : float
        The relative cut-off of the pseudo-inverse.

    Returns
    -------
    W : Tensor, (E, k, d)
        The polished first-layer weights.
    v : Tensor, (E, k)
        The polished output weights.
    ratio : Tensor, (E,)
        :func:`companion.population.stationarity_ratio` there.
    steps_taken : Tensor, (E,), int64
        The steps each member kept.

    Raises
    ------
    ValueError
        As :func:`companion.population.loss`, or when ``iters`` is not a positive int.
    """
    population._check_net(W, v, a)
    validation.positive_int("iters", iters)
    k, d = W.shape[-2], W.shape[-1]
    theta = population.flatten_params(W, v).clone()

    def gnorm(th):
        WW, vv = population.unflatten_params(th, k, d)
        g = population.flatten_params(*population._loss_gradient(WW, vv, a)[1:])
        return g, g.norm(dim=-1)

    grad, gn = gnorm(theta)
    taken = torch.zeros(theta.shape[:-1], dtype=torch.long, device=theta.device)
    idle = 0
    for _ in range(iters):
        H = population.hessian(*population.unflatten_params(theta, k, d), a)
        step = -(torch.linalg.pinv(H, rtol=rcond, hermitian=True) @ grad[..., None])[..., 0]
        improved = torch.zeros_like(gn, dtype=torch.bool)
        t = 1.0
        for _ in range(6):
            new = theta + t * torch.where(improved[..., None], torch.zeros_like(step), step)
            g_new, gn_new = gnorm(new)
            ok = ~improved & torch.isfinite(gn_new) & (gn_new < gn)
            theta = torch.where(ok[..., None], new, theta)
            grad = torch.where(ok[..., None], g_new, grad)
            gn = torch.where(ok, gn_new, gn)
            improved |= ok
            if bool(improved.all()):
                break
            t /= 4
        taken += improved.long()
        idle = 0 if bool(improved.any()) else idle + 1
        if idle >= 3:
            break
    W_out, v_out = population.unflatten_params(theta, k, d)
    return W_out, v_out, population.stationarity_ratio(W_out, v_out, a), taken


@dataclass(frozen=True)
class Continuation:
    """What :func:`continue_search` returns.

    ``W (E, k, d)``, ``v (E, k)``: the end points after the continuation; ``ratio (E,)``: ``‖∇L‖/(ε S)`` there;
    ``theta_norm`` and ``grad_norm`` ``(rounds + 1, E)``: ``‖θ‖`` and ``‖∇L‖`` before the first round and after each
    (a run taken out once stationary keeps its values); ``stationary_at (E,)``: the round after which the run was
    stationary (0: already before the continuation), ``-1`` for one that never was.
    """

    W: Tensor
    v: Tensor
    ratio: Tensor
    theta_norm: Tensor
    grad_norm: Tensor
    stationary_at: Tensor


@dataclass(frozen=True)
class ValleyTolerance:
    """What :func:`valley_tolerance` returns, each ``(E,)``: ``angle`` — the largest ``|sin|`` of the angle between a
    neuron and the line of ``a``; ``tau`` — the largest angle at which the valley's local model leaves the gradient
    within the stationarity rule; ``exponent`` — the model's measured power ``k``; ``grad`` — ``‖∇L‖`` on the tilt
    at ``s = φ0``. ``angle ≤ tau`` where the point's tilt is explained by the rounding floor."""

    angle: Tensor
    tau: Tensor
    exponent: Tensor
    grad: Tensor


def _split(W: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each neuron's part along the line of ``a`` and its tilt off it, ``(E, k, d)`` each, and the largest ``|sin|``
    of a neuron's angle to that line per member, ``(E,)``; ``ValueError`` on a zero neuron."""
    norms = W.norm(dim=-1)  # (E, k)
    if bool((norms == 0).any()):
        raise ValueError("a neuron is zero: its angle to a is undefined")
    unit = a / a.norm()
    along = (W @ unit)[..., None] * unit  # (E, k, d)
    tilt = W - along
    return along, tilt, (tilt.norm(dim=-1) / norms).amax(-1)


def neuron_tilt(W: Tensor, a: Tensor) -> Tensor:
    """The largest ``|sin|`` of the angle between a neuron ``w_j`` and the line of ``a``, per member: ``0`` on the
    manifolds of Theorem 1's saddles, whose neurons are all parallel to ``a`` (:ref:`ch-landscape`).

    Parameters
    ----------
    W : Tensor, (E, k, d)
        First-layer weights, ``k`` neurons per member.
    a : Tensor, (d,)
        The target (any non-zero length).

    Returns
    -------
    Tensor, (E,)
        ``max_j ‖w_j − (w_j·â) â‖ / ‖w_j‖`` with ``â = a/‖a‖``.

    Raises
    ------
    ValueError
        If ``W`` or ``a`` is malformed, on another device or dtype, ``a`` is zero, or a neuron is zero.

    Examples
    --------
    >>> import torch
    >>> from companion import landscape
    >>> W = torch.tensor([[[2.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)
    >>> round(landscape.neuron_tilt(W, torch.tensor([1.0, 0.0], dtype=torch.float64)).item(), 4)
    0.7071
    """
    validation.tensor("W", W, ndim=3)
    validation.tensor("a", a, ndim=1)
    validation.same_device(W=W, a=a)
    if W.shape[-1] != a.shape[0]:
        raise ValueError(f"W's neurons have dimension {W.shape[-1]}, a has {a.shape[0]}")
    if not bool(a.any()):
        raise ValueError("a must not be zero")
    return _split(W, a)[2]


def valley_tolerance(W: Tensor, v: Tensor, a: Tensor, *, c_stat: float, phi0: float = 1e-3) -> ValleyTolerance:
    """How far off the line of ``a`` a stationary point's neurons may lie, derived per point from the valley's local
    model instead of chosen (Theorem 1, :ref:`ch-landscape`).

    Each neuron is split into its part along ``a`` and its tilt ``w_⊥``; the path ``W(s) = W_∥ + (s/φ) W_⊥`` (``φ`` the
    point's largest ``|sin|`` angle, so ``W(φ) = W``) tilts every neuron in the point's own direction. On it the
    gradient follows a local power law ``g(s) = ‖∇L(W(s), v)‖ ≈ κ s^k``, measured at ``s = φ0`` and ``φ0/2``
    (``k = log₂ g(φ0)/g(φ0/2)``). A point that passes the stationarity rule ``‖∇L‖ ≤ c ε S`` can therefore be tilted at
    most ``τ = φ0 (c ε S / g(φ0))^{1/k}`` (``S``: :func:`companion.population.stationarity_scale` at the point); a
    larger tilt is not explained by rounding. ``W (E, k, d)``, ``v (E, k)``, ``a (d,)`` → ``(E,)`` each.

    Parameters
    ----------
    W : Tensor, (E, k, d)
        The first-layer weights of stationary points.
    v : Tensor, (E, k)
        Their signed output weights.
    a : Tensor, (d,)
        The target.
    c_stat : float
        The stationarity rule's multiple of ``ε S``.
    phi0 : float
        The tilt at which the model is measured, in ``(0, 0.1]``; above every point's own tilt.

    Returns
    -------
    ValleyTolerance
        ``angle``, ``tau``, ``exponent`` and ``grad``; a point with no tilt (``angle = 0``) has ``tau = inf`` and
        ``exponent = nan``.

    Raises
    ------
    ValueError
        As :func:`companion.population.loss`, if ``c_stat`` is not positive, if ``phi0`` is outside ``(0, 0.1]``,
        or if a neuron is zero.
    """
    population._check_net(W, v, a)
    if not c_stat > 0:
        raise ValueError(f"c_stat must be positive, got {c_stat!r}")
    if not 0 < phi0 <= 0.1:
        raise ValueError(f"phi0 must lie in (0, 0.1], got {phi0!r}")
    along, tilt, angle = _split(W, a)  # angle: (E,), as neuron_tilt
    tilted = angle > 0
    safe = torch.where(tilted, angle, 1.0)[:, None, None]

    def grad_at(s: float) -> Tensor:
        return population.flatten_params(*population.gradient(along + (s / safe) * tilt, v, a)).norm(dim=-1)

    g1, g2 = grad_at(phi0), grad_at(phi0 / 2)
    k = torch.log2(g1 / g2)
    floor = c_stat * torch.finfo(W.dtype).eps * population.stationarity_scale(W, v, a)
    tau = phi0 * (floor / g1) ** (1 / k)
    return ValleyTolerance(
        angle=angle,
        tau=torch.where(tilted, tau, torch.inf),
        exponent=torch.where(tilted, k, torch.nan),
        grad=torch.where(tilted, g1, torch.nan),
    )


def _norms(W: Tensor, v: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    grad = population.flatten_params(*population.gradient(W, v, a)).norm(dim=-1)
    return population.flatten_params(W, v).norm(dim=-1), grad, population.stationarity_ratio(W, v, a)


def continue_search(
    W: Tensor,
    v: Tensor,
    a: Tensor,
    *,
    rounds: int,
    iters: int,
    polish_iters: int = 60,
    c_stat: float = 64.0,
) -> Continuation:
    """Continue the stationary-point search from its end points, in rounds, until each run is decided (Theorem 1,
    :ref:`ch-landscape`).

    Parameters
    ----------
    W, v
        End points of the search, ``(E, k, d)`` and ``(E, k)`` (signed output weights).
    a
        The target ``(d,)``.
    rounds
        Rounds of the search; each is ``iters`` Levenberg–Marquardt iterations with a fresh damping
        (:func:`find_stationary`) and a Newton polish of at most ``polish_iters`` steps.
    iters
        Levenberg–Marquardt iterations per round.
    polish_iters
        The most Newton steps of each round's polish (:func:`polish_stationary`).
    c_stat
        Rule 1: a run is stationary when ``‖∇L‖ ≤ c_stat · ε S``; it is then taken out of the batch.

    Returns
    -------
    Continuation
        The end points, their stationarity ratio and the history of ``‖θ‖`` and ``‖∇L‖`` over the rounds.

    Raises
    ------
    ValueError
        If ``rounds`` or ``iters`` is not a positive integer.
    """
    validation.positive_int("rounds", rounds)
    validation.positive_int("iters", iters)
    W, v = W.clone(), v.clone()
    theta0, grad0, ratio = _norms(W, v, a)
    theta_hist, grad_hist = [theta0], [grad0]
    stationary_at = torch.where(ratio <= c_stat, 0, -1)
    for k in range(1, rounds + 1):
        live = (stationary_at < 0).nonzero()[:, 0]
        theta_k, grad_k = theta_hist[-1].clone(), grad_hist[-1].clone()
        if len(live):
            W_live, v_live, _ = find_stationary(W[live], v[live], a, iters=iters)
            W_live, v_live, _, _ = polish_stationary(W_live, v_live, a, iters=polish_iters)
            W[live], v[live] = W_live, v_live
            theta_live, grad_live, ratio_live = _norms(W_live, v_live, a)
            theta_k[live], grad_k[live], ratio[live] = theta_live, grad_live, ratio_live
            done = live[ratio_live <= c_stat]
            stationary_at[done] = k
        theta_hist.append(theta_k)
        grad_hist.append(grad_k)
    return Continuation(W, v, ratio, torch.stack(theta_hist), torch.stack(grad_hist), stationary_at)


def continue_in_radius(
    W: Tensor,
    v: Tensor,
    a: Tensor,
    *,
    steps: int,
    growth: float,
    iters: int = 40,
    c_stat: float = 64.0,
) -> Continuation:
    """Continue runs that the rounds of :func:`continue_search` left undecided along spheres of growing radius
    (Theorem 1, :ref:`ch-landscape`).

    On a valley to a critical point at infinity the search's merit ``‖ρ‖²`` falls only along a curved, narrow
    floor, and a free step in the flat direction leaves it: the rounds stop moving. Here the radius is the
    parameter of the path instead: for ``j = 1, …, steps`` the run minimises ``‖ρ‖²`` on the sphere
    ``‖θ‖ = (1 + growth)^j ‖θ₀‖`` (Levenberg–Marquardt projected onto the sphere's tangent space), started from the
    secant through its last two points (the first from the point scaled to the new radius). A run that escapes
    has ``‖∇L‖`` falling at every step (:func:`escaping` on the returned history; ``‖θ‖`` grows by construction),
    and one with ``‖∇L‖ ≤ c_stat · ε S`` is stationary and taken out. A run whose ``‖∇L‖`` rises from one sphere
    to the next has passed near a stationary point at a finite distance: it leaves the spheres, its history stops
    (so it does not escape), and its point of smallest ``‖∇L‖`` is returned, for the free search
    (:func:`continue_search`) to go on from.

    Parameters
    ----------
    W, v
        The runs' points, ``(E, k, d)`` and ``(E, k)`` (signed output weights).
    a
        The target ``(d,)``.
    steps
        The number of spheres.
    growth
        The relative growth of the radius per step, ``> 0``.
    iters
        Levenberg–Marquardt iterations on each sphere.
    c_stat
        Rule 1: a run is stationary when ``‖∇L‖ ≤ c_stat · ε S``.

    Returns
    -------
    Continuation
        As :func:`continue_search`, with ``theta_norm`` and ``grad_norm`` ``(steps + 1, E)`` over the spheres and
        ``stationary_at`` the step after which a run was stationary; ``W``, ``v`` and ``ratio`` are a run's last
        point, or for one that left the spheres its point of smallest ``‖∇L‖``.

    Raises
    ------
    ValueError
        As :func:`companion.population.loss`, or when ``steps`` or ``iters`` is not a positive integer or
        ``growth`` is not a positive finite number.

    Examples
    --------
    >>> import torch
    >>> from companion import landscape
    >>> a = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    >>> W = torch.tensor([[[0.6, 0.8, 0.0, 0.0], [0.6, 0.79, 0.01, 0.0]]], dtype=torch.float64) * 5
    >>> v = torch.tensor([[4.0, -4.0]], dtype=torch.float64)
    >>> out = landscape.continue_in_radius(W, v, a, steps=3, growth=0.02, iters=5)
    >>> tuple(out.grad_norm.shape), bool((out.theta_norm[1:] > out.theta_norm[:-1]).all())
    ((4, 1), True)
    """
    population._check_net(W, v, a)
    validation.positive_int("steps", steps)
    validation.positive_int("iters", iters)
    growth = validation.nonnegative("growth", growth)
    if growth == 0:
        raise ValueError("growth must be a positive finite number, got 0")
    k, d = W.shape[-2], W.shape[-1]
    theta = population.flatten_params(W, v).clone()
    theta0, grad0, ratio = _norms(W, v, a)
    theta_hist, grad_hist = [theta0], [grad0]
    stationary_at = torch.where(ratio <= c_stat, 0, -1)
    on_spheres = stationary_at < 0
    closest, closest_grad = theta.clone(), grad0.clone()  # each run's point of smallest ||grad L|| so far
    previous = None
    for j in range(1, steps + 1):
        live = on_spheres.nonzero()[:, 0]
        theta_j, grad_j = theta_hist[-1].clone(), grad_hist[-1].clone()
        if len(live):
            here = theta[live]
            guess = here if previous is None else 2 * here - previous[live]
            radius = theta0[live] * (1 + growth) ** j
            guess = guess * (radius / guess.norm(dim=-1))[:, None]
            previous = theta.clone()
            theta[live] = _levenberg_marquardt(guess, a, k, d, iters=iters, on_sphere=True)
            W_live, v_live = population.unflatten_params(theta[live], k, d)
            theta_live, grad_live, ratio_live = _norms(W_live, v_live, a)
            rose = grad_live >= grad_j[live]
            nearer = grad_live < closest_grad[live]
            closest[live[nearer]], closest_grad[live[nearer]] = theta[live[nearer]], grad_live[nearer]
            theta_j[live], grad_j[live], ratio[live] = theta_live, grad_live, ratio_live
            stationary_at[live[ratio_live <= c_stat]] = j
            on_spheres[live[(ratio_live <= c_stat) | rose]] = False
            left = live[rose & (ratio_live > c_stat)]  # passed near a stationary point between two spheres
            if len(left):
                theta[left] = closest[left]
                ratio[left] = population.stationarity_ratio(*population.unflatten_params(closest[left], k, d), a)
        theta_hist.append(theta_j)
        grad_hist.append(grad_j)
    W_out, v_out = population.unflatten_params(theta, k, d)
    return Continuation(W_out, v_out, ratio, torch.stack(theta_hist), torch.stack(grad_hist), stationary_at)


def escaping(theta_norm: Tensor, grad_norm: Tensor) -> Tensor:
    """Runs that escape: ``‖θ‖`` strictly grows and ``‖∇L‖`` strictly falls from each round to the next (Theorem 1,
    :ref:`ch-landscape`). ``theta_norm``, ``grad_norm`` ``(rounds + 1, E)`` → ``(E,)`` bool.

    A run that drifts along a valley to a critical point at infinity does both at every round; one that converges
    to a stationary point at a finite distance stops growing, and one that stalls stops falling.

    Parameters
    ----------
    theta_norm : Tensor, shape (rounds + 1, E)
        ``‖θ‖`` before the first round and after each (``Continuation.theta_norm``).
    grad_norm : Tensor, shape (rounds + 1, E)
        ``‖∇L‖`` likewise (``Continuation.grad_norm``).

    Returns
    -------
    Tensor of bool, shape (E,)
        Whether the run's ``‖θ‖`` strictly grows and its ``‖∇L‖`` strictly falls at every round.

    Raises
    ------
    ValueError
        If either is not a finite floating-point tensor of two dimensions, if their shapes differ, or if there
        are fewer than two rows (``rounds + 1 < 2``).
    """
    validation.tensor("theta_norm", theta_norm, ndim=2)
    validation.tensor("grad_norm", grad_norm, ndim=2)
    if theta_norm.shape != grad_norm.shape or theta_norm.shape[0] < 2:
        raise ValueError(
            f"need two histories of the same shape (rounds + 1 >= 2, E), got {tuple(theta_norm.shape)}, {tuple(grad_norm.shape)}"
        )
    grows = (theta_norm[1:] > theta_norm[:-1]).all(0)
    falls = (grad_norm[1:] < grad_norm[:-1]).all(0)
    return grows & falls
