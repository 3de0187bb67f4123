"""Tests of companion.assumptions (paper A, Assumptions 3.1-3.3; ch-setup): refusals, and one activation per block of
members."""

import math

import pytest
import torch

from companion import activations, assumptions, deepnet


def test_check_assumptions_refuses_what_the_lemmas_exclude(gen):
    assert assumptions.check_assumptions("tanh").name == "tanh"
    with pytest.raises(ValueError, match="not smooth"):
        assumptions.check_assumptions("relu")
    with pytest.raises(ValueError, match="c_x"):
        assumptions.check_assumptions("tanh", c_x=1.5)
    X = deepnet.ball_data(4, 3, generator=gen)
    X[0] = X[0] / X[0].norm() * math.sqrt(3) * 1.01
    with pytest.raises(ValueError, match="Assumption 3.2"):
        assumptions.check_assumptions("tanh", X)


def test_blockwise_activation_applies_one_activation_per_block():
    z = torch.linspace(-2, 2, 5, dtype=torch.float64).repeat(6, 1)  # (E = 6, 5)
    sigma = assumptions.blockwise_activation(("tanh", "sigmoid", "softplus"), 2)
    for name, rows in (("tanh", slice(0, 2)), ("sigmoid", slice(2, 4)), ("softplus", slice(4, 6))):
        act = activations.get(name)
        torch.testing.assert_close(sigma.fn(z)[rows], act.fn(z[rows]), rtol=0, atol=0)
        torch.testing.assert_close(sigma.d1(z)[rows], act.d1(z[rows]), rtol=0, atol=0)
    assert sigma.constants()["c2"] == 1.0  # the largest of the blocks' constants
    assert assumptions.blockwise_activation(["tanh"], 3).name == "tanh"
    with pytest.raises(ValueError, match="distinct"):
        assumptions.blockwise_activation(("tanh", "tanh"), 2)
    with pytest.raises(ValueError, match="not smooth"):
        assumptions.blockwise_activation(("tanh", "relu"), 2)
