"""One protocol for a model: the parameter container and the four verbs every network module speaks (:ref:`ch-setup`).

Every network of the book is a module that satisfies :class:`Model`: paper A's deep network
(:mod:`companion.deepnet`, :ref:`ch-setup`), paper B's two-layer ReLU network on a sample
(:mod:`companion.relunet`, :ref:`ch-three-phases`; :mod:`companion.fused` is an alternative closure of it for
compilers) and on the population loss (:mod:`companion.population`, :ref:`ch-closed-forms`), and paper C's wide
networks (:mod:`companion.widenet`, :ref:`ch-parameter-ball`). :func:`companion.gd.run` trains any of them
without an adapter.

**The container.** A model's parameters are a ``list`` of tensors, each with a leading ensemble axis ``E``:
member ``e`` of the ensemble is ``[p[e] for p in params]``, and members are independent (member ``e``'s loss
depends on its own parameters and data only). The order of the list is the model's:

* :mod:`~companion.deepnet`: ``[w_1 (E, d_1, d_0), …, w_L (E, 1, d_{L-1})]``;
* :mod:`~companion.relunet`, :mod:`~companion.population`: ``[W (E, k, d), v (E, k)]`` (``V (E, k, r)`` for ``r``
  outputs), or ``[W]`` when the output weights are held fixed (``fixed_v=``, the same for every member or one per
  member; :func:`two_layer_closure` handles both cases for both models);
* :mod:`~companion.fused`: ``[W (E, k, d), v (E, k)]``, both trained (no ``fixed_v``);
* :mod:`~companion.widenet`: ``[W_1 (E, m, d), W_2 … W_H (E, m, m), a (E, m)]``.

Arithmetic on such lists (sums, inner products, norms per member) is in :mod:`companion.paramlist`.

**The verbs.** ``data`` is ``(X, Y)`` for a loss on a sample (inputs ``X (n, d)`` shared by the members or
``(E, n, d)`` one sample per member, targets ``Y`` to match) and ``(target,)`` for paper B's population loss,
which is an expectation over the input distribution.

* ``init_params(...) -> list[Tensor]``: the model's own initialisation, drawn from the seeded CPU generators of
  :mod:`companion.device`;
* ``forward(params, X, ...) -> (E, n)`` or ``(E, n, r)``: the network's outputs;
* ``loss_and_gradient(params, *data, ...) -> (loss (E,), grads)``, ``grads`` a list matching ``params``,
  validated on every call;
* ``make_loss_and_grad(*data, ...) -> closure``: ``closure(params)`` returns the same values as
  ``loss_and_gradient(params, *data, ...)``; the data are validated once when the closure is made and the
  parameters' shapes at its first call, so that a GD loop pays no checks per step.

Model-specific options (paper A's activation, paper C's :class:`~companion.widenet.Net`, paper B's ``fixed_v``)
follow the data and have the same name and meaning in every verb of a module.

**The restrict contract.** ``closure.restrict(index)``, with ``index`` a 1-D integer tensor of the positions of
the members kept (increasing, on the parameters' device), returns the closure of those members only::

    closure.restrict(index)([p[index] for p in params]) == (loss[index], [g[index] for g in grads])

where ``loss, grads = closure(params)``. Data shared by every member stay as they are; per-member data (inputs
``(E, n, d)``, targets, fixed output weights ``(E, k)``) are sliced. :func:`companion.gd.run` calls it when its stop
rule takes decided members out of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from . import validation

__all__ = ["Params", "LossAndGrad", "Model", "VERBS", "two_layer_weights", "two_layer_closure"]

Params = list[Tensor]

VERBS = ("init_params", "forward", "loss_and_gradient", "make_loss_and_grad")


@runtime_checkable
class LossAndGrad(Protocol):
    """What ``make_loss_and_grad`` returns and :func:`companion.gd.run` consumes: ``params -> (loss (E,), grads)``
    with ``grads`` matching ``params``, and ``restrict(index)``, the closure of the members at positions ``index``."""

    def __call__(self, params: Sequence[Tensor], /) -> tuple[Tensor, list[Tensor]]: ...

    def restrict(self, index: Tensor, /) -> LossAndGrad:
        """The closure of the members at positions ``index`` only (the restrict contract, module docstring).

        Parameters
        ----------
        index : Tensor, (E',), int64
            The positions of the members kept, increasing, on the parameters' device.

        Returns
        -------
        LossAndGrad
            The closure of those ``E'`` members: it takes ``[p[index] for p in params]`` and returns
            ``(loss[index], [g[index] for g in grads])``.
        """
        ...


@runtime_checkable
class Model(Protocol):
    """A network module: the four verbs over a parameter list with a leading ensemble axis (module docstring)."""

    def init_params(self, *args: Any, **options: Any) -> Params:
        """The model's own initialisation: a list of tensors ``(E, …)``.

        Parameters
        ----------
        *args
            The model's own sizes (ensemble, widths, inputs).
        **options
            The model's initialisation options (a seed, scales).

        Returns
        -------
        list of Tensor, each (E, ...)
            The parameter list in the model's order (module docstring).
        """
        ...

    def forward(self, params: Sequence[Tensor], X: Tensor, /, *args: Any, **options: Any) -> Tensor:
        """Outputs for every member and input, ``(E, n)`` or ``(E, n, r)``.

        Parameters
        ----------
        params : sequence of Tensor, each (E, ...)
            The parameter list.
        X : Tensor, (n, d) or (E, n, d)
            Inputs shared by the members, or one sample per member.
        *args
            The model's further positional arguments (paper C's :class:`~companion.widenet.Net`).
        **options
            The model's options (paper A's activation, paper B's ``fixed_v``).

        Returns
        -------
        Tensor, (E, n) or (E, n, r)
            The outputs of every member on every input.
        """
        ...

    def loss_and_gradient(self, params: Sequence[Tensor], /, *data: Tensor, **options: Any) -> tuple[Tensor, list[Tensor]]:
        """``(loss (E,), grads)`` with ``grads`` matching ``params``; ``data`` is ``(X, Y)`` or ``(target,)``.

        Parameters
        ----------
        params : sequence of Tensor, each (E, ...)
            The parameter list.
        *data : Tensor
            ``(X, Y)`` for a loss on a sample, ``(target,)`` for paper B's population loss.
        **options
            The model's options, as in :meth:`forward`.

        Returns
        -------
        loss : Tensor, (E,)
            The loss of every member.
        grads : list of Tensor, each (E, ...)
            Its gradient, matching ``params``.
        """
        ...

    def make_loss_and_grad(self, *data: Tensor, **options: Any) -> LossAndGrad:
        """The closure of :meth:`loss_and_gradient` for :func:`companion.gd.run`, with ``restrict``.

        Parameters
        ----------
        *data : Tensor
            As in :meth:`loss_and_gradient`, validated once here.
        **options
            The model's options, as in :meth:`loss_and_gradient`.

        Returns
        -------
        LossAndGrad
            ``closure(params) -> (loss (E,), grads)``, the values of :meth:`loss_and_gradient`, with ``restrict``.
        """
        ...


# ------------------------------------------------------------------------- paper B: trainable or fixed output weights
def two_layer_weights(params: Sequence[Tensor], fixed_v: Tensor | None = None, *, vector_outputs: bool = False):
    """``(W, V)`` from a two-layer parameter list (paper B; :ref:`ch-three-phases`, :ref:`ch-landscape`).

    Parameters
    ----------
    params
        ``[W (E, k, d), v (E, k) or V (E, k, r)]`` when ``fixed_v`` is ``None``, else ``[W (E, k, d)]``.
    fixed_v
        Output weights held fixed: ``(k,)`` / ``(k, r)`` (the same for every member) or ``(E, k)`` / ``(E, k, r)``.
    vector_outputs
        Whether the network has ``r`` outputs (``V (…, k, r)``), which tells a shared ``(k, r)`` from a per-member
        ``(E, k)``.

    Returns
    -------
    (W, V)
        ``W (E, k, d)`` and ``V (E, k)`` or ``(E, k, r)`` (a shared ``fixed_v`` broadcast to every member).

    Raises
    ------
    ValueError
        When ``params`` is not ``[W, v]`` (trainable output weights) or ``[W]`` (``fixed_v`` given).
    """
    if fixed_v is None:
        if len(params) != 2:
            raise ValueError("with trainable output weights params must be [W, v]")
        return params[0], params[1]
    if len(params) != 1:
        raise ValueError("with fixed output weights params must be [W]")
    W = params[0]
    shared = fixed_v.ndim == 1 + int(vector_outputs)
    return W, (fixed_v.expand(W.shape[0], *fixed_v.shape) if shared else fixed_v)


def two_layer_closure(
    kernel: Callable[[Tensor, Tensor, bool], tuple[Tensor, Tensor, Tensor | None]],
    check: Callable[[Tensor, Tensor], None],
    rebuild: Callable[[Tensor, Tensor | None], LossAndGrad],
    fixed_v: Tensor | None = None,
    *,
    vector_outputs: bool = False,
) -> LossAndGrad:
    """The engine's closure over paper B's container, with trainable or fixed output weights, for every paper-B
    model (:func:`companion.relunet.make_loss_and_grad`, :func:`companion.population.make_loss_and_grad`;
    Theorem 2 in :ref:`ch-three-phases`, Figure 1 in :ref:`ch-landscape`).

    Parameters
    ----------
    kernel
        ``kernel(W, V, train_v) -> (loss (E,), grad_W (E, k, d), grad_V)``, the model's loss and gradient without
        checks (``grad_V`` may be ``None`` when ``train_v`` is false).
    check
        ``check(W, V)`` raises ``ValueError`` when the parameters do not match the data; called at the first call
        and whenever the parameters' shapes change.
    rebuild
        ``rebuild(index, fixed_v_kept) -> closure``: the model's closure for the members at positions ``index``
        (the model slices its per-member data; ``fixed_v_kept`` is ``fixed_v`` restricted to those members).
    fixed_v
        ``None`` (params ``[W, v]``, grads ``[grad_W, grad_v]``) or the fixed output weights (params ``[W]``, grads
        ``[grad_W]``): ``(k,)`` / ``(k, r)`` shared by every member, or ``(E, k)`` / ``(E, k, r)``.
    vector_outputs
        Whether the network has ``r`` outputs.

    Returns
    -------
    LossAndGrad
        ``params -> (loss (E,), grads)``, with ``restrict(index)`` (the module docstring's contract).

    Raises
    ------
    ValueError
        When ``fixed_v`` is not a finite tensor of 1 to 3 dimensions; at a call, when the parameters are not ``[W]``
        with ``fixed_v``, or ``check`` rejects them.
    """
    if fixed_v is not None:
        validation.tensor("fixed_v", fixed_v, ndim=(1, 2, 3))
    shared = fixed_v is not None and fixed_v.ndim == 1 + int(vector_outputs)
    checked: dict = {}

    def loss_and_grad(params: Sequence[Tensor]):
        if fixed_v is None:
            W, V = two_layer_weights(params)
        else:
            if len(params) != 1:
                raise ValueError("with fixed output weights params must be [W]")
            W, V = params[0], checked.get("V")
            if V is None:
                V = two_layer_weights(params, fixed_v, vector_outputs=vector_outputs)[1].contiguous()
                checked["V"] = V
        if checked.get("shapes") != (tuple(W.shape), tuple(V.shape)):
            check(W, V)
            checked["shapes"] = (tuple(W.shape), tuple(V.shape))
        value, gW, gV = kernel(W, V, fixed_v is None)
        return (value, [gW, gV]) if fixed_v is None else (value, [gW])

    def restrict(index: Tensor) -> LossAndGrad:
        """The closure for the members at positions ``index`` (per-member data and output weights sliced)."""
        return rebuild(index, fixed_v if fixed_v is None or shared else fixed_v[index])

    loss_and_grad.restrict = restrict  # type: ignore[attr-defined]
    return loss_and_grad  # type: ignore[return-value]
