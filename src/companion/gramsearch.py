"""The entrywise Gram supremum: each last-hidden-layer Gram entry's largest drift over the sphere ``‖h‖ = D``, by a
monotone ascent in the coordinates the entry depends on (paper C's Gram drift bound; :ref:`ch-parameter-ball`).

``G_H,ij`` depends on ``W_h`` only through ``W_h x_{h−1,i}`` and ``W_h x_{h−1,j}``, the layer's action on the two
inputs' features at the perturbed point. Projecting a change ``ΔW_h`` onto the span of those two features leaves
``G_ij`` unchanged and does not increase ``‖ΔW_h‖``, so the supremum over the ball is attained by changes
``ΔW_h = B_h Q_hᵀ``, where ``Q_h`` ``(m_in, 2)`` is an orthonormal basis of the two features at the perturbed point
(Gram–Schmidt: a moving frame, differentiable) and ``B_h`` ``(m, 2)`` is free, with ``‖ΔW_h‖_F = ‖B_h‖_F``
exactly. A direction is then ``v = (B_1, …, B_H, Δa)``, ``(2H + 1) m`` numbers per entry (``m(d + m(H − 1) + 1)``
in the full space), and every entry of every member is ascended at once by projected gradient (or limited-memory
quasi-Newton) steps on ``‖v‖ = D`` with Armijo backtracking, so each accepted step raises the entry's drift; entries
that have stopped leave the batch, and backtracking re-evaluates only the entries whose step is still too long. For a
diagonal entry the two features coincide and the frame has one column.

The chapter's supremum rows use it at one radius across the widths (:func:`gram_entry_supremum`) and over the whole
ball (:func:`supremum_sweep`); :func:`companion.widenet.gram_entry_ascent` (first-order direction, then fixed-point
steps), the width sweep's cheaper search, is measured against it there.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import activations, device, validation
from . import widenet as wn

__all__ = ["gram_entry_supremum", "supremum_sweep"]


def _frame(x: Tensor, single: Tensor) -> Tensor:
    """Orthonormal basis ``(E, K, m, 2)`` of the two rows of ``x`` ``(E, K, 2, m)`` (second column zero where
    ``single``, ``(K,)`` or ``(E, K)``: a diagonal entry)."""
    q1 = x[:, :, 0] / x[:, :, 0].norm(dim=-1, keepdim=True)
    r = x[:, :, 1] - (q1 * x[:, :, 1]).sum(-1, keepdim=True) * q1
    rn = r.norm(dim=-1, keepdim=True)
    q2 = torch.where(single[..., None], torch.zeros_like(r), r / torch.where(single[..., None], 1.0, rn))
    return torch.stack([q1, q2], -1)


def _entries(params, Xp: Tensor, net: wn.Net, v: list[Tensor], single: Tensor) -> Tensor:
    """``G_H,ij`` at ``θ0 + h(v)`` per member and entry ``(E, K)``; ``v = [B_1 … B_H (E, K, m, 2), Δa (E, K, m)]``."""
    H = wn.depth(params)
    E, m = params[-1].shape
    K = Xp.shape[1]
    s = net.scales(H)
    act = activations.get(net.act)
    x = Xp  # (E, K, 2, ·)
    for h in range(1, H + 1):
        Q = _frame(x, single)
        z = (x.reshape(E, 2 * K, -1) @ params[h - 1].transpose(-1, -2)).reshape(E, K, 2, m)
        z = z + (x @ Q) @ v[h - 1].transpose(-1, -2)  # ΔW_h x = B_h Q_hᵀ x
        out = (s[h - 1] / math.sqrt(m)) * act.fn(z)
        prev = x
        x = out if (h == 1 or net.arch == "fc") else prev + out
    g = (params[-1].unsqueeze(1).expand(E, K, m) + v[H]).unsqueeze(2) * act.d1(z)  # (E, K, 2, m)
    Xh = prev if H > 1 else Xp
    return (s[-1] ** 2) * (Xh[:, :, 0] * Xh[:, :, 1]).sum(-1) * (g[:, :, 0] * g[:, :, 1]).sum(-1) / m


def _dot(u: list[Tensor], w: list[Tensor]) -> Tensor:
    return sum((a * b).flatten(2).sum(-1) for a, b in zip(u, w))


def gram_entry_supremum(
    params,
    X: Tensor,
    D: float,
    net: wn.Net | None = None,
    *,
    steps: int = 400,
    tol: float = 1e-4,
    random_starts: int = 0,
    generator: torch.Generator | None = None,
    quasi_newton: bool = False,
    budget: int = 20_000_000,
    first_order: bool = True,
) -> dict:
    """``max_{i ≤ j} sup_{‖h‖ = D} |G_H,ij(θ0 + h) − G_H,ij(θ0)|`` per member, from below, by a monotone ascent of
    every entry and both signs in the entry's own coordinates (paper C's Gram drift; :ref:`ch-parameter-ball`).

    Each entry and sign starts at its first-order direction (the steepest ascent at ``h = 0``, as
    :func:`companion.widenet.gram_entry_ascent`) and takes up to ``steps`` projected gradient steps on the sphere (or
    quasi-Newton steps, ``quasi_newton``) with Armijo backtracking (the step is an angle, doubled after an accepted step,
    halved until the drift rises); an entry stops when its relative stationarity ``D ‖P ∇φ‖ / φ`` (``P`` the
    projection onto the sphere's tangent space) is at most ``tol``, and leaves the batch, so that the work follows
    the entries still ascending rather than the slowest. ``random_starts`` further ascents per entry and sign start
    from directions drawn uniformly on the sphere (from ``generator``), to show whether the first-order start misses
    a higher maximum; ``first_order=False`` ascends the random starts alone (a further round of starts, whose
    first-order ascents an earlier call already made).
    The start ``v = D ∇_v φ(0)/‖∇_v φ(0)‖`` is the first-order direction of the full space expressed in the moving
    frame (the frame then moves with the lower layers, so its drift differs from that of
    :func:`companion.widenet.gram_entry_ascent`'s first step at second order).

    Parameters
    ----------
    params : list of Tensor
        ``[W_1 (E, m, d), …, a (E, m)]``.
    X : Tensor, shape (E, n, d) or (n, d)
        One set of inputs per member, or one shared by every member.
    D : float
        Radius of the sphere (positive).
    net : Net or None
        The architecture, activation and scalings (default ``Net()``).
    steps : int
        The most ascent steps per entry (on one of the chapter's quick draws the slowest entry needed 107 steps
        to reach ``tol = 1e-4``; a cap of 60 left it unconverged).
    tol : float
        The relative stationarity at which an entry stops.
    random_starts : int
        Ascents per entry and sign from random directions, besides the one from the first-order direction.
    generator : torch.Generator or None
        The random starts' stream (required when ``random_starts > 0``): a CPU generator such as
        :func:`companion.device.generator`, so that the starts are the same on every device.
    quasi_newton : bool
        Quasi-Newton directions instead of the projected gradient: Riemannian L-BFGS on the last 6 steps' secant
        pairs (the differences of position and of tangential gradient, projected onto the tangent space), its own
        step length the first trial, the projected gradient where no pair has positive curvature; the same Armijo
        test, so still a monotone ascent to the same stopping rule. On the chapter's draws where the drift is far
        from linear (``D/√m = 1/4``, ``m`` = 64–512) the slowest batch stops within 50–90 steps of about one
        gradient evaluation each; where an entry has several local maxima, a different path may end at another.
    budget : int
        Activation entries per sign in a batch: ``max(1, budget // (4 E m H s))`` entries are ascended at once, or
        ``max(1, budget // (E m (4 H + 14 (2 H + 1)) s))`` with ``quasi_newton`` (the secant pairs and iterates count
        too), ``s = 1 + random_starts`` starts each, both signs together (so twice that in all): a memory cap that
        also fixes the order of the random starts' draws (chunk by chunk, sign by sign); since stopped entries leave
        the batch, a larger batch costs no extra evaluations. The chunks are the same with ``first_order=False``, so
        the random starts are the same draws.
    first_order : bool
        Whether the first-order starts ascend too (default). Without them (``random_starts > 0`` required),
        ``"entry"``, ``"first_order"``, ``"stationarity"`` and ``"unconverged"`` are zeros, and ``"random"`` is
        what a call with them returns, up to rounding (the ascents of a batch are independent).

    Returns
    -------
    dict
        ``"entry"``: ``(E,)``, the largest drift found from the first-order starts; ``"first_order"``: ``(E,)``, the
        largest drift at those starts; ``"random"``: ``(E,)``, the largest drift found from the random starts (zeros
        without them); ``"stationarity"`` and ``"random_stationarity"``: ``(E,)``, the relative stationarity of the
        entry that attains ``"entry"`` and ``"random"``; ``"unconverged"`` and ``"random_unconverged"``: ``(E,)``, the
        ascents from those starts still above ``tol`` after ``steps`` steps; ``"steps"``: the steps taken by the
        slowest batch (the first-order and the random starts of a batch of entries ascend together).

    Raises
    ------
    ValueError
        On mismatched shapes, a non-positive ``D``, a negative ``steps`` or a non-positive ``tol``.
    """
    net = wn.Net() if net is None else net
    E, m, d, H = wn._check(params, X=X)
    wn._check_X(X, d, E)
    for name, value in (("D", D), ("tol", tol)):
        if not validation.nonnegative(name, value) > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")
    for name, value in (("steps", steps), ("random_starts", random_starts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if random_starts and generator is None:
        raise ValueError("random_starts needs a generator")
    if not first_order and not random_starts:
        raise ValueError("first_order=False needs random starts to ascend")
    n = X.shape[-2]
    X = X.expand(E, n, d) if X.ndim == 2 else X
    params = [p.detach() for p in params]
    rows, cols = torch.triu_indices(n, n)
    per_entry = E * m * (4 * H + ((2 * _MEMORY + 2) * (2 * H + 1) if quasi_newton else 0)) * (1 + random_starts)
    chunk = max(1, budget // per_entry)
    keys = ("entry", "first_order", "random", "entry_stationarity", "random_stationarity")
    out = {k: torch.zeros(E, dtype=X.dtype, device=X.device) for k in keys}
    for key in ("entry_unconverged", "random_unconverged"):
        out[key] = torch.zeros(E, dtype=torch.long, device=X.device)
    taken = 0
    for start in range(0, rows.numel(), chunk):
        ri, ci = rows[start : start + chunk], cols[start : start + chunk]
        Xp = torch.stack([X[:, ri], X[:, ci]], 2)
        single = ri == ci
        g0z = _zeros(params, Xp)
        g0 = _entries(params, Xp, net, g0z, single)
        K = ri.numel()
        # both signs, each with its first-order start and its random starts, ascend in one batch, side by side
        # along K: [+first-order, +random…, −first-order, −random…] (the random starts drawn sign by sign)
        starts = []
        for sign in (1.0, -1.0):
            if first_order:
                starts.append(_Batch(params, Xp, net, g0, single.expand(E, K), sign).value_and_grad(g0z)[1])
            starts += [
                [device.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype) for t in g0z]
                for _ in range(random_starts)
            ]
        v0 = [torch.cat([v[i] for v in starts], 1) for i in range(len(g0z))]
        copies = int(first_order) + random_starts
        signs = torch.tensor([1.0, -1.0], dtype=X.dtype, device=X.device).repeat_interleave(copies * K)
        Xk, g0k, single_k = Xp.repeat(1, 2 * copies, 1, 1), g0.repeat(1, 2 * copies), single.repeat(2 * copies)
        best, first, stat, _, k = _ascend(
            params, Xk, net, g0k, single_k, D, signs, steps, tol, start=v0, quasi_newton=quasi_newton
        )
        taken = max(taken, k)
        for at_sign in (0, copies * K):  # the + block, then the − block
            block = slice(at_sign, at_sign + copies * K)
            b, st, f = best[:, block], stat[:, block], first[:, block]
            parts = (("entry", slice(0, K)), ("random", slice(K, None))) if first_order else (("random", slice(None)),)
            for key, part in parts[:copies]:
                top, at = b[:, part].max(1)
                better = top > out[key]
                out[f"{key}_stationarity"] = torch.where(
                    better, st[:, part].gather(1, at[:, None])[:, 0], out[f"{key}_stationarity"]
                )
                out[key] = torch.maximum(out[key], top)
                out[f"{key}_unconverged"] += (st[:, part] > tol).sum(1)
            if first_order:
                out["first_order"] = torch.maximum(out["first_order"], f[:, :K].max(1).values)
    out["stationarity"], out["unconverged"] = out.pop("entry_stationarity"), out.pop("entry_unconverged")
    out["steps"] = taken
    return out


def supremum_sweep(
    m: int,
    radii,
    *,
    H: int,
    n: int,
    d: int,
    members: int,
    net: wn.Net,
    data_seed: int,
    init_seed: int,
    tol: float = 1e-4,
    steps: int = 2000,
    random_starts: int = 0,
    generator: torch.Generator | None = None,
    first_order: bool = True,
) -> dict:
    """The entrywise Gram supremum at each radius of a sweep, on one point's draws of :ref:`ch-parameter-ball`
    (paper C's Gram drift over the whole ball): :func:`gram_entry_supremum` with quasi-Newton directions
    (``quasi_newton=True``) on the network and inputs of :func:`companion.widenet.sweep_draws`, every radius searched
    afresh.

    Parameters
    ----------
    m : int
        The width.
    radii : sequence of float
        The radii ``D`` (``R`` of them, each positive).
    H, n, d, members, data_seed, init_seed : int
        The draws, as :func:`companion.widenet.sweep_draws` takes them.
    net : Net
        The architecture, activation and scalings.
    tol, steps, random_starts, generator, first_order
        As :func:`gram_entry_supremum` takes them (the random starts at every radius).

    Returns
    -------
    dict
        ``"entry"``, ``"first_order"``, ``"random"``, ``"stationarity"``, ``"random_stationarity"``,
        ``"unconverged"``, ``"random_unconverged"``: ``(R, E)`` tensors, one row per radius, as
        :func:`gram_entry_supremum` returns them; ``"steps"``: a list of ``R`` ints.

    Raises
    ------
    ValueError
        On no radius, or as :func:`gram_entry_supremum` raises.

    Examples
    --------
    >>> r = supremum_sweep(16, [0.5, 1.0], H=2, n=3, d=4, members=2, net=wn.Net(), data_seed=0, init_seed=1)
    >>> tuple(r["entry"].shape), bool((r["entry"] >= r["first_order"]).all())
    ((2, 2), True)
    """
    radii = [float(D) for D in radii]
    if not radii:
        raise ValueError("radii must hold at least one radius")
    params, X, _ = wn.sweep_draws(m, H, n=n, d=d, members=members, data_seed=data_seed, init_seed=init_seed)
    found = [
        gram_entry_supremum(
            params,
            X,
            D,
            net,
            steps=steps,
            tol=tol,
            random_starts=random_starts,
            generator=generator,
            quasi_newton=True,
            first_order=first_order,
        )
        for D in radii
    ]
    keys = ("entry", "first_order", "random", "stationarity", "random_stationarity", "unconverged", "random_unconverged")
    out = {k: torch.stack([f[k] for f in found]) for k in keys}
    out["steps"] = [f["steps"] for f in found]
    return out


def _zeros(params, Xp):
    E, m = params[-1].shape
    K = Xp.shape[1]
    z = torch.zeros(E, K, m, 2, dtype=Xp.dtype, device=Xp.device)
    return [z.clone() for _ in range(wn.depth(params))] + [torch.zeros(E, K, m, dtype=Xp.dtype, device=Xp.device)]


def _join(v: list[Tensor]) -> Tensor:
    """``v = [B_1 … B_H (E, K, m, 2), Δa (E, K, m)]`` as one vector per pair ``(E, K, (2H + 1) m)``, each ``B_h``
    column by column."""
    return torch.cat([t.transpose(-1, -2).flatten(2) for t in v[:-1]] + [v[-1]], -1)


def _split(x: Tensor, H: int) -> list[Tensor]:
    """The list ``v`` that :func:`_join` made ``x``, as views of ``x`` (``m`` innermost)."""
    m = x.shape[-1] // (2 * H + 1)
    return [x[..., 2 * m * h : 2 * m * (h + 1)].unflatten(-1, (2, m)).transpose(-1, -2) for h in range(H)] + [x[..., 2 * m * H :]]


class _Batch:
    """The pairs (member, entry) of an ascent, member-major ``(E', K')``: the members' parameters, each pair's inputs
    ``Xp``, entry at ``θ0`` ``g0``, diagonal flag ``single`` and sign (``sign``: a number, or one per pair), and the
    column mask that keeps a diagonal entry's frame to one column."""

    def __init__(self, params, Xp, net, g0, single, sign):
        sign = torch.as_tensor(sign, dtype=g0.dtype, device=g0.device).expand(g0.shape)  # one per pair
        self.params, self.Xp, self.net, self.g0, self.single, self.sign = params, Xp, net, g0, single, sign
        column = torch.stack([torch.ones_like(single), ~single], -1).to(Xp.dtype)[:, :, None, :]
        self.mask = [column] * wn.depth(params) + [torch.ones(1, 1, 1, dtype=Xp.dtype, device=Xp.device)]

    def take(self, at):
        """The pairs at ``at`` (see :func:`_pack`) as a batch of their own."""
        if at is None:
            return self
        rows, cols = at
        params = self.params if rows.numel() == self.g0.shape[0] else [p[rows] for p in self.params]
        Xp, g0, single, sign = (_take(t, at) for t in (self.Xp, self.g0, self.single, self.sign))
        return _Batch(params, Xp, self.net, g0, single, sign)

    def value(self, v):
        return self.sign * (_entries(self.params, self.Xp, self.net, v, self.single) - self.g0)

    def value_and_grad(self, v):
        with torch.enable_grad():
            w = [t.detach().requires_grad_() for t in v]
            phi = self.value([a * b for a, b in zip(w, self.mask)])
            grads = torch.autograd.grad(phi.sum(), w)
        return phi.detach(), [gr * b for gr, b in zip(grads, self.mask)]

    def flat_value(self, x):
        """:meth:`value` at the joined vectors ``x`` (see :func:`_join`)."""
        return self.value(_split(x, len(self.mask) - 1))

    def flat_value_and_grad(self, x):
        """:meth:`value_and_grad` at the joined vectors ``x``, the gradient joined."""
        with torch.enable_grad():
            w = x.detach().requires_grad_()
            phi = self.value([a * b for a, b in zip(_split(w, len(self.mask) - 1), self.mask)])
            (grad,) = torch.autograd.grad(phi.sum(), w)
        return phi.detach(), grad


def _pack(sel: Tensor):
    """Where the selected pairs of ``sel`` ``(E, K)`` go in a smaller member-major batch: ``(at, real)``, with
    ``at = (rows (E',), cols (E', K'))`` the members with a selected pair and each one's pairs, selected first and
    padded with its others, and ``real`` ``(E', K')`` the selected. ``at`` is ``None`` where the batch cannot shrink
    (every member has a selected pair and one has ``K``): the batch stays, the unselected pairs padding in place."""
    counts = sel.sum(1)
    if bool((counts > 0).all()) and int(counts.max()) == sel.shape[1]:
        return None, sel
    rows = counts.nonzero()[:, 0]
    cols = torch.sort((~sel[rows]).to(torch.uint8), dim=1, stable=True).indices[:, : int(counts.max())]
    return (rows, cols), sel[rows].gather(1, cols)


def _take(t: Tensor, at) -> Tensor:
    """The pairs of ``t`` ``(E, K, …)`` at ``at`` (see :func:`_pack`): ``(E', K', …)``."""
    if at is None:
        return t
    rows, cols = at
    if t.ndim == 2:
        return t[rows[:, None], cols]
    flat = (rows[:, None] * t.shape[1] + cols).flatten()  # one gather of whole rows: about twice as fast
    return t.flatten(0, 1).index_select(0, flat).unflatten(0, cols.shape)


def _put(t: Tensor, at, chosen: Tensor, value: Tensor) -> Tensor:
    """``t`` with the ``chosen`` pairs of the batch at ``at`` set to ``value``'s."""
    if at is None:
        return torch.where(_bc(chosen, t), value, t)
    t = t.clone()
    rows, cols = at
    t[rows[:, None].expand_as(cols)[chosen], cols[chosen]] = value[chosen]
    return t


_MEMORY = 6  # the secant pairs the quasi-Newton ascent keeps


def _ascend(
    params, Xp, net, g0, single, D, sign, steps, tol, start=None, armijo=1e-4, halvings=40, quasi_newton=False, memory=_MEMORY
):
    """The ascent of a batch of entries, each with its ``sign`` (a number, or ``(K,)`` or ``(E, K)`` per pair), from
    the first-order direction (or from ``start``, projected onto the frame's columns and the sphere): ``(best, first,
    stationarity, unconverged (E,), steps taken)``; projected
    gradient steps, or with ``quasi_newton`` the quasi-Newton steps of :func:`_quasi_newton` (``memory ≥ 1`` pairs).

    Only the pairs (member, entry) still ascending are evaluated: a pair that has stopped leaves the batch, and the
    backtracking re-evaluates only the pairs whose step is still too long."""
    E, K = g0.shape
    tiny = torch.finfo(g0.dtype).tiny
    batch = _Batch(params, Xp, net, g0, single.expand(E, K), sign)
    v = [t * b for t, b in zip(start, batch.mask)] if start is not None else batch.value_and_grad(_zeros(params, Xp))[1]
    v = _on_sphere(v, D)
    if quasi_newton:
        return _quasi_newton(batch, _join(v), D, steps, tol, armijo, halvings, memory)
    v = [t.transpose(-1, -2).contiguous().transpose(-1, -2) if t.ndim == 4 else t for t in v]  # m innermost
    phi, g = batch.value_and_grad(v)
    first, best, stat_out = phi.clone(), phi.clone(), torch.zeros_like(phi)
    tau = torch.ones_like(phi)  # the step's angle
    real = torch.ones_like(phi, dtype=torch.bool)  # the pairs of the batch still ascending (the others pad)
    place = (torch.arange(E, device=phi.device), torch.arange(K, device=phi.device).expand(E, K))  # in the chunk
    k = 0
    for k in range(1, steps + 1):
        gt = _tangent(g, v, D)  # the tangential gradient
        stat = D * _dot(gt, gt).sqrt() / phi.abs().clamp_min(tiny)
        live = real & (stat > tol)
        if not bool(live.any()):
            k -= 1
            break
        if not bool(torch.equal(live, real)):  # stopped pairs leave the batch
            batch, place, real, at, best, stat_out = _leave(batch, place, real, live, best, stat_out, phi, stat)
            phi, tau = _take(phi, at), _take(tau, at)
            v, g, gt = ([_take(t, at) for t in u] for u in (v, g, gt))
        v, tau = _backtrack(batch, v, gt, _dot(gt, gt), phi, tau, real, D, armijo, halvings)
        phi, g = batch.value_and_grad(v)
    gt = _tangent(g, v, D)
    stat = D * _dot(gt, gt).sqrt() / phi.abs().clamp_min(tiny)
    best, stat_out = _put(best, place, real, phi), _put(stat_out, place, real, stat)
    return best, first, stat_out, (stat_out > tol).sum(1), k


def _leave(batch, place, real, live, best, stat_out, phi, stat):
    """The pairs of the batch that stopped (``real`` but not ``live``) leave it: their drift ``phi`` and
    stationarity ``stat`` are written to ``best`` and ``stat_out`` at their ``place`` in the chunk, and the batch
    is packed to the ``live`` pairs (:func:`_pack`). Returns ``(batch, place, real, at, best, stat_out)``, ``at``
    for the caller to take its own per-pair state with :func:`_take`."""
    stopped = real & ~live
    best, stat_out = _put(best, place, stopped, phi), _put(stat_out, place, stopped, stat)
    at, real = _pack(live)
    place = place if at is None else (place[0][at[0]], _take(place[1], at))
    return batch.take(at), place, real, at, best, stat_out


def _backtrack(batch, v, p, slope, phi, tau, pending, D, armijo, halvings):
    """One Armijo step along ``p`` (``slope = ∇φ·p``) from ``v`` for the ``pending`` pairs: the step's angle ``tau``
    is halved until the drift rises by ``armijo`` times the first-order gain (at most ``halvings`` times), and doubled
    (capped at 1) after an accepted step; each halving re-evaluates only the pairs not yet accepted. Returns
    ``(v, tau)``."""
    tiny = torch.finfo(phi.dtype).tiny
    pn = _dot(p, p).sqrt()
    ok = torch.zeros_like(pending)
    for _ in range(halvings):
        at, sel = _pack(pending)
        scale = _take(tau, at) * D / _take(pn, at).clamp_min(tiny)
        cand = _on_sphere([_take(a, at) + _bc(scale, b) * _take(b, at) for a, b in zip(v, p)], D)
        with torch.no_grad():
            val = batch.take(at).value(cand)
        good = sel & (val >= _take(phi, at) + armijo * scale * _take(slope, at))
        v = [_put(a, at, good, c) for a, c in zip(v, cand)]
        ok = _put(ok, at, good, good)
        tau = _put(tau, at, sel & ~good, _take(tau, at) / 2)
        pending = pending & ~ok
        if not bool(pending.any()):
            break
    return v, torch.where(ok, (2 * tau).clamp_max(1.0), tau)


def _quasi_newton(batch, x, D, steps, tol, armijo, halvings, memory):
    """The ascent of :func:`_ascend` from the joined start ``x`` ``(E, K, N)`` by Riemannian L-BFGS steps on the
    sphere: the direction is the inverse-Hessian estimate of the last ``memory`` secant pairs applied to the
    tangential gradient ``g_k = P_k ∇φ(x_k)`` (``s = P_k(x_k − x_{k−1})``, ``y = P_k g_{k−1} − g_k`` with ``P_k``
    the projection onto the tangent space at ``x_k``, a pair with ``sᵀy ≤ 0`` left out; the two-loop recursion on the
    pairs as they were made, its result projected onto the current tangent space), or the projected gradient where
    no pair is kept or the estimate is not an ascent direction. The step's own length is the first trial (an angle
    of at most 1), then Armijo halvings (:func:`_line_search`). Pairs leave the batch as in :func:`_ascend`."""
    E, K, _ = x.shape
    tiny = torch.finfo(x.dtype).tiny
    phi, g = batch.flat_value_and_grad(x)
    first, best, stat_out = phi.clone(), phi.clone(), torch.zeros_like(phi)
    tau = torch.ones_like(phi)  # the trial angle where no pair is kept
    real = torch.ones_like(phi, dtype=torch.bool)  # the pairs of the batch still ascending (the others pad)
    place = (torch.arange(E, device=phi.device), torch.arange(K, device=phi.device).expand(E, K))  # in the chunk
    S, Y, rho = [], [], []
    gamma = torch.zeros_like(phi)  # the initial scaling sᵀy/yᵀy of the newest pair kept
    x_prev = gt_prev = None
    k = 0
    for k in range(1, steps + 1):
        gt = _flat_tangent(g, x, D)
        stat = D * gt.norm(dim=-1) / phi.abs().clamp_min(tiny)
        live = real & (stat > tol)
        if not bool(live.any()):
            k -= 1
            break
        if not bool(torch.equal(live, real)):  # stopped pairs leave the batch
            batch, place, real, at, best, stat_out = _leave(batch, place, real, live, best, stat_out, phi, stat)
            phi, tau, x, g, gt = (_take(t, at) for t in (phi, tau, x, g, gt))
            S, Y, rho = ([_take(t, at) for t in u] for u in (S, Y, rho))
            gamma = _take(gamma, at)
            if x_prev is not None:
                x_prev, gt_prev = _take(x_prev, at), _take(gt_prev, at)
        if x_prev is not None:  # the newest secant pair, left out of the estimate where sᵀy ≤ 0
            s = _flat_tangent(x - x_prev, x, D)
            y = _flat_tangent(gt_prev, x, D) - gt
            sy, yy = torch.linalg.vecdot(s, y), torch.linalg.vecdot(y, y)
            kept = sy > 1e-10 * s.norm(dim=-1) * yy.sqrt()
            rho_new = torch.where(kept, 1 / torch.where(kept, sy, 1.0), 0.0)
            gamma = torch.where(kept, 1 / (rho_new * yy).clamp_min(1e-300), gamma)  # sᵀy/yᵀy of the newest kept
            S, Y, rho = (S + [s])[-memory:], (Y + [y])[-memory:], (rho + [rho_new])[-memory:]
        p, have = _two_loop(gt, S, Y, rho, gamma)
        p = _flat_tangent(p, x, D)
        slope = torch.linalg.vecdot(gt, p)
        have = have & (slope > 0)  # otherwise the projected gradient, from the angle ``tau``
        p, slope = torch.where(have[..., None], p, gt), torch.where(have, slope, torch.linalg.vecdot(gt, gt))
        tau = torch.where(have, (p.norm(dim=-1) / D).clamp_max(1.0), tau)  # the step's own length first
        x_prev, gt_prev = x, gt
        x, tau, phi, g = _line_search(batch, x, p, slope, phi, g, tau, real, D, armijo, halvings)
    gt = _flat_tangent(g, x, D)
    stat = D * gt.norm(dim=-1) / phi.abs().clamp_min(tiny)
    best, stat_out = _put(best, place, real, phi), _put(stat_out, place, real, stat)
    return best, first, stat_out, (stat_out > tol).sum(1), k


def _two_loop(gt: Tensor, S, Y, rho, gamma: Tensor):
    """L-BFGS's inverse-Hessian estimate applied to ``gt`` ``(E, K, N)`` by the two-loop recursion over the pairs
    ``S``, ``Y`` (lists of ``(E, K, N)``, oldest first; ``rho = 1/sᵀy`` ``(E, K)``, zero for a pair left out),
    scaled at the start by ``gamma`` ``(E, K)``, ``sᵀy/yᵀy`` of the newest pair kept: ``(p, have)``, ``have``
    ``(E, K)`` where a pair is kept (elsewhere ``p`` is not used)."""
    if not rho:
        return gt, torch.zeros_like(gt[..., 0], dtype=torch.bool)
    have = (torch.stack(rho, -1) > 0).any(-1)
    if not bool(have.any()):
        return gt, have
    q, alpha = gt.clone(), []
    for s, y, r in zip(reversed(S), reversed(Y), reversed(rho)):
        a = r * torch.linalg.vecdot(s, q)
        q.sub_(a[..., None] * y)
        alpha.append(a)
    q.mul_(gamma[..., None])
    for s, y, r, a in zip(S, Y, rho, reversed(alpha)):
        q.add_((a - r * torch.linalg.vecdot(y, q))[..., None] * s)
    return q, have


def _line_search(batch, x, p, slope, phi, g, tau, pending, D, armijo, halvings):
    """One Armijo step along ``p`` (``slope = ∇φ·p``) from the joined ``x`` for the ``pending`` pairs, as
    :func:`_backtrack`, the first trial evaluated with its gradient (the one needed if it is accepted) and the pairs
    accepted later re-evaluated with theirs. Returns ``(x, tau, phi, g)``."""
    tiny = torch.finfo(phi.dtype).tiny
    pn = p.norm(dim=-1).clamp_min(tiny)
    stale, ok = pending, torch.zeros_like(pending)
    for i in range(halvings):
        at, sel = _pack(pending)
        scale = _take(tau, at) * D / _take(pn, at)
        cand = _flat_sphere(_take(x, at) + scale[..., None] * _take(p, at), D)
        if i == 0:
            val, grad = batch.take(at).flat_value_and_grad(cand)
        else:
            with torch.no_grad():
                val = batch.take(at).flat_value(cand)
        good = sel & (val >= _take(phi, at) + armijo * scale * _take(slope, at))
        x, ok = _put(x, at, good, cand), _put(ok, at, good, good)
        if i == 0:
            phi, g, stale = _put(phi, at, good, val), _put(g, at, good, grad), pending & ~ok
        tau = _put(tau, at, sel & ~good, _take(tau, at) / 2)
        pending = pending & ~ok
        if not bool(pending.any()):
            break
    if bool(stale.any()):
        at, sel = _pack(stale)
        val, grad = batch.take(at).flat_value_and_grad(_take(x, at))
        phi, g = _put(phi, at, sel, val), _put(g, at, sel, grad)
    return x, torch.where(ok, (2 * tau).clamp_max(1.0), tau), phi, g


def _on_sphere(v: list[Tensor], D: float) -> list[Tensor]:
    norm = _dot(v, v).sqrt()
    return [t * _bc(D / norm, t) for t in v]


def _tangent(u: list[Tensor], at: list[Tensor], D: float) -> list[Tensor]:
    """``u`` projected onto the tangent space of the sphere ``‖v‖ = D`` at ``at``."""
    return [a - _bc(_dot(u, at) / D**2, a) * b for a, b in zip(u, at)]


def _flat_sphere(x: Tensor, D: float) -> Tensor:
    return x * (D / x.norm(dim=-1, keepdim=True))


def _flat_tangent(u: Tensor, at: Tensor, D: float) -> Tensor:
    """:func:`_tangent` for joined vectors."""
    return torch.addcmul(u, torch.linalg.vecdot(u, at)[..., None], at, value=-1 / D**2)


def _bc(c: Tensor, like: Tensor) -> Tensor:
    """``c`` ``(E, K)`` shaped to broadcast against ``like`` ``(E, K, …)``."""
    return c.reshape(*c.shape, *([1] * (like.ndim - 2)))
