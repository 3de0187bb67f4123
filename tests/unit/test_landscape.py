"""companion.landscape: the continued stationary-point search decides every run (stationary, escaping, stalled)."""

import pytest
import torch

from companion import landscape
from companion import population as P


def test_escaping_needs_growth_and_fall_at_every_round():
    theta = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 1.0], [3.0, 3.0, 1.0]])
    grad = torch.tensor([[1e-3, 1e-3, 1e-3], [5e-4, 5e-4, 5e-4], [1e-4, 2e-3, 1e-4]])
    assert landscape.escaping(theta, grad).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="histories"):
        landscape.escaping(theta[:1], grad[:1])


def test_a_run_near_a_manifold_becomes_stationary_and_is_taken_out():
    a = torch.zeros(4, dtype=torch.float64)
    a[0] = 1.0
    W, v = P.paper_point(torch.tensor([1.0, 0.5], dtype=torch.float64), 1.0, 1.0, a)
    W[0] = W[0] + 1e-3 * torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)  # tilted
    out = landscape.continue_search(W, v, a, rounds=2, iters=20, polish_iters=30)
    assert out.theta_norm.shape == (3, 2) and out.grad_norm.shape == (3, 2)
    assert out.stationary_at[1] == 0  # stationary before the continuation: never moved
    assert torch.equal(out.W[1], W[1])
    assert (out.ratio[out.stationary_at >= 0] <= 64).all()
