"""Executable companion to three papers on gradient descent for neural networks: the shared package.

Import the module of a concept (``from companion import gd, relunet, claims``); ``book/api/index.md`` groups them by
paper and concept, and each public function's docstring names the result it implements and the chapter (by label)
that explains it.
"""

from companion import memory as _memory

__all__ = ["__version__"]

__version__ = "0.1.0"

_memory._apply_on_import()  # large host tensors reuse freed memory (companion.memory)
