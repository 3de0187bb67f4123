"""The entrywise Gram supremum: each last-hidden-layer Gram entry's largest drift over the sphere ``‖h‖ = D``, by a
monotone ascent in the coordinates the entry depends on (paper C's Gram drift bound; :ref:`ch-parameter-ball`).

``G_H,ij`` depends on ``W_h`` only through ``W_h x_{h−1,i}`` and ``W_h x_{h−1,j}``, the layer's action on the two
inputs' features at the perturbed point. Projecting a change ``ΔW_h`` onto the span of those two features leaves
``G_ij`` unchanged and does not increase ``‖ΔW_h‖``, so the supremum over the ball is attained by changes
``ΔW_h = B_h Q_hᵀ``, where ``Q_h`` ``(m_in, 2)`` is an orthonormal basis of the two features at the perturbed point
(Gram–Schmidt: a moving frame, differentiable) and ``B_h`` ``(m, 2)`` is free, with ``‖ΔW_h‖_F = ‖B_h‖_F``
exactly. A direction is then ``v = (B_1, …, B_H, Δa)``, ``(2H + 1) m`` numbers per entry (``m(d + m(H − 1) + 1)``
in the full space), and every entry of every member is ascended at once by projected gradient (or conjugate
gradient) steps on ``‖v‖ = D`` with Armijo backtracking, so each accepted step raises the entry's drift. For a diagonal
entry the two features coincide and the frame has one column.

:func:`companion.widenet.gram_entry_ascent` (first-order direction, then fixed-point steps) is the chapter's sweep
search; this module measures how far that search falls short.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import activations, device, validation
from . import widenet as wn

__all__ = ["gram_entry_supremum"]


def _frame(x: Tensor, single: Tensor) -> Tensor:
    """Orthonormal basis ``(E, K, m, 2)`` of the two rows of ``x`` ``(E, K, 2, m)`` (second column zero where
    ``single``, ``(K,)``: a diagonal entry)."""
    q1 = x[:, :, 0] / x[:, :, 0].norm(dim=-1, keepdim=True)
    r = x[:, :, 1] - (q1 * x[:, :, 1]).sum(-1, keepdim=True) * q1
    rn = r.norm(dim=-1, keepdim=True)
    q2 = torch.where(single[None, :, None], torch.zeros_like(r), r / torch.where(single[None, :, None], 1.0, rn))
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
    conjugate: bool = False,
    budget: int = 20_000_000,
) -> dict:
    """``max_{i ≤ j} sup_{‖h‖ = D} |G_H,ij(θ0 + h) − G_H,ij(θ0)|`` per member, from below, by a monotone ascent of
    every entry and both signs in the entry's own coordinates (paper C's Gram drift; :ref:`ch-parameter-ball`).

    Each entry and sign starts at its first-order direction (the steepest ascent at ``h = 0``, as
    :func:`companion.widenet.gram_entry_ascent`) and takes up to ``steps`` projected gradient steps on the sphere
    with Armijo backtracking (the step is an angle, doubled after an accepted step, halved until the drift rises);
    an entry stops when its relative stationarity ``D ‖P ∇φ‖ / φ`` (``P`` the projection onto the sphere's tangent
    space) is at most ``tol``. ``random_starts`` further ascents per entry and sign start from directions drawn
    uniformly on the sphere (from ``generator``), to show whether the first-order start misses a higher maximum.
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
    conjugate : bool
        Polak–Ribière conjugate directions (transported by projection onto the tangent space, restarted where not
        an ascent) instead of the projected gradient; same Armijo test, so still monotone. Measured on the
        chapter's draws: the same maxima in 2–3× fewer steps where the drift is far from linear (``D/√m = 1/4``).
    budget : int
        Activation entries per batch: ``max(1, budget // (4 E m H))`` entries are ascended at once.

    Returns
    -------
    dict
        ``"entry"``: ``(E,)``, the largest drift found from the first-order starts; ``"first_order"``: ``(E,)``, the
        largest drift at those starts; ``"random"``: ``(E,)``, the largest drift found from the random starts (zeros
        without them); ``"stationarity"``: ``(E,)``, the relative stationarity of the entry
        that attains ``"entry"``; ``"unconverged"``: ``(E,)``, the number of entries and signs still above ``tol``
        after ``steps`` steps; ``"steps"``: the steps taken by the slowest batch.

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
    n = X.shape[-2]
    X = X.expand(E, n, d) if X.ndim == 2 else X
    params = [p.detach() for p in params]
    rows, cols = torch.triu_indices(n, n)
    chunk = max(1, budget // (4 * E * m * H))
    keys = ("entry", "first_order", "random", "stationarity")
    out = {k: torch.zeros(E, dtype=X.dtype, device=X.device) for k in keys}
    out["unconverged"] = torch.zeros(E, dtype=torch.long, device=X.device)
    taken = 0
    for start in range(0, rows.numel(), chunk):
        ri, ci = rows[start : start + chunk], cols[start : start + chunk]
        Xp = torch.stack([X[:, ri], X[:, ci]], 2)
        single = ri == ci
        g0z = _zeros(params, Xp)
        g0 = _entries(params, Xp, net, g0z, single)
        for sign in (1.0, -1.0):
            best, first, stat, left, k = _ascend(params, Xp, net, g0, single, D, sign, steps, tol, conjugate=conjugate)
            taken = max(taken, k)
            out["first_order"] = torch.maximum(out["first_order"], first.max(1).values)
            top, at = best.max(1)
            better = top > out["entry"]
            out["stationarity"] = torch.where(better, stat.gather(1, at[:, None])[:, 0], out["stationarity"])
            out["entry"] = torch.maximum(out["entry"], top)
            out["unconverged"] += left
            for _ in range(random_starts):
                v0 = [device.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype) for t in g0z]
                found = _ascend(params, Xp, net, g0, single, D, sign, steps, tol, start=v0, conjugate=conjugate)[0]
                out["random"] = torch.maximum(out["random"], found.max(1).values)
    out["steps"] = taken
    return out


def _zeros(params, Xp):
    E, m = params[-1].shape
    K = Xp.shape[1]
    z = torch.zeros(E, K, m, 2, dtype=Xp.dtype, device=Xp.device)
    return [z.clone() for _ in range(wn.depth(params))] + [torch.zeros(E, K, m, dtype=Xp.dtype, device=Xp.device)]


def _ascend(params, Xp, net, g0, single, D, sign, steps, tol, start=None, armijo=1e-4, halvings=40, conjugate=False):
    """One sign's ascent for a batch of entries from the first-order direction (or from ``start``, projected onto
    the frame's columns and the sphere): ``(best, first, stationarity, unconverged (E,), steps taken)``."""
    mask = [torch.stack([torch.ones_like(single), ~single], -1).to(Xp.dtype)[None, :, None, :]] * wn.depth(params)
    mask.append(torch.ones(1, 1, 1, dtype=Xp.dtype, device=Xp.device))

    def value_and_grad(v):
        with torch.enable_grad():
            w = [t.detach().requires_grad_() for t in v]
            phi = sign * (_entries(params, Xp, net, [a * b for a, b in zip(w, mask)], single) - g0)
            grads = torch.autograd.grad(phi.sum(), w)
        return phi.detach(), [gr * b for gr, b in zip(grads, mask)]

    def on_sphere(v):
        norm = _dot(v, v).sqrt()
        return [t * (D / norm).reshape(*norm.shape, *([1] * (t.ndim - 2))) for t in v]

    def value(v):
        with torch.no_grad():
            return sign * (_entries(params, Xp, net, v, single) - g0)

    v = on_sphere([t * b for t, b in zip(start, mask)] if start is not None else value_and_grad(_zeros(params, Xp))[1])
    phi, g = value_and_grad(v)
    first = phi.clone()
    tau = torch.ones_like(phi)  # the step's angle
    k = 0
    tangent = lambda u, at: [a - _bc(_dot(u, at) / D**2, a) * b for a, b in zip(u, at)]
    gt_prev = p_prev = None
    for k in range(1, steps + 1):
        gt = tangent(g, v)  # the tangential gradient
        gn = _dot(gt, gt).sqrt()
        stat = D * gn / phi.abs().clamp_min(torch.finfo(phi.dtype).tiny)
        live = stat > tol
        if not bool(live.any()):
            k -= 1
            break
        p = gt
        if conjugate and p_prev is not None:  # Polak-Ribiere+, previous vectors moved to this tangent space
            old_t = tangent(gt_prev, v)
            beta = (_dot(gt, [a - b for a, b in zip(gt, old_t)]) / _dot(gt_prev, gt_prev).clamp_min(1e-300)).clamp_min(0)
            p = [a + _bc(beta, b) * b for a, b in zip(gt, tangent(p_prev, v))]
            slope = _dot(gt, p)
            p = [torch.where(_bc(slope > 0, a), a, b) for a, b in zip(p, gt)]  # not an ascent: restart
        slope, pn = _dot(gt, p), _dot(p, p).sqrt()
        for _ in range(halvings):
            scale = torch.where(live, tau * D / pn.clamp_min(torch.finfo(phi.dtype).tiny), 0.0)
            cand = on_sphere([a + _bc(scale, b) * b for a, b in zip(v, p)])
            val = value(cand)
            ok = live & (val >= phi + armijo * scale * slope)
            if bool((ok | ~live).all()):
                break
            tau = torch.where(live & ~ok, tau / 2, tau)
        v = [torch.where(_bc(ok, a), c, a) for a, c in zip(v, cand)]
        gt_prev, p_prev = gt, p
        tau = torch.where(ok, (2 * tau).clamp_max(1.0), tau)
        phi, g = value_and_grad(v)
    gv = _dot(g, v) / D**2
    gt = [a - _bc(gv, a) * b for a, b in zip(g, v)]
    stat = D * _dot(gt, gt).sqrt() / phi.abs().clamp_min(torch.finfo(phi.dtype).tiny)
    return phi, first, stat, (stat > tol).sum(1), k


def _bc(c: Tensor, like: Tensor) -> Tensor:
    """``c`` ``(E, K)`` shaped to broadcast against ``like`` ``(E, K, …)``."""
    return c.reshape(*c.shape, *([1] * (like.ndim - 2)))
