"""companion.explore: controls validate their input, the static/live decision follows the documented rules,
the live explorer reruns fn on a change, and a notebook executed headlessly (as myst-nb and nbval do) gets a
static figure and never a widget output — without any environment variable telling it so."""

from __future__ import annotations

import sys
import types

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from companion import explore  # noqa: E402
from companion.explore import Choice, LogSlider, Slider  # noqa: E402


def _fig(sigma=0.1, k=2, act="relu"):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, sigma * k])
    ax.set_title(act)
    return fig


CONTROLS = dict(
    sigma=LogSlider(1e-3, 1.0, value=0.1), k=Slider(1, 8, step=1, value=2), act=Choice(["relu", "tanh"], value="relu")
)


# ----------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: LogSlider(0.0, 1.0, 0.5), "0 < lo < hi"),
        (lambda: LogSlider(-1.0, 1.0, 0.5), "0 < lo < hi"),
        (lambda: LogSlider(1.0, 0.1, 0.5), "0 < lo < hi"),
        (lambda: LogSlider(1e-3, 1.0, 2.0), "outside"),
        (lambda: LogSlider(1e-3, float("inf"), 0.1), "finite"),
        (lambda: Slider(0, 1, 0, 0), "step must be > 0"),
        (lambda: Slider(2, 1, 1, 1), "lo < hi"),
        (lambda: Slider(0, 10, 1, 11), "outside"),
        (lambda: Slider(0, 1, 0.25, 0.3), "not on the grid"),
        (lambda: Slider(0, "1", 1, 0), "finite number"),
        (lambda: Choice([], None), "at least one"),
        (lambda: Choice("relu", "r"), "list or tuple"),
        (lambda: Choice(["relu", "tanh"], "gelu"), "not one of"),
        (lambda: explore.Explorer(42, CONTROLS), "callable"),
        (lambda: explore.Explorer(_fig, {}), "at least one control"),
        (lambda: explore.Explorer(_fig, {"sigma": 0.1}), "must be a LogSlider"),
    ],
)
def test_bad_input_raises_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_fn_must_return_a_figure_and_overrides_must_be_known():
    ex = explore.Explorer(lambda **v: None, dict(CONTROLS))
    with pytest.raises(ValueError, match="must return a matplotlib Figure"):
        ex.figure()
    ex = explore.Explorer(_fig, dict(CONTROLS))
    with pytest.raises(ValueError, match="unknown control"):
        ex.figure(L=3)


def test_figure_uses_defaults_and_overrides():
    ex = explore.Explorer(_fig, dict(CONTROLS))
    assert ex.defaults == {"sigma": 0.1, "k": 2, "act": "relu"}
    fig = ex.figure(act="tanh", k=4)
    assert fig.axes[0].get_title() == "tanh"
    assert fig.axes[0].lines[0].get_ydata()[1] == pytest.approx(0.4)
    plt.close(fig)
    note = ex.note()
    assert "sigma ∈ 0.001 … 1 (log scale)" in note and "act = relu" in note and "k = 2" in note


def test_integer_slider_gives_int_widget_and_float_slider_float_widget():
    import ipywidgets as w

    assert isinstance(Slider(1, 8, 1, 2).widget("k"), w.IntSlider)
    assert isinstance(Slider(0.0, 1.0, 0.1, 0.5).widget("t"), w.FloatSlider)
    log = LogSlider(1e-3, 10.0, 0.1).widget("s")
    assert isinstance(log, w.FloatLogSlider) and log.value == pytest.approx(0.1)


# ------------------------------------------------------------------------------------------------ mode
class _Shell:
    def __init__(self, allow_stdin):
        self.kernel = types.SimpleNamespace(_allow_stdin=allow_stdin)


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(explore.ENV_VAR, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    return monkeypatch


def test_mode_outside_ipython_is_static(clean_env):
    import IPython

    clean_env.setattr(IPython, "get_ipython", lambda: None)
    assert explore.mode() == "static"


def test_mode_headless_kernel_is_static_interactive_kernel_is_live(clean_env):
    import IPython

    clean_env.setattr(IPython, "get_ipython", lambda: _Shell(allow_stdin=False))
    assert explore.mode() == "static"  # nbclient / nbval / nbconvert --execute
    clean_env.setattr(IPython, "get_ipython", lambda: _Shell(allow_stdin=True))
    assert explore.mode() == "live"  # JupyterLab, Notebook, VS Code


def test_mode_colab_is_live_and_env_var_wins(clean_env):
    import IPython

    clean_env.setattr(IPython, "get_ipython", lambda: _Shell(allow_stdin=False))
    clean_env.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    assert explore.mode() == "live"
    clean_env.setenv(explore.ENV_VAR, "static")
    assert explore.mode() == "static"
    clean_env.delitem(sys.modules, "google.colab")
    clean_env.setenv(explore.ENV_VAR, "LIVE")
    assert explore.mode() == "live"
    clean_env.setenv(explore.ENV_VAR, "sometimes")
    with pytest.raises(ValueError, match=explore.ENV_VAR):
        explore.mode()


# ------------------------------------------------------------------------------------------------ live
def test_live_explorer_reruns_fn_on_change():
    calls = []

    def fn(**v):
        calls.append(v)
        return _fig(**v)

    ex = explore.Explorer(fn, dict(CONTROLS))
    box = ex._build_live()
    assert calls == [{"sigma": 0.1, "k": 2, "act": "relu"}]
    assert set(ex.widgets) == {"sigma", "k", "act"} and box.children[1] is ex.output
    ex.widgets["k"].value = 5
    ex.widgets["act"].value = "tanh"
    assert calls[-1] == {"sigma": 0.1, "k": 5, "act": "tanh"} and len(calls) == 3
    assert not plt.get_fignums(), "every redraw closes its figure"


def test_explorer_outside_ipython_does_not_display():
    ex = explore.explorer(_fig, **CONTROLS)
    assert isinstance(ex, explore.Explorer) and ex.widgets == {}


# -------------------------------------------------------------------- headless execution, as the book build
NOTEBOOK_CELLS = [
    "import matplotlib.pyplot as plt\nfrom companion import explore\n"
    "def fn(sigma, k):\n    fig, ax = plt.subplots()\n    ax.plot([0, 1], [0, sigma * k])\n    return fig\n",
    "explore.explorer(fn, sigma=explore.LogSlider(1e-3, 1.0, value=0.1), k=explore.Slider(1, 8, step=1, value=2))",
    "print(explore.mode())",
]


@pytest.mark.parametrize("env", [None, "static"])
def test_headless_execution_shows_one_static_figure_and_no_widget(monkeypatch, env):
    """What myst-nb (through nbclient) and nbval see, with and without COMPANION_WIDGETS set."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if env is None:
        monkeypatch.delenv(explore.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(explore.ENV_VAR, env)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[1].outputs
    mimes = [m for o in outputs for m in o.get("data", {})]
    assert mimes.count("image/png") == 1, mimes
    assert not any("widget" in m for m in mimes), mimes
    assert any("Interactive in Jupyter or Colab" in o.get("data", {}).get("text/html", "") for o in outputs)
    assert nb.cells[2].outputs[0]["text"].strip() == "static"
    assert not nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state")
