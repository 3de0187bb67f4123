"""One figure style for the whole book, readable in the site's light and dark themes.

Figures are drawn on an opaque white background (dark theme shows them as white cards, never black text
on a dark page), with labelled axes; :func:`use_style` is called by every chapter.
"""
from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt

PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]  # Okabe-Ito


def use_style() -> None:
    """Set the book's matplotlib style (opaque white figures, colour-blind-safe palette, grids)."""
    mpl.rcParams.update({
        "figure.facecolor": "white", "axes.facecolor": "white", "savefig.facecolor": "white",
        "savefig.transparent": False, "figure.dpi": 100, "savefig.dpi": 110,
        "axes.prop_cycle": mpl.cycler(color=PALETTE), "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "font.size": 10, "axes.titlesize": 10,
        "legend.frameon": False, "figure.constrained_layout.use": True,
        "text.color": "black", "axes.labelcolor": "black", "xtick.color": "black", "ytick.color": "black",
    })


def subplots(nrows: int = 1, ncols: int = 1, *, width: float = 4.0, height: float = 3.2, **kw):
    """``plt.subplots`` with the book's style and a per-panel size in inches."""
    use_style()
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
