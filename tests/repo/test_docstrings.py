"""The package's public functions carry numpydoc sections: every function in a module's ``__all__`` (and every public
method of a class there) that takes parameters has a ``Parameters`` section naming each of them, one that returns a
value has a ``Returns`` (or ``Yields``) section, and one that raises ``ValueError`` itself (or checks its input through
:mod:`companion.validation`) has a ``Raises`` section."""

import ast
import importlib
import inspect
import pkgutil
import re
import textwrap

import pytest

import companion

MODULES = sorted(m.name for m in pkgutil.iter_modules(companion.__path__) if not m.name.startswith("_"))
SECTIONS = ("Returns", "Yields", "Raises", "Warns", "See Also", "Notes", "References", "Examples")


def _public_functions(module):
    """``(name, function)`` for the functions of ``__all__`` and the public methods of its classes."""
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for attr, value in vars(obj).items():
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if not attr.startswith("_") and inspect.isfunction(value):
                    yield f"{name}.{attr}", value


def _parameters(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def _own_nodes(fn):
    """The AST nodes of the function's own body, not those of a nested function, lambda or class."""
    body = list(ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        body.extend(ast.iter_child_nodes(node))


def _returns_a_value(fn) -> bool:
    """Whether the function returns something other than None, or yields."""
    for node in _own_nodes(fn):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
    return False


def _raises_value_error(fn) -> bool:
    """Whether the function raises ``ValueError`` itself or calls a check of :mod:`companion.validation`."""
    for node in _own_nodes(fn):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "ValueError":
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "validation":
                return True
    return False


def _section(doc: str, title: str) -> str | None:
    """The body of the numpydoc section ``title`` (up to the next section), or None when there is none."""
    head = f"{title}\n{'-' * len(title)}\n"
    if head not in doc:
        return None
    body = doc.split(head, 1)[1]
    for other in SECTIONS:
        body = body.split(f"\n{other}\n{'-' * len(other)}\n", 1)[0]
    return body


def _entry_names(section: str) -> set[str]:
    """The names a ``Parameters`` section describes: its unindented entry lines, ``a, b : type`` or ``**options``."""
    names = set()
    for line in section.splitlines():
        if line and not line[0].isspace():
            names |= {n.strip().strip("`").lstrip("*").strip("`") for n in line.split(" : ")[0].split(",")}
    return names


def _problems(fn) -> list[str]:
    doc = inspect.getdoc(fn) or ""
    problems = []
    if params := _parameters(fn):
        section = _section(doc, "Parameters")
        if section is None:
            problems.append("no Parameters section")
        else:
            named = _entry_names(section)
            problems += [f"parameter {p!r} not named" for p in params if p not in named]
    if _returns_a_value(fn) and _section(doc, "Returns") is None and _section(doc, "Yields") is None:
        problems.append("no Returns section")
    if _raises_value_error(fn) and _section(doc, "Raises") is None:
        problems.append("raises ValueError but has no Raises section")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_public_functions_have_parameters_returns_and_raises_sections(name):
    module = importlib.import_module(f"companion.{name}")
    problems = [f"companion.{name}.{qual}: {'; '.join(p)}" for qual, fn in _public_functions(module) if (p := _problems(fn))]
    assert problems == [], "\n".join(problems)


PRIVATE_REFERENCE = re.compile(r":(?:func|class|meth|attr|data|obj):`~?(?:[\w.]+\.)?_\w+`")


@pytest.mark.parametrize("name", MODULES)
def test_public_docstrings_cross_reference_only_documented_names(name):
    """The API pages are built with warnings as errors, and a private name has no page: a public docstring names it
    in literal backticks (````_helper````), never through a cross-reference role."""
    module = importlib.import_module(f"companion.{name}")
    docs = [(f"companion.{name}", module.__doc__ or "")]
    docs += [(f"companion.{name}.{qual}", inspect.getdoc(fn) or "") for qual, fn in _public_functions(module)]
    problems = [f"{where}: {m.group(0)}" for where, doc in docs for m in PRIVATE_REFERENCE.finditer(doc)]
    assert problems == [], "\n".join(problems)
