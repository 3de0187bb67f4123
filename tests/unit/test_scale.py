"""companion.scale: the COMPANION_SCALE switch."""

import torch

from companion import activations, deepnet, scale

SMOOTH = activations.SMOOTH


def _problem(gen, widths=(4, 5, 3, 1), E=3, n=10, init=1.0):
    params = deepnet.init_params(list(widths), E, init, generator=gen, device="cpu", dtype=torch.float64)
    X = deepnet.ball_data(n, widths[0], generator=gen, device="cpu", dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    return params, X, y


def test_scale_switch(monkeypatch):
    monkeypatch.setenv("COMPANION_SCALE", "quick")
    assert scale.select({"quick": 1, "paper": 2}) == 1
    monkeypatch.delenv("COMPANION_SCALE")
    assert scale.current() == "paper"
