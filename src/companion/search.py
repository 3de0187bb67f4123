"""Sampling and adversarial search for the worst cases of paper A's smoothness statements.

* :func:`random_pairs` — random pairs ``(W1, W2)`` with log-uniform ``‖W1‖`` and ``‖W2 − W1‖``, on which
  :mod:`companion.smoothness` and :mod:`companion.descent` evaluate both sides of their lemmas;
* :func:`tightness_probe` — Adam maximising ``log(LHS/RHS)`` of Lemma 4.3, 4.4 or 4.5 over the parameters, the data
  (parametrised inside the ball ``‖x_i‖ < √d``) and the targets, from many random starts at once;
* :func:`proof_probe` / :func:`proof_probes` — the same search for any of
  :data:`companion.smoothness.STATEMENTS` at once (the steps inside the proof of Lemma 4.5 by default), one
  statement and one activation per block of members, with :func:`companion.ratios.proof_log_ratios` as the
  objective.

Every iterate of a search is a valid instance, so the best ratio found is a lower bound on the statement's worst
case (the statement says it is at most 1). Used by :ref:`ch-smoothness` (the probes and random pairs) and
:ref:`ch-descent` (random pairs for Lemma 4.6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from . import deepnet, validation
from .assumptions import blockwise_activation, check_assumptions
from .device import rand, randn
from .ratios import proof_log_ratios
from .smoothness import LEMMAS, PROOF_STEPS, STATEMENTS, lemma_4_3, lemma_4_4, lemma_4_5

__all__ = ["random_pairs", "tightness_probe", "proof_probe", "proof_probes"]


def random_pairs(
    widths: Sequence[int],
    ensemble: int,
    norm_range=(0.1, 20.0),
    diff_range=(1e-3, 10.0),
    *,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> tuple[list[Tensor], list[Tensor]]:
    """``ensemble`` random pairs ``(W1, W2)`` of networks: ``‖W1‖`` log-uniform in ``norm_range`` and ``‖W2 − W1‖``
    log-uniform in ``diff_range``; directions Gaussian with a random log-uniform weight per layer in ``[0.1, 10]``
    (so that both balanced and one-layer-dominated pairs occur).

    The random instances of paper A's Lemmas 4.1 and 4.3–4.5, eq. (14) and Lemmas A.1–A.6 (:ref:`ch-smoothness`) and
    of Lemma 4.6 (:ref:`ch-descent`). Every draw comes from ``generator`` (a CPU generator,
    :func:`companion.device.generator`), so one seed gives the same pairs on every device.

    Parameters
    ----------
    widths
        ``[d_0, …, d_L]``.
    ensemble
        The number of pairs ``E``, a positive integer.
    norm_range, diff_range
        ``(lo, hi)`` with ``0 < lo ≤ hi``: the ranges of ``‖W1‖`` and ``‖W2 − W1‖``.
    generator, device, dtype
        The random stream, and where and in which dtype the tensors live (:func:`companion.device.resolve`).

    Returns
    -------
    tuple of list of Tensor
        ``(params1, params2)``, each a list of ``L`` tensors ``(E, d_ℓ, d_{ℓ−1})``.

    Raises
    ------
    ValueError
        When ``ensemble`` is not a positive int or a range is not ``0 < lo ≤ hi``.
    """
    validation.positive_int("ensemble", ensemble)
    for lo, hi, name in ((*norm_range, "norm_range"), (*diff_range, "diff_range")):
        if not 0 < lo <= hi:
            raise ValueError(f"{name} must satisfy 0 < lo <= hi, got {(lo, hi)}")
    base = deepnet.init_params(widths, ensemble, 1.0, generator=generator, device=device, dtype=dtype)
    dev, dt = base[0].device, base[0].dtype

    def direction():
        raw = deepnet.init_params(widths, ensemble, 1.0, generator=generator, device=dev, dtype=dt)
        logw = rand((len(raw), ensemble), generator=generator, device=dev, dtype=dt) * 2 * math.log(10) - math.log(10)
        raw = [w * torch.exp(lw).view(-1, 1, 1) for w, lw in zip(raw, logw)]
        n = deepnet.norm(raw).view(-1, 1, 1)
        return [w / n for w in raw]

    def log_uniform(lo, hi):
        u = rand((ensemble,), generator=generator, device=dev, dtype=dt)
        return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))).view(-1, 1, 1)

    del base
    a, r = log_uniform(*norm_range), log_uniform(*diff_range)
    d1, d2 = direction(), direction()
    p1 = [a * w for w in d1]
    p2 = [w + r * v for w, v in zip(p1, d2)]
    return p1, p2


def _adversarial_search(widths, act, members, steps, n, lr, objective, generator, device, dtype) -> Tensor:
    """Adam on ``(W1, W2 − W1, x_i inside the ball, y_i)`` maximising ``objective(w1, w2, X, y) -> (members,)``
    (a log ratio) from ``members`` random starts at once; returns the best ratio seen per start."""
    check_assumptions(act)
    validation.positive_int("starts", members)
    validation.positive_int("steps", steps)
    validation.positive_int("n", n)
    p1, p2 = random_pairs(widths, members, (0.3, 5.0), (1e-2, 1.0), generator=generator, device=device, dtype=dtype)
    dev, dt = p1[0].device, p1[0].dtype
    d = widths[0]
    w1 = [w.clone().requires_grad_(True) for w in p1]
    dirs = [(b - a).clone().requires_grad_(True) for a, b in zip(p1, p2)]
    log_r = torch.log(deepnet.norm([b - a for a, b in zip(p1, p2)])).clone().requires_grad_(True)
    v = randn((members, n, d), generator=generator, device=dev, dtype=dt).requires_grad_(True)
    y = randn((members, n), generator=generator, device=dev, dtype=dt).requires_grad_(True)
    opt = torch.optim.Adam([*w1, *dirs, log_r, v, y], lr=lr)
    best = torch.zeros(members, dtype=dt, device=dev)
    for _ in range(steps):
        opt.zero_grad()
        X = math.sqrt(d) * v / torch.sqrt(1 + (v**2).sum(-1, keepdim=True))
        dn = deepnet.norm(dirs).view(-1, 1, 1)
        w2 = [a + torch.exp(log_r).view(-1, 1, 1) * u / dn for a, u in zip(w1, dirs)]
        obj = objective(w1, w2, X, y)
        obj = torch.where(torch.isfinite(obj), obj, torch.full_like(obj, -700.0))
        best = torch.maximum(best, torch.exp(obj.detach()))
        (-obj.sum()).backward()
        for p in opt.param_groups[0]["params"]:  # a member at a non-differentiable point (e.g. a zero norm)
            if p.grad is not None:  # gets no update there; the others are unaffected
                p.grad.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        opt.step()
    return best


def tightness_probe(
    lemma: str,
    widths: Sequence[int],
    act,
    *,
    starts: int = 64,
    steps: int = 300,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> Tensor:
    """Adversarial search for the worst case of Lemma 4.3, 4.4 or 4.5: maximise ``log(LHS/RHS)`` by Adam over
    ``(W1, W2 − W1, data x_i with ‖x_i‖ < √d, targets y_i)`` from ``starts`` random starts at once.

    Paper A, Lemmas 4.3–4.5 (:ref:`ch-smoothness`). Every iterate is a valid instance (the data are parametrised
    inside the ball), so the running maximum of the ratio over iterates is a lower bound on the lemma's worst case.
    Lemmas 4.3/4.4 use the first sample.

    Parameters
    ----------
    lemma
        One of :data:`companion.smoothness.LEMMAS` (``"4.3"``, ``"4.4"``, ``"4.5"``).
    widths
        ``[d_0, …, d_L]``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.
    starts, steps, n, lr
        Random starts, Adam steps, samples per instance and Adam's learning rate.
    generator, device, dtype
        The random stream of the starts, and where and in which dtype the search runs.

    Returns
    -------
    Tensor
        ``(starts,)``, the best ratio ``LHS/RHS`` found per start.

    Raises
    ------
    ValueError
        When ``lemma`` is not one of :data:`companion.smoothness.LEMMAS`.
    """
    if lemma not in LEMMAS:
        raise ValueError(f"lemma must be one of {LEMMAS}, got {lemma!r}")

    def objective(w1, w2, X, y):
        if lemma == "4.3":
            c = lemma_4_3(w1, w2, X[:, :1], act)
            return torch.log(c.lhs[:, 0] + 1e-300) - torch.log(c.rhs)
        if lemma == "4.4":
            c = lemma_4_4(w1, w2, X[:, :1], act)
            return torch.log(c.lhs[:, 0] + 1e-300) - torch.log(c.rhs)
        c = lemma_4_5(w1, w2, X, y, act)
        return torch.log(c.lhs + 1e-300) - torch.log(c.rhs)

    return _adversarial_search(widths, act, starts, steps, n, lr, objective, generator, device, dtype)


def proof_probes(
    widths: Sequence[int],
    acts: Sequence,
    *,
    statements: Sequence[str] = PROOF_STEPS,
    starts: int = 16,
    steps: int = 200,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> dict[str, dict[str, Tensor]]:
    """:func:`proof_probe` for several activations in one ensemble of ``len(acts) · len(statements) · starts``
    members (one Adam run; each member keeps its own activation, :func:`companion.assumptions.blockwise_activation`,
    and its own statement).

    Paper A, Lemmas 4.1, 4.3–4.5, eq. (14), Lemmas A.1–A.6 (:ref:`ch-smoothness`).

    Parameters
    ----------
    widths
        ``[d_0, …, d_L]``.
    acts
        Distinct smooth activations satisfying Assumptions 3.1 and 3.3.
    statements
        A non-empty selection of :data:`companion.smoothness.STATEMENTS` (default
        :data:`companion.smoothness.PROOF_STEPS`).
    starts, steps, n, lr
        Random starts per activation and statement, Adam steps, samples per instance and Adam's learning rate.
    generator, device, dtype
        The random stream of the starts, and where and in which dtype the search runs.

    Returns
    -------
    dict of str to dict of str to Tensor
        ``{activation name: {statement: (starts,)}}``, the best ratio ``LHS/RHS`` seen per start.

    Raises
    ------
    ValueError
        When ``starts`` is not a positive int or ``statements`` is not a non-empty selection of
        :data:`companion.smoothness.STATEMENTS`.
    """
    validation.positive_int("starts", starts)
    statements = tuple(statements)
    unknown = [k for k in statements if k not in STATEMENTS]
    if unknown or not statements:
        raise ValueError(f"statements must be a non-empty selection of {STATEMENTS}, got {statements!r}")
    sigmas = [check_assumptions(act) for act in acts]
    block = len(statements) * starts
    sigma = blockwise_activation(sigmas, block)

    def objective(w1, w2, X, y):
        ratios = proof_log_ratios(w1, w2, X, y, sigma, statements)
        table = torch.stack([ratios[k] for k in statements])  # (K, E)
        E = table.shape[1]
        which = (torch.arange(E, device=table.device) % block) // starts
        return table.gather(0, which.unsqueeze(0)).squeeze(0)

    best = _adversarial_search(widths, sigma, len(sigmas) * block, steps, n, lr, objective, generator, device, dtype)
    return {
        sg.name: {k: best[i * block + j * starts : i * block + (j + 1) * starts] for j, k in enumerate(statements)}
        for i, sg in enumerate(sigmas)
    }


def proof_probe(
    widths: Sequence[int],
    act,
    *,
    statements: Sequence[str] = PROOF_STEPS,
    starts: int = 16,
    steps: int = 200,
    n: int = 2,
    lr: float = 0.05,
    generator: torch.Generator | None = None,
    device=None,
    dtype=None,
) -> dict[str, Tensor]:
    """Adversarial search for the worst case of several statements at once (by default Lemma 4.1, eq. (14) and
    Lemmas A.1–A.6, the steps inside the proof of Lemma 4.5; any of :data:`companion.smoothness.STATEMENTS`, Lemmas
    4.3–4.5 included): ``starts`` members per statement in one ensemble of ``len(statements) · starts``, each member
    maximising the log ratio of its own statement (largest over inputs and layers,
    :func:`companion.ratios.proof_log_ratios`) by Adam over ``(W1, W2 − W1, x_i with ‖x_i‖ < √d, y_i)``, as
    :func:`tightness_probe` does.

    Paper A, Lemmas 4.1, 4.3–4.5, eq. (14), Lemmas A.1–A.6 (:ref:`ch-smoothness`).

    Parameters
    ----------
    widths
        ``[d_0, …, d_L]``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.
    statements
        A non-empty selection of :data:`companion.smoothness.STATEMENTS`.
    starts, steps, n, lr
        Random starts per statement, Adam steps, samples per instance and Adam's learning rate.
    generator, device, dtype
        The random stream of the starts, and where and in which dtype the search runs.

    Returns
    -------
    dict of str to Tensor
        ``{statement: (starts,)}``: the best ratio ``LHS/RHS`` seen per start (a lower bound on the statement's worst
        case; the statement says it is at most 1).
    """
    sigma = check_assumptions(act)
    kw = dict(statements=statements, starts=starts, steps=steps, n=n, lr=lr, generator=generator, device=device, dtype=dtype)
    return proof_probes(widths, [sigma], **kw)[sigma.name]
