"""Shared by the engine and device tests (tests/unit/test_gd.py, tests/test_gpu.py): a seeded CPU generator and the
comparison of a result on any device with its CPU reference."""

import torch


def cpu_gen(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-11) -> None:
    """``a`` (any device) equals ``b`` (CPU) to ``rtol`` relative to ``b``'s largest entry; NaNs in the same places."""
    a, b = a.detach().cpu(), b.detach().cpu()
    assert a.shape == b.shape
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    a, b = torch.nan_to_num(a), torch.nan_to_num(b)
    scale = float(b.abs().max()) or 1.0
    assert float((a - b).abs().max()) <= rtol * scale, (float((a - b).abs().max()), scale)
