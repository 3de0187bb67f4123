"""Alternative formulations of paper B's loss-and-gradient hot path, timed by ``benchmarks/run.py``.

Every function here computes the same thing as :func:`companion.relunet.loss_and_gradient_wv` for **shared data**
``X (n, d)``, targets ``y (n,)``, one output and trainable output weights:

    L_e = (1/2n) Σ_i (v_eᵀ ReLU(W_e x_i) − y_i)²,   returns (loss (E,), grad_W (E, k, d), grad_v (E, k)).

They differ only in how the work is laid out (which GEMM orientation, which memory layout of the
``k·E × n`` hidden matrix, how the ReLU mask is applied, float32 or float64). The two GEMMs (forward
``Z = W X ᵀ`` and backward ``M = (mask ⊙ R) X``) are ``4 n d k E`` floating-point operations per call; the rest
is elementwise work on ``n·k·E`` numbers that does not count as FLOPs but costs memory traffic.
benchmarks/README.md lists what each measured.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from companion import fused

Formulation = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]


def matmul_flops(n: int, d: int, k: int, E: int) -> int:
    """FLOPs of the forward and backward GEMMs of one loss-and-gradient call: ``2·n·d·kE`` each."""
    return 4 * n * d * k * E


def einsum_naive(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """What one writes first: einsums in the ``(n, E, k)`` layout, a float mask, grad_v by its own
    reduction over ``n`` (no GEMM for it)."""
    n = X.shape[0]
    Z = torch.einsum("nd,ekd->nek", X, W)
    A = Z.clamp_min(0)
    r = (A * v).sum(-1) - y[:, None]  # (n, E)
    loss = 0.5 * (r**2).mean(0)
    S = (r[..., None] * v) * (Z > 0)  # (n, E, k)
    gW = torch.einsum("nek,nd->ekd", S, X) / n
    gv = torch.einsum("ne,nek->ek", r, A) / n
    return loss, gW, gv


def nke_where(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Neuron-major ``(n, k, E)`` layout (ensemble innermost), ``torch.where`` for the mask, the backward
    GEMM as ``Gᵀ X`` on a transposed view, and the ReLU homogeneity trick for grad_v
    (``∂L/∂v_j = ⟨w_j, M_j⟩``). The layout of relunet's first version."""
    E, k, d = W.shape
    n = X.shape[0]
    Wk = W.transpose(0, 1).reshape(k * E, d)
    H = torch.mm(X, Wk.T).view(n, k, E).clamp_min_(0)
    VT = v.T
    P = H[:, 0] * VT[0]
    for i in range(1, k):
        P.addcmul_(H[:, i], VT[i])
    R = P.sub_(y.unsqueeze(1))
    loss = (R * R).sum(0).div_(2 * n)
    G = torch.where(H > 0, R.unsqueeze(1), 0.0)
    M = torch.mm(G.view(n, k * E).T, X).view(k, E, d).transpose(0, 1).contiguous().div_(n)
    return loss, M * v.unsqueeze(-1), (M * W).sum(-1)


def ekn_sign(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Member-major ``(E, k, n)`` layout (samples innermost, contiguous rows per neuron):

    * forward ``Z = W Xᵀ`` as one GEMM ``(kE, d) @ (d, n)``, ReLU in place;
    * prediction and residual in one ``baddbmm``: ``R = −y + v ReLU(Z)`` (a ``(1, k) @ (k, n)`` product per member);
    * mask applied as ``sign(ReLU(Z)) · R`` in place (two streaming passes, no boolean temporary);
    * backward ``Mᵀ = Xᵀ Sᵀ`` as one GEMM ``(d, n) @ (n, kE)`` (MKL's preferred orientation here);
    * ``grad_W = v M``, ``grad_v = ⟨w, M⟩`` (ReLU homogeneity; no extra pass over the ``kE × n`` matrix).

    This is what :func:`companion.relunet.loss_and_gradient_wv` now runs for shared data and one output.
    """
    E, k, d = W.shape
    n = X.shape[0]
    A = torch.mm(W.reshape(E * k, d), X.T).view(E, k, n).clamp_min_(0)
    R = torch.baddbmm(y.neg().view(1, 1, n), v.view(E, 1, k), A)  # (E, 1, n)
    loss = torch.bmm(R, R.mT).view(E).div_(2 * n)  # Σ_i R_i², one BLAS pass
    S = A.sign_().mul_(R)  # mask ⊙ R, in place
    M = torch.mm(X.T, S.view(E * k, n).T).T.contiguous().view(E, k, d).div_(n)  # (E, k, d)
    return loss, M * v.unsqueeze(-1), torch.linalg.vecdot(W, M)


def ekn_sign_backward_sx(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """As :func:`ekn_sign` but the backward GEMM in the other orientation, ``M = S X`` ``(kE, n) @ (n, d)``."""
    E, k, d = W.shape
    n = X.shape[0]
    A = torch.mm(W.reshape(E * k, d), X.T).view(E, k, n).clamp_min_(0)
    R = torch.baddbmm(y.neg().view(1, 1, n), v.view(E, 1, k), A)
    loss = torch.linalg.vecdot(R, R).view(E).mul_(0.5 / n)
    S = A.sign_().mul_(R)
    M = torch.mm(S.view(E * k, n), X).view(E, k, d)
    gW = (v.unsqueeze(-1) * M).div_(n)
    gv = torch.linalg.vecdot(W, M).div_(n)
    return loss, gW, gv


def ekn_where(W: Tensor, v: Tensor, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """As :func:`ekn_sign` but the mask by ``torch.where(A > 0, R, 0)`` (a boolean temporary and a
    broadcast select) instead of ``sign_().mul_()``."""
    E, k, d = W.shape
    n = X.shape[0]
    A = torch.mm(W.reshape(E * k, d), X.T).view(E, k, n).clamp_min_(0)
    R = torch.baddbmm(y.neg().view(1, 1, n), v.view(E, 1, k), A)
    loss = torch.linalg.vecdot(R, R).view(E).mul_(0.5 / n)
    S = torch.where(A > 0, R, 0.0)
    M = torch.mm(X.T, S.view(E * k, n).T).T.view(E, k, d)
    gW = (v.unsqueeze(-1) * M).div_(n)
    gv = torch.linalg.vecdot(W, M).div_(n)
    return loss, gW, gv


def ekn_chunked(W: Tensor, v: Tensor, X: Tensor, y: Tensor, chunk: int = 128) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`ekn_sign` on blocks of ``chunk`` members, so that each block's ``k·chunk × n`` matrix stays
    in cache between the GEMM and the elementwise passes (a Python loop over ``E / chunk`` blocks)."""
    outs = [ekn_sign(W[i : i + chunk], v[i : i + chunk], X, y) for i in range(0, W.shape[0], chunk)]
    return tuple(torch.cat(parts) for parts in zip(*outs))  # type: ignore[return-value]


FORMULATIONS: dict[str, Formulation] = {
    "einsum_naive": einsum_naive,
    "nke_where": nke_where,
    "ekn_where": ekn_where,
    "ekn_sign_backward_SX": ekn_sign_backward_sx,
    "ekn_sign": ekn_sign,
    "ekn_chunked128": ekn_chunked,
    # the out-of-place statement that torch.compile fuses (companion.fused), run eagerly here
    "fused_out_of_place (eager)": fused.paper_b_loss_and_grad,
}
