"""Tests of companion.polysum (the log-space polynomial sums of paper A's bounds; ch-smoothness), against plain-Python
sums of the monomials."""

import math

import pytest
import torch

from companion import polysum

NORMS = [0.0, 1e-3, 0.5, 1.0, 3.7, 20.0]


def test_double_sum_matches_the_monomials():
    a, b = (torch.tensor(v, dtype=torch.float64) for v in zip(*[(x, y) for x in NORMS for y in NORMS]))
    for degree in range(0, 7):
        got = torch.exp(polysum.log_double_sum(a, b, degree))
        for e, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
            want = sum(x**j * y**k for j in range(degree + 1) for k in range(degree + 1 - j))  # 0.0**0 == 1.0
            assert got[e].item() == pytest.approx(want, rel=1e-12)


def test_power_sum_with_offset_and_weights():
    a = torch.tensor(NORMS, dtype=torch.float64)
    w = [1.0 / (k + 2) for k in range(5)]
    got = torch.exp(polysum.log_power_sum(a, 4, offset=2, weights=w))
    plain = torch.exp(polysum.log_power_sum(a, 3))
    for e, x in enumerate(NORMS):
        assert got[e].item() == pytest.approx(sum(w[k] * x ** (k + 2) for k in range(5)), rel=1e-12)
        assert plain[e].item() == pytest.approx(sum(x**k for k in range(4)), rel=1e-12)


def test_exponent_sum_counts_repeats_and_equals_the_double_sum():
    a, b = torch.tensor([0.0, 2.0, 0.3], dtype=torch.float64), torch.tensor([5.0, 0.0, 1.5], dtype=torch.float64)
    got = torch.exp(polysum.log_exponent_sum(a, b, [(1, 0), (0, 2), (1, 0)]))
    for e, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        assert got[e].item() == pytest.approx(2 * x + y**2, rel=1e-12)
    tri = [(j, k) for j in range(4) for k in range(4 - j)]
    torch.testing.assert_close(polysum.log_exponent_sum(a, b, tri), polysum.log_double_sum(a, b, 3), rtol=1e-14, atol=0)


def test_no_overflow_and_clear_errors():
    big = torch.tensor([1e200], dtype=torch.float64)
    assert polysum.log_double_sum(big, big, 4).item() == pytest.approx(4 * math.log(1e200) + math.log(5), rel=1e-12)
    with pytest.raises(ValueError, match="norm"):
        polysum.log_power_sum(torch.tensor([-1.0], dtype=torch.float64), 2)
    with pytest.raises(ValueError, match="exponent pair"):
        polysum.log_exponent_sum(big, big, [])
    with pytest.raises(ValueError, match="is on meta"):
        polysum.log_double_sum(big, big.to("meta"), 2)
