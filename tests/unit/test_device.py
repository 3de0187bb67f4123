"""The randomness policy (companion.device): CPU generators, draws moved to the device, the COMPANION_SEED offset;
and the device/dtype checks of companion.validation."""

import numpy as np
import pytest
import torch

from companion import device, validation


def test_generator_is_on_the_cpu_and_seeded_with_the_offset(monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    g = device.generator(5)
    assert g.device.type == "cpu" and g.initial_seed() == 5
    monkeypatch.setenv("COMPANION_SEED", "7")
    assert device.generator(5).initial_seed() == 12 and device.seed_offset() == 7
    assert device.numpy_rng(5).integers(1 << 30) == np.random.default_rng(12).integers(1 << 30)
    monkeypatch.setenv("COMPANION_SEED", "-1")
    with pytest.raises(ValueError, match="COMPANION_SEED"):
        device.generator(0)
    with pytest.raises(ValueError, match="seed"):
        device.generator(-1)


@pytest.mark.parametrize("sampler", ["randn", "rand"])
def test_draws_are_made_on_the_cpu_then_moved(sampler, monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    ref = getattr(torch, sampler)((3, 4), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = getattr(device, sampler)((3, 4), generator=device.generator(1), device="cpu", dtype=torch.float64)
    assert torch.equal(got, ref)
    moved = getattr(device, sampler)((3, 4), generator=device.generator(1), device="meta", dtype=torch.float64)
    assert moved.device.type == "meta" and moved.shape == (3, 4)
    f32 = getattr(device, sampler)(5, generator=device.generator(1), device="cpu", dtype="float32")
    assert f32.dtype == torch.float32


def test_other_samplers(monkeypatch):
    monkeypatch.delenv("COMPANION_SEED", raising=False)
    g = device.generator(0)
    u = device.uniform((1000,), -2.0, 3.0, generator=g, device="cpu")
    assert float(u.min()) >= -2 and float(u.max()) < 3
    lu = device.log_uniform((1000,), 0.1, 10.0, generator=g, device="cpu")
    assert float(lu.min()) >= 0.1 and float(lu.max()) < 10
    i = device.randint(2, 5, (100,), generator=g, device="cpu")
    assert i.dtype == torch.int64 and set(i.tolist()) <= {2, 3, 4}
    assert sorted(device.randperm(6, generator=g, device="cpu").tolist()) == list(range(6))
    for bad in (
        lambda: device.uniform(3, 1.0, 1.0, generator=g),
        lambda: device.log_uniform(3, 0.0, 1.0, generator=g),
        lambda: device.randint(3, 3, 2, generator=g),
        lambda: device.randn((2, -1), generator=g),
        lambda: device.randn(2, generator="not a generator"),
    ):
        with pytest.raises(ValueError):
            bad()


def test_require_float64_switches_with_a_note(capsys):
    try:
        device.set_policy(dtype="float32")
        device.require_float64("a check at 1e-12")
        assert device.get_dtype() == torch.float64
        assert "needs float64" in capsys.readouterr().out
    finally:
        device.set_policy()


def test_same_device_names_both_tensors():
    a = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="X is on meta but W is on cpu"):
        validation.same_device(W=a, X=torch.zeros(2, dtype=torch.float64, device="meta"))
    with pytest.raises(ValueError, match="X has dtype torch.float32 but W has dtype torch.float64"):
        validation.same_device(W=a, X=a.float())
    validation.same_device(W=a, X=a.clone())


def test_device_policy(monkeypatch):
    monkeypatch.delenv("COMPANION_DTYPE", raising=False)
    assert device.get_dtype() == torch.float64
    device.set_policy("cpu", "float32")
    try:
        assert device.resolve() == (torch.device("cpu"), torch.float32)
    finally:
        device.set_policy()
    assert device.get_dtype() == torch.float64
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    monkeypatch.delenv("COMPANION_DEVICE", raising=False)
    assert device.get_device().type == expected
