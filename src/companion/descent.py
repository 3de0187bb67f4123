"""Paper A's descent lemma and adaptive step: Lemma 4.6 (its constant ``C``) and Lemma 4.7 (``ρ``, ``η_t``, the
step rule).

* Lemma 4.6, ``𝓛(W2) ≤ 𝓛(W1) + ⟨∇𝓛(W1), W2 − W1⟩ + remainder``: :func:`lemma_4_6_C`,
  :func:`log_lemma_4_6_remainder`, :func:`lemma_4_6_rhs`, and both sides on actual networks, :func:`lemma_4_6`.
* Lemma 4.7's step ``η_t = 1/(ρ (1 + 𝓛(W_t)^{1/2}) Σ_{i ≤ 2L−2} ‖W_t‖^i)``: :func:`rho`, :func:`eta`, and as a
  :data:`companion.gd.StepRule` (optionally rescaled by ``κ`` per member), :func:`adaptive_step`, or :class:`Tracker`,
  which also keeps what Theorem 4.8's proof tracks (:func:`observers` records it through the engine).
* :func:`make_loss_and_grad`, the engine's closure for paper A's network on the lemmas' domain.
* :func:`exact_excess`, Lemma 4.7's one-step excess at a float64 point recomputed in ball arithmetic, for the
  steps whose excess float64 cannot resolve; :func:`rounding_band`, the relative band inside which the working
  precision cannot resolve it (the tracker's ``tol``).

Norms and losses are tensors with a leading ensemble axis ``(E,)``; polynomials are evaluated in log space by
:mod:`companion.polysum`. Used by :ref:`ch-descent` (Lemmas 4.6–4.7) and :ref:`ch-rate` (Theorem 4.8 runs with the
step; its constants are :mod:`companion.rate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from . import activations, deepnet, device, gd, validation
from ._paper_a import check_cJ as _check_cJ
from ._paper_a import check_devices as _check_devices
from ._paper_a import check_dmax as _check_dmax
from ._paper_a import check_L as _check_L
from ._paper_a import norm as _norm
from ._paper_a import pair as _pair
from ._paper_a import same_device_norms as _same_device_norms
from .assumptions import check_assumptions
from .polysum import log_power_sum
from .smoothness import Comparison

__all__ = [
    "lemma_4_6_C",
    "log_lemma_4_6_remainder",
    "lemma_4_6_rhs",
    "lemma_4_6",
    "rho",
    "eta",
    "adaptive_step",
    "make_loss_and_grad",
    "observers",
    "Tracker",
    "exact_excess",
    "one_step_excess",
    "rounding_band",
]


# ---------------------------------------------------------------------------------- Lemma 4.6: descent
def lemma_4_6_C(L: int, d_max: int, c_J: float = deepnet.C_J) -> float:
    """Lemma 4.6's constant ``C = 2^{2L+2} c_J d_max L⁴``.

    Paper A, Lemma 4.6 (:ref:`ch-descent`).

    Parameters
    ----------
    L
        The depth, ``≥ 2``.
    d_max
        The largest width ``max{d_0, …, d_L}``.
    c_J
        The loss constant of Assumption 3.4 (``2`` for the squared loss).

    Returns
    -------
    float
        ``C``.
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    return 2.0 ** (2 * L + 2) * c_J * d_max * L**4


def log_lemma_4_6_remainder(norm_w1, norm_diff, loss_w1, L: int, d_max: int, c_J: float = deepnet.C_J) -> Tensor:
    """log of Lemma 4.6's higher-order term
    ``C (1 + 𝓛(W1)^{1/2}) (Σ_{i=0}^{2L−2} ‖W1‖^i) Σ_{k=0}^{2L−2} ‖W2−W1‖^{k+2}/(k+2)``.

    Paper A, Lemma 4.6, the descent lemma (:ref:`ch-descent`).

    Parameters
    ----------
    norm_w1, norm_diff, loss_w1
        ``‖W1‖``, ``‖W2 − W1‖`` and ``𝓛(W1)``, ``(E,)``.
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.

    Returns
    -------
    Tensor
        ``(E,)``, the logarithm of the term.
    """
    C = lemma_4_6_C(L, d_max, c_J)
    norm_w1, norm_diff, loss = _same_device_norms(norm_w1=norm_w1, norm_diff=norm_diff, loss_w1=loss_w1).values()
    weights = [1.0 / (k + 2) for k in range(2 * L - 1)]
    return (
        math.log(C)
        + torch.log1p(torch.sqrt(loss))
        + log_power_sum(norm_w1, 2 * L - 2)
        + log_power_sum(norm_diff, 2 * L - 2, offset=2, weights=weights)
    )


def lemma_4_6_rhs(inner, norm_w1, norm_diff, loss_w1, L: int, d_max: int, c_J: float = deepnet.C_J) -> Tensor:
    """Lemma 4.6's right-hand side ``⟨∇𝓛(W1), W2−W1⟩ + remainder``: ``𝓛(W2) − 𝓛(W1) ≤`` this.

    Paper A, Lemma 4.6 (:ref:`ch-descent`).

    Parameters
    ----------
    inner
        ``⟨∇𝓛(W1), W2 − W1⟩`` per member, ``(E,)``.
    norm_w1, norm_diff, loss_w1
        ``‖W1‖``, ``‖W2 − W1‖`` and ``𝓛(W1)``, ``(E,)``.
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.

    Returns
    -------
    Tensor
        ``(E,)``, the bound.

    Raises
    ------
    ValueError
        When ``inner`` is not a finite floating tensor.
    """
    inner = validation.tensor("inner", torch.as_tensor(inner, dtype=torch.float64) if not isinstance(inner, Tensor) else inner)
    return inner + torch.exp(log_lemma_4_6_remainder(norm_w1, norm_diff, loss_w1, L, d_max, c_J))


def lemma_4_6(params1, params2, X: Tensor, y: Tensor, act) -> Comparison:
    """Lemma 4.6 in its equivalent remainder form: ``lhs = 𝓛(W2) − 𝓛(W1) − ⟨∇𝓛(W1), W2−W1⟩`` (the Taylor
    remainder, may be negative) and ``rhs`` = the lemma's polynomial term (:func:`log_lemma_4_6_remainder`); the
    lemma says ``lhs ≤ rhs`` (so ``ratio ≤ 1``). Raises ``ValueError`` for a non-smooth σ or data outside
    ``‖x‖ ≤ √d``.

    Paper A, Lemma 4.6 (:ref:`ch-descent`).

    Parameters
    ----------
    params1, params2
        ``W1`` and ``W2``, lists of ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})`` of the same shapes.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3.

    Returns
    -------
    Comparison
        ``lhs`` ``(E,)``, ``rhs`` ``(E,)``.
    """
    _check_devices(params1, params2, X, y)
    check_assumptions(act, X)
    p1, p2, a, b, r, diff = _pair(params1, params2)
    l1, g1 = deepnet.loss_and_gradient(p1, X, y, act)
    l2 = deepnet.loss(p2, X, y, act)
    inner = sum((g * d).flatten(1).sum(-1) for g, d in zip(g1, diff))
    return Comparison(l2 - l1 - inner, torch.exp(log_lemma_4_6_remainder(a, r, l1, len(p1), deepnet.d_max(p1))))


# ---------------------------------------------------------------------------------- Lemma 4.7: the step
def rho(L: int, d_max: int, c_J: float = deepnet.C_J) -> float:
    """Lemma 4.7's constant ``ρ = 2^{2L+3} c_J d_max^{3/2} L⁵ = 2 d_max^{1/2} L C``.

    Paper A, Lemma 4.7 (:ref:`ch-descent`).

    Parameters
    ----------
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.

    Returns
    -------
    float
        ``ρ``.
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    return 2.0 ** (2 * L + 3) * c_J * d_max**1.5 * L**5


def eta(norm_w, loss, L: int, d_max: int, c_J: float = deepnet.C_J, kappa=1.0) -> Tensor:
    """Lemma 4.7's step ``η_t = κ / (ρ (1 + 𝓛(W_t)^{1/2}) Σ_{i=0}^{2L−2} ‖W_t‖^i)`` (``κ = 1``: the paper's).

    Paper A, Lemma 4.7 (:ref:`ch-descent`).

    Parameters
    ----------
    norm_w, loss
        ``‖W_t‖`` and ``𝓛(W_t)``, ``(E,)``.
    L, d_max, c_J
        The depth (``≥ 2``), the largest width and the loss constant.
    kappa
        A positive factor, a float or ``(E,)``.

    Returns
    -------
    Tensor
        ``(E,)``, the step.

    Raises
    ------
    ValueError
        When ``kappa`` is not positive and finite.
    """
    loss = _norm("loss", loss)
    log_den = math.log(rho(L, d_max, c_J)) + torch.log1p(torch.sqrt(loss)) + log_power_sum(norm_w, 2 * L - 2)
    k = torch.as_tensor(kappa, dtype=log_den.dtype, device=log_den.device)
    if bool((k <= 0).any()) or not bool(torch.isfinite(k).all()):
        raise ValueError(f"kappa must be positive and finite, got {kappa!r}")
    return k * torch.exp(-log_den)


def adaptive_step(L: int, d_max: int, kappa: float | Tensor = 1.0, c_J: float = deepnet.C_J) -> gd.StepRule:
    """Lemma 4.7's step as a :data:`companion.gd.StepRule`: each member takes ``κ·η_t``, computed from its own
    ``‖W_t‖`` (all parameter tensors together) and ``𝓛(W_t)``; a member with a non-finite loss gets a NaN step (the
    engine flags and freezes it).

    Paper A, Lemma 4.7 (:ref:`ch-descent`; :ref:`ch-rate` runs Theorem 4.8 with it).

    Parameters
    ----------
    L
        The depth, ``≥ 2``.
    d_max
        The largest width.
    kappa
        A positive factor, a float or ``(E,)`` per member.
    c_J
        The loss constant of Assumption 3.4.

    Returns
    -------
    StepRule
        ``(params, loss (E,), grads, t) -> (E,)``, restrictable to a subset of the members (``rule.restrict``).

    Raises
    ------
    ValueError
        When ``kappa`` is not positive (a per-member ``kappa`` must be a finite 1-d tensor).
    """
    L, d_max, c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
    if isinstance(kappa, Tensor):
        validation.tensor("kappa", kappa, ndim=1)
    if bool((torch.as_tensor(kappa) <= 0).any()):
        raise ValueError(f"kappa must be positive, got {kappa!r}")

    def rule(params, loss, grads, t):
        # a non-finite loss (diverged member) gets a NaN step; the engine flags and freezes it
        safe = torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss)).clamp_min(0)
        out = eta(gd.param_norm(params, loss, grads), safe, L, d_max, c_J, kappa.to(loss) if isinstance(kappa, Tensor) else kappa)
        return torch.where(torch.isfinite(loss), out, torch.full_like(out, float("nan")))

    rule.description = f"Lemma 4.7 eta_t (L={L}, d_max={d_max}, kappa={'per-member' if isinstance(kappa, Tensor) else kappa})"  # type: ignore[attr-defined]
    # the rule of a subset of the members, for gd.run's stop rule (a per-member kappa is sliced)
    rule.restrict = (  # type: ignore[attr-defined]
        (lambda members: adaptive_step(L, d_max, kappa[members.to(kappa.device)], c_J))
        if isinstance(kappa, Tensor)
        else (lambda members: rule)
    )
    return rule


# ------------------------------------------------------------------------ fast paths for long GD runs
def make_loss_and_grad(params_like: Sequence[Tensor], X: Tensor, y: Tensor, act):
    """``loss_and_grad`` for :func:`companion.gd.run` on paper A's network, validated once here and then lean (no
    per-call checks: the long runs of :ref:`ch-rate` are Python-overhead bound). Same values as
    :func:`companion.deepnet.loss_and_gradient` (Lemma 4.2's recursion). Raises ``ValueError`` where the lemmas do not
    apply (non-smooth σ, data outside ``‖x‖ ≤ √d``).

    Paper A, Lemma 4.2 (:ref:`ch-descent`, :ref:`ch-rate`).

    Parameters
    ----------
    params_like
        Parameters of the shapes to train, a list of ``L`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    X
        Inputs ``(n, d)`` or ``(E, n, d)`` with ``‖x_i‖ ≤ √d``.
    y
        Targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation satisfying Assumptions 3.1 and 3.3 (or :func:`companion.assumptions.blockwise_activation`).

    Returns
    -------
    callable
        ``params -> (loss (E,), grads)``, ``grads`` matching ``params``, as :func:`companion.deepnet.make_loss_and_grad`.
    """
    check_assumptions(act, X)
    return deepnet.make_loss_and_grad(X, y, act, params_like=params_like)


def observers() -> dict:
    """What Theorem 4.8's proof tracks, as :func:`companion.gd.run` observers: ``grad_norm_sq`` (``‖∇𝓛‖²``) and
    ``param_norm`` (``‖W_t‖``); the engine itself records ``loss`` (𝓛) and ``eta`` (``η_t``).

    Paper A, Theorem 4.8 (:ref:`ch-rate`).

    Returns
    -------
    dict
        ``{"grad_norm_sq": f, "param_norm": f}``, each ``f(params, loss, grads) -> (E,)``.
    """
    return {"grad_norm_sq": gd.grad_norm_sq, "param_norm": gd.param_norm}


class Tracker:
    """Lemma 4.7's step ``κ·η_t`` as a :data:`companion.gd.StepRule` that also keeps, per member and at every
    step, what Theorem 4.8's proof tracks (without recording every step).

    Paper A, Lemma 4.7 and Theorem 4.8 (:ref:`ch-descent`, :ref:`ch-rate`). The running quantities, each ``(E,)``:

    * ``min_g2`` — ``min_{s ≤ t} ‖∇𝓛(W_s)‖²``; ``sum_eta`` — ``Σ_{s ≤ t} η_s``; ``sum_eta_g2`` — ``Σ_{s ≤ t} η_s ‖∇𝓛(W_s)‖²``;
    * ``sum_eta_root_g`` — ``Σ_{s ≤ t} η_s^{1/N} ‖∇𝓛(W_s)‖`` with ``N = 2L − 2``, the sum of eq. (21);
    * ``worst_excess`` — ``max_s [𝓛(W_{s+1}) − 𝓛(W_s) + (η_s/2L)‖∇𝓛(W_s)‖²]``, the largest violation of Lemma 4.7's
      one-step descent (``≤ 0`` where it holds), and ``violations`` — how many steps exceed the float64 rounding
      band ``tol·𝓛(W_s)``; ``ambiguous`` — steps whose two sides differ by less than that band.

    ``η_s`` is the step actually taken (``κ`` times the paper's). Use :meth:`observers` with ``gd.run`` (values at
    recorded iteration ``t`` include step ``t``).

    Parameters
    ----------
    L
        The depth, ``≥ 2``.
    d_max
        The largest width.
    kappa
        A positive factor, a float or ``(E,)`` per member.
    c_J
        The loss constant of Assumption 3.4.
    tol
        The relative rounding band of the descent check.

    Notes
    -----
    Calling the tracker, ``tracker(params, loss (E,), grads, t)``, returns the step ``(E,)``; ``t = 0`` starts the
    running quantities afresh. It depends on ``t`` only through ``t == 0`` and makes no host conversion, so
    ``gd.run(..., compile=True)`` may compile it into its loop (``compilable``), where the running quantities travel
    as :meth:`loop_carry`'s columns through :meth:`loop_step`, the same formulas as a call.
    """

    compilable = True  # gd.run(compile=True): t matters only as t == 0, no host conversion

    def __init__(self, L: int, d_max: int, kappa: float | Tensor = 1.0, c_J: float = deepnet.C_J, tol: float = 1e-13):
        self.L, self.d_max, self.c_J = _check_L(L), _check_dmax(d_max), _check_cJ(c_J)
        k = torch.as_tensor(kappa, dtype=torch.float64)
        if k.ndim > 1 or bool((k <= 0).any()) or not bool(torch.isfinite(k).all()):
            raise ValueError(f"kappa must be a positive float or a 1-D tensor of them, got {kappa!r}")
        self.kappa, self.tol = kappa, float(tol)
        self.log_rho = math.log(rho(L, d_max, c_J))
        self._state: dict[str, Tensor] | None = None
        self._powers: Tensor | None = None
        self.description = f"Lemma 4.7 eta_t x kappa (L={L}, d_max={d_max})"

    def __call__(self, params, loss, grads, t):
        eta_t, g2 = self._step(params, loss, grads)
        s = self._state
        if s is None or t == 0:
            inf = torch.full_like(loss, float("inf"))
            s = self._state = {
                "min_g2": inf,
                "sum_eta": torch.zeros_like(loss),
                "sum_eta_g2": torch.zeros_like(loss),
                "sum_eta_root_g": torch.zeros_like(loss),
                "worst_excess": torch.full_like(loss, -float("inf")),
                "violations": torch.zeros_like(loss),
                "ambiguous": torch.zeros_like(loss),
                "loss0": loss.clone(),
            }
        else:
            s.update(self._checked(s, loss))
        s.update(self._advanced(s, loss, eta_t, g2))
        return eta_t

    def _step(self, params, loss: Tensor, grads) -> tuple[Tensor, Tensor]:
        """``(κ η_t, ‖∇𝓛‖²)`` at the current point, each ``(E,)``."""
        E = loss.shape[0]
        flat_g = torch.cat([g.reshape(E, -1) for g in grads], 1)
        g2 = torch.linalg.vecdot(flat_g, flat_g)
        flat_w = torch.cat([w.reshape(E, -1) for w in params], 1)
        a = torch.linalg.vector_norm(flat_w, dim=1)
        if self._powers is None or self._powers.device != a.device or self._powers.dtype != a.dtype:
            self._powers = torch.arange(2 * self.L - 1, device=a.device, dtype=a.dtype)
            k = self.kappa.to(a) if isinstance(self.kappa, Tensor) else torch.as_tensor(self.kappa).to(a)
            self._scale = k * math.exp(-self.log_rho)  # κ/ρ per member
        total = torch.pow(a.unsqueeze(1), self._powers).sum(1)  # Σ_{i=0}^{2L-2} ‖W‖^i
        return self._scale / ((1 + torch.sqrt(loss.clamp_min(0))) * total), g2

    def _advanced(self, s: dict, loss: Tensor, eta_t: Tensor, g2: Tensor) -> dict:
        """The running sums and minimum after the step ``eta_t`` from the point with ``loss`` and ``g2`` (new tensors)."""
        return {
            "min_g2": torch.minimum(s["min_g2"], g2),
            "sum_eta": s["sum_eta"] + eta_t,
            "sum_eta_g2": s["sum_eta_g2"] + eta_t * g2,
            "sum_eta_root_g": s["sum_eta_root_g"] + eta_t ** (1.0 / (2 * self.L - 2)) * torch.sqrt(g2),
            "prev_loss": loss,
            "prev_eta": eta_t,
            "prev_g2": g2,
        }

    def _checked(self, s: dict, loss: Tensor) -> dict:
        """Lemma 4.7's inequality for the step from the previous state to the one with loss ``loss``: the worst
        excess and the two counts after it (new tensors)."""
        excess = torch.addcmul(loss - s["prev_loss"], s["prev_eta"], s["prev_g2"], value=1.0 / (2 * self.L))
        excess = excess.nan_to_num(nan=-math.inf, posinf=-math.inf)  # a non-finite step counts as neither (the engine flags it)
        band = self.tol * s["prev_loss"]
        return {
            "worst_excess": torch.maximum(s["worst_excess"], excess),
            "violations": s["violations"] + (excess > band),
            "ambiguous": s["ambiguous"] + (excess.abs() <= band),
        }

    def _check_step(self, loss: Tensor) -> None:
        self._state.update(self._checked(self._state, loss))

    # ------------------------------------------------------------------ the same step as a pure function (gd.run(compile=True))
    _CARRY = ("min_g2", "sum_eta", "sum_eta_g2", "sum_eta_root_g", "worst_excess", "violations", "ambiguous")
    _PREV = ("prev_loss", "prev_eta", "prev_g2")

    def loop_carry(self) -> Tensor:
        """The running state as columns ``(E, 10)`` (the seven quantities above, then the previous loss, step and
        ``‖∇𝓛‖²``): what :func:`companion.gd.run` carries through its compiled loop (``compile=True``).
        Paper A, Lemma 4.7 and Theorem 4.8 (:ref:`ch-rate`).

        Returns
        -------
        Tensor, (E, 10)
            The columns, in the order above.

        Raises
        ------
        ValueError
            Before the tracker's first call.
        """
        if self._state is None:
            raise ValueError("the tracker has not been run yet")
        return torch.stack([self._state[k] for k in self._CARRY + self._PREV], 1)

    def loop_step(self, params, loss: Tensor, grads, carry: Tensor) -> tuple[Tensor, Tensor]:
        """A call of the tracker at ``t > 0`` as a pure function of :meth:`loop_carry`'s columns (nothing is
        written; the same formulas). Paper A, Lemma 4.7 and Theorem 4.8 (:ref:`ch-rate`).

        Parameters
        ----------
        params : list of Tensor, each (E, d_ℓ, d_{ℓ−1})
            The weights at the current point.
        loss : Tensor, (E,)
            The loss there.
        grads : list of Tensor
            Its gradient, shaped like ``params``.
        carry : Tensor, (E, 10)
            The running state after the previous step (:meth:`loop_carry`'s columns).

        Returns
        -------
        eta : Tensor, (E,)
            The step ``κ η_t``.
        carry : Tensor, (E, 10)
            The running state after this step.
        """
        s = dict(zip(self._CARRY + self._PREV, carry.unbind(1)))
        eta_t, g2 = self._step(params, loss, grads)
        s.update(self._checked(s, loss))
        s.update(self._advanced(s, loss, eta_t, g2))
        return eta_t, torch.stack([s[k] for k in self._CARRY + self._PREV], 1)

    def loop_load(self, carry: Tensor, loss: Tensor) -> None:
        """Write :meth:`loop_carry`'s columns back into the running state. Paper A, Theorem 4.8 (:ref:`ch-rate`).

        Parameters
        ----------
        carry : Tensor, (E, 10)
            The running state, as :meth:`loop_step` returns it.
        loss : Tensor, (E,)
            The values of its ``prev_loss`` column: the tensor the engine records and the observers see next.
        """
        self._state.update(dict(zip(self._CARRY + self._PREV, carry.unbind(1))))
        self._state["prev_loss"] = loss

    def _sync(self, loss: Tensor) -> None:
        # gd.run calls the rule, then the observers, with the same loss tensor at t < steps; at t = steps the rule
        # is not called, so a loss the tracker has not seen is the final state: check the last step once.
        s = self._state
        if s is not None and loss is not s["prev_loss"] and loss is not s.get("final_loss"):
            self._check_step(loss)
            s["final_loss"] = loss

    def observers(self) -> dict:
        """Observers for ``gd.run``: :func:`observers` (``grad_norm_sq``, ``param_norm``) and the running quantities
        above. Record the final iteration (``gd.log_spaced`` does) so that the last step's descent is checked too.

        Paper A, Lemma 4.7 and Theorem 4.8 (:ref:`ch-descent`, :ref:`ch-rate`).

        Returns
        -------
        dict
            ``name -> f(params, loss, grads) -> (E,)`` for ``grad_norm_sq``, ``param_norm``, ``min_g2``, ``sum_eta``,
            ``sum_eta_g2``, ``sum_eta_root_g``, ``worst_excess``, ``violations`` and ``ambiguous``.
        """

        def running(key):
            def obs(params, loss, grads):
                self._sync(loss)
                return self._state[key].clone()

            return obs

        return {
            **observers(),
            **{k: running(k) for k in self._CARRY},
        }

    @property
    def state(self) -> dict[str, Tensor]:
        """The running quantities after the last step, each ``(E,)`` (``ValueError`` before the first step)."""
        if self._state is None:
            raise ValueError("the tracker has not been run yet")
        return self._state


# ------------------------------------------------------------- Lemma 4.7 decided in ball arithmetic
def exact_excess(
    params: Sequence[Tensor],
    X: Tensor,
    y: Tensor,
    act,
    *,
    kappa: float | Tensor = 1.0,
    d_max: int | None = None,
    c_J: float = deepnet.C_J,
    prec: int = 256,
) -> tuple[Tensor, Tensor]:
    """Lemma 4.7's one-step excess at ``W_t``, enclosed in ball arithmetic.

    Paper A, Lemma 4.7 (:ref:`ch-descent`). From the float64 point ``W_t`` (exact in binary), at ``prec`` bits
    (python-flint balls, every operation enclosing the exact result): ``𝓛(W_t)``, ``∇𝓛(W_t)`` by Lemma 4.2's
    recursion, the step ``η_t = κ/(ρ (1 + 𝓛(W_t)^{1/2}) Σ_{i=0}^{2L−2} ‖W_t‖^i)`` of eq. (12), the exact step
    ``W_t − η_t ∇𝓛(W_t)`` and the excess ``𝓛(W_t − η_t∇𝓛) − 𝓛(W_t) + (η_t/2L)‖∇𝓛(W_t)‖²``, which the lemma says
    is ``≤ 0``. A step whose float64 excess lies inside the rounding band is decided here: its enclosure lies
    below 0 (descent) or above it (a violation); it stays undecided only if the enclosure contains 0.

    Parameters
    ----------
    params
        ``W_t``: ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    X, y
        Inputs ``(n, d)`` or ``(E, n, d)`` and targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation, or a sequence of ``E`` of them (one per member).
    kappa
        The step's factor, a float or ``(E,)`` (``1``: the paper's step).
    d_max
        The ``d_max`` of ``ρ`` (default: the network's).
    c_J
        The loss constant (``2`` for the squared loss).
    prec
        Working precision in bits.

    Returns
    -------
    tuple of Tensor
        ``(low, high)``, each ``(E,)`` float64 (rounded outward): the excess lies in ``[low, high]``.

    Raises
    ------
    ValueError
        For a non-smooth activation, mismatched shapes, or ``prec < 53``.

    Examples
    --------
    >>> from companion import deepnet, device
    >>> g = device.generator(0)
    >>> W = deepnet.init_params([3, 4, 1], 2, generator=g, device="cpu")
    >>> X = deepnet.ball_data(8, 3, generator=g, device="cpu")
    >>> low, high = exact_excess(W, X, X[:, 0], "tanh")
    >>> bool((high < 0).all())   # the paper's step descends, decided
    True
    """
    from flint import arb

    deepnet._check_prec(prec)
    params = [w.detach().to("cpu", torch.float64) for w in params]
    L, E = _check_L(len(params)), params[0].shape[0]
    d_max = deepnet.d_max(params) if d_max is None else _check_dmax(d_max)
    acts = list(act) if isinstance(act, (list, tuple)) else [act] * E
    if len(acts) != E:
        raise ValueError(f"act: one activation per member expected ({E}), got {len(acts)}")
    X, y = deepnet._float64_data(X, y, E)
    if X.shape[0] != E or y.shape[:2] != X.shape[:2]:
        raise ValueError(f"X {tuple(X.shape)} and y {tuple(y.shape)} do not match {E} members")
    kappas = torch.as_tensor(kappa, dtype=torch.float64).expand(E).tolist()
    low, high = torch.empty(E, dtype=torch.float64), torch.empty(E, dtype=torch.float64)
    with deepnet._arb_precision(prec):
        rho_ball = arb(2) ** (2 * L + 3) * arb(float(c_J)) * arb(d_max) * arb(d_max).sqrt() * arb(L) ** 5
        for e in range(E):
            sigma, sigma_prime = activations.ball_functions(acts[e])
            weights, H0, targets = deepnet._arb_member(params, X, y, e)
            loss, grads = deepnet._arb_loss_and_gradient(weights, H0, targets, sigma, sigma_prime)
            norm = sum((v * v for W in weights for v in W.entries()), arb(0)).sqrt()
            g2 = sum((v * v for G in grads for v in G.entries()), arb(0))
            powers = sum((norm**i for i in range(2 * L - 1)), arb(0))
            eta_t = arb(float(kappas[e])) / (rho_ball * (1 + loss.sqrt()) * powers)
            stepped = [W - G * eta_t for W, G in zip(weights, grads)]
            loss_next, _ = deepnet._arb_loss_and_gradient(stepped, H0, targets, sigma, sigma_prime, gradient=False)
            excess = loss_next - loss + eta_t * g2 / (2 * L)
            low[e], high[e] = deepnet._float_down(excess.lower()), deepnet._float_up(excess.upper())
    return low, high


def one_step_excess(
    params: Sequence[Tensor],
    X: Tensor,
    y: Tensor,
    act,
    *,
    kappa: float | Tensor = 1.0,
    d_max: int | None = None,
    c_J: float = deepnet.C_J,
) -> tuple[Tensor, Tensor]:
    """Lemma 4.7's one-step excess at ``W_t`` in the working precision, as :class:`Tracker` computes it.

    Paper A, Lemma 4.7 (:ref:`ch-descent`): ``𝓛(W_t − η_t∇𝓛(W_t)) − 𝓛(W_t) + (η_t/2L)‖∇𝓛(W_t)‖²`` with the step
    ``κ η_t`` of eq. (12); :func:`exact_excess` is the same quantity in ball arithmetic.

    Parameters
    ----------
    params
        ``W_t``: ``L ≥ 2`` tensors ``(E, d_ℓ, d_{ℓ−1})``.
    X, y
        Inputs ``(n, d)`` or ``(E, n, d)`` and targets ``(n,)`` or ``(E, n)``.
    act
        A smooth activation (or :func:`companion.assumptions.blockwise_activation`).
    kappa, d_max, c_J
        As in :func:`exact_excess`.

    Returns
    -------
    tuple of Tensor
        ``(excess, loss)``, each ``(E,)``: the excess and ``𝓛(W_t)`` (the rounding band is ``tol · loss``).
    """
    L = _check_L(len(params))
    d_max = deepnet.d_max(params) if d_max is None else _check_dmax(d_max)
    loss, grads = deepnet.loss_and_gradient(params, X, y, act)
    step = eta(deepnet.norm(params), loss, L, d_max, c_J, kappa)
    stepped = [w - step.view(-1, *([1] * (w.ndim - 1))) * g for w, g in zip(params, grads)]
    g2 = sum(g.flatten(1).pow(2).sum(1) for g in grads)
    return deepnet.loss(stepped, X, y, act) - loss + step * g2 / (2 * L), loss


def rounding_band(rules: Sequence, n: int, dtype: torch.dtype | None = None) -> float:
    """The relative rounding band ``band_factor · n · ε`` of Lemma 4.7's one-step descent check.

    Paper A, Lemma 4.7 (:ref:`ch-descent`, :ref:`ch-rate`). The loss is a mean of ``n`` squares, so two evaluations
    of it in the working precision (machine epsilon ``ε``, ``2^-52`` in float64) can differ by about
    ``2 n ε 𝓛(W_t)`` through rounding alone: a step whose excess
    ``𝓛(W_{t+1}) − 𝓛(W_t) + (η_t/2L)‖∇𝓛(W_t)‖²`` lies within ``band · 𝓛(W_t)`` of 0 can be neither confirmed nor
    counted as a violation (the ``tol`` of :class:`Tracker`; :func:`exact_excess` decides such steps). The band's
    numbers are registered with the descent rows; this checks that every row registers the same band, that its
    ``n`` is the data's and its ``ε`` the working dtype's, and returns it.

    Parameters
    ----------
    rules
        One or more registered rules (e.g. :meth:`companion.claims.ClaimCheck.rule`), each with the parameters
        ``band_factor``, ``n`` and ``eps`` (anything indexable by those names).
    n
        The number of samples of the loss.
    dtype
        The working floating dtype (default: :func:`companion.device.get_dtype`).

    Returns
    -------
    float
        ``band_factor · n · eps``, relative to ``𝓛(W_t)`` (a scalar).

    Raises
    ------
    ValueError
        When ``rules`` is empty, the rules register different bands, or their ``n`` or ``eps`` is not the data's
        ``n`` or the dtype's machine epsilon.

    Examples
    --------
    >>> import torch
    >>> band = {"band_factor": 2, "n": 32, "eps": 2.0**-52}
    >>> rounding_band([band, dict(band)], n=32, dtype=torch.float64)
    1.4210854715202004e-14
    """
    rules = list(rules)
    if not rules:
        raise ValueError("rules: at least one registered rule expected")
    keys = ("band_factor", "n", "eps")
    first = {k: rules[0][k] for k in keys}
    for i, rule in enumerate(rules[1:], start=1):
        other = {k: rule[k] for k in keys}
        if other != first:
            raise ValueError(f"rules[{i}] registers the band {other}, rules[0] {first}")
    eps = torch.finfo(device.get_dtype() if dtype is None else dtype).eps
    if first["n"] != n or first["eps"] != eps:
        raise ValueError(f"the registered band has n = {first['n']}, eps = {first['eps']}; the data n = {n}, eps = {eps}")
    return first["band_factor"] * first["n"] * first["eps"]
