"""companion.plotting: the book's style and panel sizes, and figure cells that show the figure, not a stray artist's
repr, in a real kernel."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from companion import plotting  # noqa: E402


def test_subplots_gives_a_2d_grid_of_panels_of_the_given_size_in_the_book_style():
    fig, axes = plotting.subplots(2, 3, width=2.0, height=1.5, sharex=True)
    assert axes.shape == (2, 3) and tuple(fig.get_size_inches()) == pytest.approx((6.0, 3.0))
    assert matplotlib.rcParams["figure.facecolor"] == "white" and matplotlib.rcParams["axes.grid"]
    assert [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]][:2] == plotting.PALETTE[:2]
    one = plotting.subplots()[1]
    assert one.shape == (1, 1)
    plt.close("all")


def test_plotting_hides_stray_artist_reprs_but_not_figures():
    """companion.plotting.quiet_artist_reprs (via use_style): a figure cell ending in ax.legend() or
    fig.suptitle(...) shows the figure only, not `<matplotlib.legend.Legend at 0x...>`; other values still show."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        "from companion import plotting",
        "fig, axes = plotting.subplots(); axes[0, 0].plot([1, 2], label='a'); axes[0, 0].legend()",
        "fig, axes = plotting.subplots(); fig.suptitle('Figure 1.1')",
        "3",
        "fig",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    kinds = [[(o["output_type"], sorted(o.get("data", {}))) for o in c.outputs] for c in nb.cells[1:]]
    assert kinds[0] == [("display_data", ["image/png", "text/plain"])], kinds[0]
    assert kinds[1] == [("display_data", ["image/png", "text/plain"])], kinds[1]
    assert nb.cells[3].outputs[0]["data"]["text/plain"] == "3"
    assert "image/png" in nb.cells[4].outputs[0]["data"], "a Figure as the last expression must still display"
    assert plotting.quiet_artist_reprs() is False  # outside IPython: nothing to install
