"""Every statement of paper A's smoothness chapter as ``log(LHS/RHS)``, from one pass over the network.

:func:`proof_log_ratios` returns, per member, the largest log ratio of each statement of
:data:`companion.smoothness.STATEMENTS` (Lemmas 4.3–4.5, Lemma 4.1, eq. (14), Lemmas A.1–A.6): the values of
:mod:`companion.smoothness`'s lemma-level functions, from one forward and one backward pass per parameter and without
their per-call checks. Every right-hand side comes from one table of monomials ``c · a^i b^j r^k`` (``a = ‖W1‖``,
``b = ‖W2‖``, ``r = ‖W2 − W1‖``), evaluated with one product and one ``logsumexp`` per row; the table holds the same
polynomials as :mod:`companion.smoothness` (the package's tests compare the two).

It is the objective that :mod:`companion.search`'s proof probes maximise, in :ref:`ch-smoothness`.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from . import deepnet
from ._paper_a import check_devices as _check_devices
from ._paper_a import grad_norms as _grad_norms
from .assumptions import check_assumptions
from .smoothness import STATEMENTS, lemma_4_1_rhs, lemma_a6_exponents

__all__ = ["proof_log_ratios"]


# The right-hand sides of every statement as rows of monomials ``c · a^i b^j r^k`` (``a = ‖W1‖``, ``b = ‖W2‖``,
# ``r = ‖W2 − W1‖``), so that the adversarial search evaluates all of them with one product and one logsumexp.
# Keys: a statement, or ``statement:a`` / ``statement:b`` for a one-parameter statement at ``W1`` / ``W2``; each
# value is a list of rows (layers), each row a list of ``(log c, i, j, k)``. Lemma 4.5's loss factor and Lemma
# 4.1 (not a polynomial in the norms) are added by the caller.
def _poly(log_c: float, pairs, on: str = "ab", r_power: int = 0) -> list[tuple[float, int, int, int]]:
    """Monomials ``c · x^p y^q r^k`` from exponent pairs ``(p, q)`` (repeats counted) of the variables ``on``."""
    out = []
    for (p, q), count in sorted(Counter((int(p), int(q)) for p, q in pairs).items()):
        e = {"a": 0, "b": 0}
        e[on[0]] += p
        if len(on) > 1:
            e[on[1]] += q
        out.append((log_c + math.log(count), e["a"], e["b"], r_power))
    return out


def _rhs_rows(L: int, dm: int) -> dict[str, list[list[tuple[float, int, int, int]]]]:
    half = 0.5 * math.log(dm)
    tri = lambda deg: [(j, k) for j in range(deg + 1) for k in range(deg + 1 - j)]  # j + k <= deg
    power = lambda lo, hi: [(i, 0) for i in range(lo, hi + 1)]  # Σ_{i=lo}^{hi} x^i
    rows: dict[str, list] = {
        "4.3": [_poly(half, tri(L - 1), r_power=1)],
        "4.4": [_poly(math.log(4 * dm * L**3), tri(2 * L - 2), r_power=1)],
        "4.5": [_poly(math.log(8 * deepnet.C_J * dm * L**3), tri(2 * L - 2), r_power=1)],
        "A.2": [_poly(half, tri(ell - 1), r_power=1) for ell in range(1, L + 1)],
        "A.6": [_poly(half, lemma_a6_exponents(ell, L), r_power=1) for ell in range(1, L + 1)],
    }
    rows["A.4"] = rows["A.2"]
    for w in "ab":
        rows[f"14:{w}"] = [_poly(half + math.log(L), power(0, L - 1), on=w)]
        rows[f"A.1:{w}"] = [_poly(half, power(1, ell), on=w) for ell in range(1, L + 1)]
        rows[f"A.3:{w}"] = [_poly(half, power(0, ell), on=w) for ell in range(L + 1)]
        rows[f"A.5:{w}"] = [_poly(0.0, [(L - ell, 0)], on=w) for ell in range(1, L + 1)]
    return rows


_RHS_KEYS = {
    "4.3": ("4.3",),
    "4.4": ("4.4",),
    "4.5": ("4.5",),
    "4.1": (),
    "14": ("14:a", "14:b"),
    "A.1": ("A.1:a", "A.1:b"),
    "A.2": ("A.2",),
    "A.3": ("A.3:a", "A.3:b"),
    "A.4": ("A.4",),
    "A.5": ("A.5:a", "A.5:b"),
    "A.6": ("A.6",),
}


@functools.lru_cache(maxsize=64)
def _rhs_table(L: int, dm: int, keys: tuple[str, ...]) -> tuple[Tensor, Tensor, Tensor, list[tuple[str, int, int]]]:
    """The monomials of the rows of ``keys``, flat: ``(exponents (T, 3), log coefficients (T,), one-hot row
    membership (T, R), [(key, first row, rows)])``."""
    table = _rhs_rows(L, dm)
    rows, spans = [], []
    for key in keys:
        spans.append((key, len(rows), len(table[key])))
        rows.extend(table[key])
    flat = [(c, p, q, k, i) for i, row in enumerate(rows) for c, p, q, k in row]
    exps = torch.tensor([m[1:4] for m in flat], dtype=torch.float64)
    logc = torch.tensor([m[0] for m in flat], dtype=torch.float64)
    member = torch.zeros(len(flat), len(rows), dtype=torch.float64)
    member[torch.arange(len(flat)), torch.tensor([m[4] for m in flat], dtype=torch.long)] = 1.0
    return exps, logc, member, spans


def _log_rhs(a: Tensor, b: Tensor, r: Tensor, L: int, dm: int, keys: tuple[str, ...]) -> dict[str, Tensor]:
    """``log`` of the rows of ``keys`` per member, ``{key: (E, rows)}``: every monomial's log from one product,
    each row's ``logsumexp`` shifted by its largest term (``0 · log 0 = 0``, so ``x^0 = 1`` even at ``x = 0``)."""
    exps, logc, member, spans = _rhs_table(L, dm, keys)
    exps, logc, member = exps.to(a), logc.to(a), member.to(a)
    logs = torch.log(torch.stack([a, b, r], -1))  # (E, 3)
    if bool(torch.isfinite(logs).all()):
        terms = logs @ exps.T + logc  # (E, T)
    else:  # a zero norm
        terms = torch.where(exps == 0, torch.zeros_like(exps), exps * logs.unsqueeze(1)).sum(-1) + logc
    row = member.argmax(1).expand_as(terms)
    shift = torch.full((terms.shape[0], member.shape[1]), -math.inf, dtype=terms.dtype, device=terms.device)
    shift = shift.scatter_reduce(1, row, terms.detach(), "amax")  # (E, R), finite: every row has a monomial
    out = shift + torch.log(torch.exp(terms - shift.gather(1, row)) @ member)
    return {key: out[:, i : i + k] for key, i, k in spans}


def proof_log_ratios(params1, params2, X: Tensor, y: Tensor, act, statements: Sequence[str] = STATEMENTS) -> dict[str, Tensor]:
    """``log(LHS/RHS)`` of the statements asked for, per member, largest over inputs and layers (and, for the
    one-parameter statements, over ``W1`` and ``W2``).

    Paper A, Lemmas 4.3–4.5, Lemma 4.1, eq. (14), Lemmas A.1–A.6 (:ref:`ch-smoothness`). The same values as
    :func:`companion.smoothness.lemma_4_3`, :func:`~companion.smoothness.lemma_4_4`,
    :func:`~companion.smoothness.lemma_4_5`, :func:`~companion.smoothness.lemma_4_1`,
    :func:`~companion.smoothness.equation_14` and :func:`~companion.smoothness.appendix_a`, from one forward and one
    backward pass per parameter, every right-hand side from one table of monomials, and without their per-call checks
    (the inner loop of :func:`companion.search.proof_probe`; the arguments are checked once here). Differentiable in
    the parameters, the data and the targets.

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(E, n, d)`` or ``(n, d)`` with ``‖x_i‖ ≤ √d`` (not checked here).
    y
        Targets ``(E, n)`` or ``(n,)``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.
    statements
        A non-empty selection of :data:`companion.smoothness.STATEMENTS` (all by default).

    Returns
    -------
    dict of str to Tensor
        ``{"4.3": (E,), …}`` in the order of ``statements``, each the largest ``log(LHS/RHS)`` (``≤ 0`` where the
        statement holds).

    Raises
    ------
    ValueError
        When ``statements`` is not a non-empty selection of :data:`companion.smoothness.STATEMENTS`.
    """
    _check_devices(params1, params2, X, y)
    sigma = check_assumptions(act)
    statements = tuple(statements)
    unknown = [k for k in statements if k not in STATEMENTS]
    if unknown or not statements:
        raise ValueError(f"statements must be a non-empty selection of {STATEMENTS}, got {statements!r}")
    p1, p2 = list(params1), list(params2)
    L, dm = len(p1), max(deepnet.widths_of(p1))
    a, b = deepnet.norm(p1), deepnet.norm(p2)
    r = deepnet.norm([v - u for u, v in zip(p1, p2)])
    keys = tuple(key for k in statements for key in _RHS_KEYS[k])
    rhs = _log_rhs(a, b, r, L, dm, keys) if keys else {}  # Lemma 4.1 alone has no polynomial right-hand side
    outs = []
    for p in (p1, p2):
        zs, hs = deepnet.forward_all(p, X, sigma)
        outs.append((zs, hs, deepnet.backward_deltas(p, zs, sigma)))
    (z1, h1, d1), (z2, h2, d2) = outs
    f1, f2 = h1[-1][..., 0], h2[-1][..., 0]
    vnorm = lambda vs: torch.stack([v.norm(dim=-1) for v in vs], -1)  # (E, n, K)
    vdiff = lambda us, vs: vnorm([v - u for u, v in zip(us, vs)])
    lr = lambda lhs, log_rhs: (torch.log(lhs + 1e-300) - log_rhs.unsqueeze(1)).flatten(1).amax(1)  # (E, n, K), (E, K)
    per_w = lambda key, v1, v2: torch.maximum(lr(v1, rhs[key + ":a"]), lr(v2, rhs[key + ":b"]))
    out: dict[str, Tensor] = {}
    if {"4.1", "4.4", "4.5", "14"} & set(statements):
        grads = [[dl.unsqueeze(-1) * hl.unsqueeze(-2) for dl, hl in zip(d, h[:-1])] for d, h in ((d1, h1), (d2, h2))]
        gnorm = [_grad_norms(g, 2) for g in grads]  # (E, n) each
        gchange = _grad_norms([v - u for u, v in zip(*grads)], 2)
        n = f1.shape[-1]
        G = [
            [(2.0 / n) * ((f - y).unsqueeze(-1).unsqueeze(-1) * gl).sum(1) for gl in g]
            for f, g in ((f1, grads[0]), (f2, grads[1]))
        ]
        lhs41 = torch.log(_grad_norms([v - u for u, v in zip(*G)], 1) + 1e-300)
        if "4.4" in statements:
            out["4.4"] = lr(gchange.unsqueeze(-1), rhs["4.4"])
        if "4.5" in statements:
            out["4.5"] = lhs41 - rhs["4.5"][:, 0] - torch.log1p(torch.sqrt(((f1 - y) ** 2).mean(-1)))
        if "4.1" in statements:
            out["4.1"] = lhs41 - torch.log(lemma_4_1_rhs((f2 - f1).abs(), gnorm[1], (f1 - y).abs(), gchange))
        if "14" in statements:
            out["14"] = per_w("14", gnorm[0].unsqueeze(-1), gnorm[1].unsqueeze(-1))
    if "4.3" in statements:
        out["4.3"] = lr((f2 - f1).abs().unsqueeze(-1), rhs["4.3"])
    if "A.1" in statements:
        out["A.1"] = per_w("A.1", vnorm(z1), vnorm(z2))
    if "A.2" in statements:
        out["A.2"] = lr(vdiff(z1, z2), rhs["A.2"])
    if "A.3" in statements:
        out["A.3"] = per_w("A.3", vnorm(h1), vnorm(h2))
    if "A.4" in statements:
        out["A.4"] = lr(vdiff(h1[1:], h2[1:]), rhs["A.4"])
    if "A.5" in statements:
        out["A.5"] = per_w("A.5", vnorm(d1), vnorm(d2))
    if "A.6" in statements:
        out["A.6"] = lr(vdiff(d1, d2), rhs["A.6"])
    return {k: out[k] for k in statements}
