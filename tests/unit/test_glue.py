"""companion.glue: MyST-NB's glue where the book is built, a plain display (or nothing) where it is not."""

import sys
import types

import pytest

from companion import glue as glue_module
from companion.glue import glue


def test_with_myst_nb_the_call_is_myst_nbs_own(monkeypatch):
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: calls.append((name, value, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    glue("rate", 0.5, display=False)
    glue("table", "text")
    assert calls == [("rate", 0.5, False), ("table", "text", True)]


def test_without_myst_nb_the_value_is_shown_or_dropped(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb raises ImportError
    assert glue("kept", 0.25, display=False) is None
    assert capsys.readouterr().out == ""
    glue("shown", 0.125)
    assert capsys.readouterr().out.strip() == "0.125"


@pytest.mark.parametrize("name", ["", None, 3])
def test_a_name_that_is_not_a_nonempty_string_is_refused(name):
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        glue_module.glue(name, 1.0)
