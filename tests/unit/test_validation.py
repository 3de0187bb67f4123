"""companion.validation: the input checks every public function runs."""

import pytest
import torch

from companion import validation


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_finite_finds_one_bad_entry_anywhere(bad, dtype):
    x = torch.randn(3, 50, 40, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert validation.all_finite(x)
    for idx in [(0, 0, 0), (1, 17, 23), (2, 49, 39)]:
        y = x.clone()
        y[idx] = bad
        assert not validation.all_finite(y) and validation.all_finite(y) == bool(torch.isfinite(y).all())
    assert validation.all_finite(torch.empty(0, 3, dtype=dtype))
    assert validation.all_finite(torch.tensor(torch.finfo(dtype).max, dtype=dtype))


def test_tensor_rejects_non_finite_and_wrong_kinds():
    with pytest.raises(ValueError, match="non-finite"):
        validation.tensor("W", torch.tensor([[1.0, float("nan")]]), ndim=2)
    with pytest.raises(ValueError, match="floating-point"):
        validation.tensor("W", torch.ones(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="torch.Tensor"):
        validation.tensor("W", [1.0])
    x = torch.tensor([float("inf")], requires_grad=True)
    assert validation.tensor("W", x, finite=False) is x
