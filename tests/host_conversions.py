"""Shared by the engine tests: count tensor-to-host conversions, to prove a loop makes none per step."""

import torch


class HostConversions(torch.overrides.TorchFunctionMode):
    """Counts tensor-to-host conversions (``item``, ``bool``, ``tolist``, ``float``/``int``, ``numpy``, ``cpu``, ``len``)."""

    NAMES = {"item", "__bool__", "tolist", "__float__", "__int__", "__index__", "numpy", "cpu", "__len__"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.NAMES:
            self.count += 1
        return func(*args, **(kwargs or {}))
