"""Numbers a chapter computes and its text quotes: MyST-NB's ``glue`` in the book's build, a plain display elsewhere.

The pages quote values computed in their cells (MyST-NB's ``{glue:text}`` role). MyST-NB's ``myst_nb.glue``
stores each value in the cell's output, where the build finds it. MyST-NB comes with the book's build
(``requirements.txt``), not with the package: a reader who opens a chapter in Colab, in a plain Jupyter or on a GPU
machine has ``companion`` and its dependencies only. There :func:`glue` shows the value when asked to
(``display=True``) and otherwise leaves it out, so that every chapter runs with the package's dependencies alone and
its cells compute the same numbers either way.
"""

from __future__ import annotations

__all__ = ["glue"]


def glue(name: str, value: object, display: bool = True) -> None:
    """Keep ``value`` under ``name`` for the page's ``{glue}`` roles (every chapter's quoted numbers, e.g.
    :ref:`ch-uniform-concentration`'s fitted exponents).

    With MyST-NB installed this is ``myst_nb.glue`` itself. Without it the value is displayed when ``display``
    is true (through IPython's display in a notebook, ``print`` elsewhere) and dropped otherwise: the text that
    quotes it exists only in the built page.

    Parameters
    ----------
    name : str
        The key the page's ``{glue}`` roles use; a non-empty string.
    value : object
        What to keep: a number, a string, a figure, a table.
    display : bool
        Whether to show the value in the cell's output as well (MyST-NB's meaning).

    Raises
    ------
    ValueError
        If ``name`` is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"glue: name must be a non-empty string, got {name!r}")
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            try:
                from IPython.display import display as show
            except ImportError:
                show = print
            show(value)
        return
    myst_glue(name, value, display=display)
