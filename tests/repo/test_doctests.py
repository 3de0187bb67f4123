"""The Examples sections of the package's docstrings run as doctests (the engine, each model's closure, the claim
check, the estimates, the certificates): an example that stopped working fails here."""

import doctest
import importlib
import pkgutil

import pytest

import companion

MODULES = sorted(m.name for m in pkgutil.iter_modules(companion.__path__) if m.name != "_book")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"companion.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of companion.{name} failed"


def test_the_entry_points_have_examples():
    for name in ("gd", "claims", "stats", "certify", "relunet", "population", "deepnet", "widenet"):
        module = importlib.import_module(f"companion.{name}")
        tests = doctest.DocTestFinder().find(module)
        assert sum(len(t.examples) for t in tests) > 0, f"companion.{name} has no doctested example"
