"""One figure style for the whole book, readable in the site's light and dark themes.

Figures are drawn on an opaque white background (dark theme shows them as white cards, never black text
on a dark page), with labelled axes; :func:`use_style` is called by every chapter.
"""

from __future__ import annotations

import sys

import matplotlib as mpl
import matplotlib.pyplot as plt

__all__ = ["PALETTE", "quiet_artist_reprs", "use_style", "subplots"]

PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]  # Okabe-Ito


def _display_nothing(obj) -> None:
    return None


def quiet_artist_reprs() -> bool:
    """Under IPython, stop a cell that ends in ``ax.legend()``, ``fig.suptitle(...)``, ``ax.axhline(...)`` … from
    printing the returned artist's repr (``<matplotlib.legend.Legend at 0x…>``, ``Text(0.5, 0.98, '…')``) under
    its figure, on the website as in Jupyter/Colab, as a trailing ``;`` would. Figures (and everything else)
    display as before; a *list* of artists (``ax.plot(...)`` as the last line) is not covered. Registered through
    IPython's ``ipython_display_formatter`` for a few matplotlib artist types. Called by :func:`use_style`.

    Returns
    -------
    bool
        Whether it was installed (``False`` outside IPython).
    """
    ip_mod = sys.modules.get("IPython")
    shell = ip_mod.get_ipython() if ip_mod is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage
    from matplotlib.legend import Legend
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.text import Text

    fmt = shell.display_formatter.ipython_display_formatter
    for cls in (Text, Legend, Line2D, Collection, Patch, AxesImage):  # never Figure: it must still display
        fmt.for_type(cls, _display_nothing)
    return True


def use_style() -> None:
    """Set the book's matplotlib style (opaque white figures, colour-blind-safe palette, grids) and, under IPython,
    :func:`quiet_artist_reprs`.

    Called by every chapter (:ref:`ch-setup` is the first), directly or through :func:`subplots`.

    Returns
    -------
    None
        ``matplotlib.rcParams`` are updated for the rest of the process.
    """
    quiet_artist_reprs()
    mpl.rcParams.update(
        {
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            "savefig.transparent": False,
            "figure.dpi": 100,
            "savefig.dpi": 110,
            "axes.prop_cycle": mpl.cycler(color=PALETTE),
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 10,
            "axes.titlesize": 10,
            "legend.frameon": False,
            "figure.constrained_layout.use": True,
            "text.color": "black",
            "axes.labelcolor": "black",
            "xtick.color": "black",
            "ytick.color": "black",
        }
    )


def subplots(nrows: int = 1, ncols: int = 1, *, width: float = 4.0, height: float = 3.2, **kw):
    """``plt.subplots`` with the book's style and a per-panel size in inches.

    The figures of every chapter (:ref:`ch-setup`'s Figure 1.1 is the first).

    Parameters
    ----------
    nrows, ncols : int
        The grid of panels.
    width, height : float
        The size of one panel in inches; the figure is ``(width·ncols, height·nrows)``.
    ``**kw``
        Passed on to ``matplotlib.pyplot.subplots`` (``sharex``, ``sharey``, …; not ``figsize`` or ``squeeze``).

    Returns
    -------
    tuple of (matplotlib.figure.Figure, numpy.ndarray)
        The figure and its axes, always a 2-d array ``(nrows, ncols)`` (``axes[0, 0]`` for a single panel).
    """
    use_style()
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
