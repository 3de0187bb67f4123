"""Interactive explorers: turn a knob, rerun a small experiment, see the figure change.

Usage in a chapter (the call is the whole of its cell, or at least its last line)::

    from companion import explore

    def saddle_figure(sigma, k, activation):       # keyword arguments named like the controls
        ...                                         # a *small* experiment (≲ 2 s on a laptop CPU)
        return fig                                  # a matplotlib Figure

    explore.explorer(saddle_figure,
                     sigma=explore.LogSlider(1e-3, 1.0, value=0.1),
                     k=explore.Slider(1, 8, step=1, value=2),
                     activation=explore.Choice(["relu", "tanh"], value="relu"))

Two modes, and how the companion tells them apart (:func:`mode`):

* ``static`` — ``fn`` runs once with the controls' default values and the cell shows that figure plus a one-line
  note naming the knobs; no widget is created, so no widget state or ``widget-view`` output ever reaches a
  notebook's outputs. This is what the website (built by myst-nb through nbclient), the nbval test run and plain
  ``python`` scripts get. A widget on a static page could only be a dead placeholder: myst-nb renders a widget
  output as a ``<script type="application/vnd.jupyter.widget-view+json">`` tag that needs the saved widget state
  *and* the ipywidgets HTML manager from a CDN, and even then nothing reruns ``fn`` without a kernel.
* ``live`` — ipywidgets controls above an output area; every change reruns ``fn`` and redraws. This is what a
  reader gets in Jupyter (Lab/Notebook/VS Code) and in Colab.

The decision, first match wins:

1. the environment variable ``COMPANION_WIDGETS`` = ``static`` or ``live`` (``auto`` or unset: go on). The
   Makefile's ``book`` and ``test`` targets set ``COMPANION_WIDGETS=static``;
2. ``google.colab`` imported (a Colab runtime) → ``live``;
3. not inside an IPython *kernel* (a script, a terminal IPython) → ``static``;
4. inside a kernel, the cell being run by a client that cannot answer ``input()`` → ``static``. Headless
   executors (nbclient, used by myst-nb/jupyter-book; nbval; nbconvert ``--execute``) send their
   ``execute_request`` with ``allow_stdin=False``, whereas every interactive frontend (JupyterLab, Notebook,
   VS Code, Colab) sends ``allow_stdin=True``; ipykernel stores the flag as ``kernel._allow_stdin``. So a
   build without the environment variable still produces the static page;
5. otherwise → ``live`` (falling back to ``static`` with a note when ipywidgets is not installed).

Used by the saddle/failure chapters (init scale σ, k) and the rate chapter (L, init scale); see
``tests/unit/test_explore.py``.
"""

from __future__ import annotations

import html
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

ENV_VAR = "COMPANION_WIDGETS"
MODES = ("static", "live")

__all__ = ["ENV_VAR", "LogSlider", "Slider", "Choice", "Explorer", "explorer", "mode"]


# --------------------------------------------------------------------------------------------- controls
def _finite(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class LogSlider:
    """A positive real knob on a logarithmic scale, ``lo ≤ value ≤ hi`` with ``0 < lo < hi``.

    The initialisation scale σ of :ref:`ch-landscape`, :ref:`ch-failures` and :ref:`ch-rate`, for instance.

    Parameters
    ----------
    lo, hi : float
        The range, ``0 < lo < hi``.
    value : float
        The default, shown on the static page, in ``[lo, hi]``.

    Raises
    ------
    ValueError
        When a bound or the value is not a finite number, ``0 < lo < hi`` fails, or the value lies outside.
    """

    lo: float
    hi: float
    value: float

    def __post_init__(self):
        lo, hi, v = _finite("LogSlider lo", self.lo), _finite("LogSlider hi", self.hi), _finite("LogSlider value", self.value)
        if not 0 < lo < hi:
            raise ValueError(f"LogSlider needs 0 < lo < hi, got lo={self.lo!r}, hi={self.hi!r}")
        if not lo <= v <= hi:
            raise ValueError(f"LogSlider value {self.value!r} is outside [lo, hi] = [{self.lo!r}, {self.hi!r}]")

    def describe(self) -> str:
        """The range, for the static page.

        Returns
        -------
        str
            The range and its scale, e.g. ``"0.01 … 10 (log scale)"``.
        """
        return f"{self.lo:g} … {self.hi:g} (log scale)"

    def widget(self, name: str):
        """The ipywidgets control of the knob.

        Parameters
        ----------
        name : str
            The knob's label.

        Returns
        -------
        ipywidgets.FloatLogSlider
            A slider over ``[lo, hi]`` on a base-10 scale, at about 20 stops per decade (at least 50), set to ``value``.
        """
        import ipywidgets as w

        lo, hi = math.log10(self.lo), math.log10(self.hi)
        # ~ 20 stops per decade, at least 50 in all
        step = (hi - lo) / max(50, round(20 * (hi - lo)))
        return w.FloatLogSlider(
            value=self.value,
            base=10,
            min=lo,
            max=hi,
            step=step,
            description=name,
            readout_format=".3g",
            continuous_update=False,
            style={"description_width": "initial"},
        )


@dataclass(frozen=True)
class Slider:
    """A real (or, when ``lo``, ``step`` and ``value`` are all ints, an integer) knob on a linear scale.

    The width ``k`` of :ref:`ch-failures` or the depth ``L`` of :ref:`ch-rate`, for instance.

    Parameters
    ----------
    lo, hi : float or int
        The range, ``lo < hi``.
    step : float or int
        The grid's spacing, ``> 0``.
    value : float or int
        The default, on the grid ``lo + k·step`` inside ``[lo, hi]``.

    Raises
    ------
    ValueError
        When a number is not finite, ``lo < hi`` or ``step > 0`` fails, or the value lies outside or off the grid.
    """

    lo: float
    hi: float
    step: float
    value: float

    def __post_init__(self):
        lo, hi = _finite("Slider lo", self.lo), _finite("Slider hi", self.hi)
        step, v = _finite("Slider step", self.step), _finite("Slider value", self.value)
        if not lo < hi:
            raise ValueError(f"Slider needs lo < hi, got lo={self.lo!r}, hi={self.hi!r}")
        if not step > 0:
            raise ValueError(f"Slider step must be > 0, got {self.step!r}")
        if not lo <= v <= hi:
            raise ValueError(f"Slider value {self.value!r} is outside [lo, hi] = [{self.lo!r}, {self.hi!r}]")
        k = (v - lo) / step
        if abs(k - round(k)) > 1e-6:
            raise ValueError(f"Slider value {self.value!r} is not on the grid lo + k*step (lo={self.lo!r}, step={self.step!r})")

    @property
    def integer(self) -> bool:
        return all(isinstance(x, int) and not isinstance(x, bool) for x in (self.lo, self.step, self.value))

    def describe(self) -> str:
        """The range, for the static page.

        Returns
        -------
        str
            The range and its step, e.g. ``"1 … 8 (step 1)"``.
        """
        return f"{self.lo:g} … {self.hi:g} (step {self.step:g})"

    def widget(self, name: str):
        """The ipywidgets control of the knob.

        Parameters
        ----------
        name : str
            The knob's label.

        Returns
        -------
        ipywidgets.IntSlider or ipywidgets.FloatSlider
            A slider over ``[lo, hi]`` in steps of ``step``, set to ``value`` (an ``IntSlider`` for an integer knob).
        """
        import ipywidgets as w

        cls = w.IntSlider if self.integer else w.FloatSlider
        kw = dict(
            value=self.value,
            min=self.lo,
            max=self.hi,
            step=self.step,
            description=name,
            continuous_update=False,
            style={"description_width": "initial"},
        )
        if not self.integer:
            kw["readout_format"] = ".3g"
        return cls(**kw)


@dataclass(frozen=True)
class Choice:
    """One of a few named options (activation functions, loss variants, …).

    Parameters
    ----------
    options : list or tuple
        The options (at least one), shown by their ``str``; stored as a tuple.
    value : object
        The default, one of ``options``.

    Raises
    ------
    ValueError
        When ``options`` is a string or not a list or tuple, is empty, or does not contain ``value``.
    """

    options: Sequence[Any]
    value: Any

    def __post_init__(self):
        if isinstance(self.options, (str, bytes)) or not isinstance(self.options, Sequence):
            raise ValueError(f"Choice options must be a list or tuple, got {self.options!r}")
        if len(self.options) == 0:
            raise ValueError("Choice needs at least one option")
        if self.value not in self.options:
            raise ValueError(f"Choice value {self.value!r} is not one of the options {list(self.options)!r}")
        object.__setattr__(self, "options", tuple(self.options))

    def describe(self) -> str:
        """The options, for the static page.

        Returns
        -------
        str
            The options in braces, e.g. ``"{tanh, relu}"``.
        """
        return "{" + ", ".join(map(str, self.options)) + "}"

    def widget(self, name: str):
        """The ipywidgets control of the knob.

        Parameters
        ----------
        name : str
            The knob's label.

        Returns
        -------
        ipywidgets.ToggleButtons or ipywidgets.Dropdown
            Toggle buttons for up to four short options (40 characters in all), a dropdown otherwise; set to ``value``.
        """
        import ipywidgets as w

        labels = [(str(o), o) for o in self.options]
        if len(self.options) <= 4 and sum(len(l) for l, _ in labels) <= 40:
            return w.ToggleButtons(
                options=labels, value=self.value, description=name, style={"description_width": "initial", "button_width": "auto"}
            )
        return w.Dropdown(options=labels, value=self.value, description=name, style={"description_width": "initial"})


Control = (LogSlider, Slider, Choice)


# ------------------------------------------------------------------------------------------------- mode
def _kernel():
    """The running ipykernel (None outside a kernel)."""
    ip = sys.modules.get("IPython")
    if ip is None:
        return None
    try:
        shell = ip.get_ipython()
    except Exception:  # pragma: no cover - defensive
        return None
    return getattr(shell, "kernel", None) if shell is not None else None


def mode() -> str:
    """``"static"`` or ``"live"``: see the module docstring for the rules, in order.

    Decides how the explorers of :ref:`ch-landscape`, :ref:`ch-failures` and :ref:`ch-rate` appear.

    Returns
    -------
    str
        ``"static"`` (the website, the tests, scripts) or ``"live"`` (Jupyter, Colab).

    Raises
    ------
    ValueError
        When ``COMPANION_WIDGETS`` is set to something other than ``static``, ``live`` or ``auto``.
    """
    env = os.environ.get(ENV_VAR, "auto").strip().lower()
    if env in MODES:
        return env
    if env not in ("", "auto"):
        raise ValueError(f"{ENV_VAR} must be one of static, live, auto; got {os.environ[ENV_VAR]!r}")
    if "google.colab" in sys.modules:
        return "live"
    kernel = _kernel()
    if kernel is None:
        return "static"
    if not getattr(kernel, "_allow_stdin", True):  # a headless executor (nbclient, nbval, nbconvert)
        return "static"
    return "live"


# --------------------------------------------------------------------------------------------- explorer
def _in_ipython() -> bool:
    ip = sys.modules.get("IPython")
    return ip is not None and ip.get_ipython() is not None


class Explorer:
    """An experiment ``fn(**values) -> Figure`` with named controls; see :func:`explorer`.

    Parameters
    ----------
    fn : callable, ``fn(**values) -> matplotlib.figure.Figure``
        The experiment, with one keyword argument per control.
    controls : dict of str to LogSlider, Slider or Choice
        The knobs, by the name of ``fn``'s argument (at least one).

    Raises
    ------
    ValueError
        When ``fn`` is not callable, there is no control, or a control is not a :class:`LogSlider`,
        :class:`Slider` or :class:`Choice`.
    """

    def __init__(self, fn: Callable[..., Any], controls: dict[str, Any]):
        if not callable(fn):
            raise ValueError(f"explorer needs a callable fn(**values) -> matplotlib Figure, got {fn!r}")
        if not controls:
            raise ValueError("explorer needs at least one control, e.g. sigma=LogSlider(1e-3, 1, value=0.1)")
        for name, c in controls.items():
            if not isinstance(c, Control):
                raise ValueError(f"control {name!r} must be a LogSlider, Slider or Choice, got {type(c).__name__}")
        self.fn, self.controls = fn, dict(controls)
        self.widgets: dict[str, Any] = {}
        self.box = None
        self.output = None
        self.mode = "static"
        self._shown = False

    @property
    def defaults(self) -> dict[str, Any]:
        """The controls' default values, ``{name: value}``."""
        return {k: c.value for k, c in self.controls.items()}

    def figure(self, **overrides):
        """Run ``fn`` with the defaults updated by ``overrides``; returns its matplotlib Figure.

        Parameters
        ----------
        ``**overrides``
            Values for some of the controls, by name.

        Returns
        -------
        matplotlib.figure.Figure
            What ``fn`` drew.

        Raises
        ------
        ValueError
            When an override names no control, or ``fn`` does not return a Figure.
        """
        from matplotlib.figure import Figure

        unknown = set(overrides) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; the controls are {sorted(self.controls)}")
        fig = self.fn(**{**self.defaults, **overrides})
        if not isinstance(fig, Figure):
            raise ValueError(f"explorer's fn must return a matplotlib Figure, got {type(fig).__name__}")
        return fig

    def note(self) -> str:
        """One line for the static page: which knobs there are and which values are shown.

        Returns
        -------
        str
            ``Interactive in Jupyter or Colab (…): <name> ∈ <range>; …. Shown here: <name> = <default>, ….``
        """
        knobs = "; ".join(f"{k} ∈ {c.describe()}" for k, c in self.controls.items())
        shown = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in self.defaults.items())
        return f"Interactive in Jupyter or Colab (open this chapter's notebook): {knobs}. Shown here: {shown}."

    # -- display -------------------------------------------------------------------------------------
    def _show_static(self, reason: str = "") -> None:
        import matplotlib.pyplot as plt
        from IPython.display import HTML, display

        fig = self.figure()
        plt.close(fig)  # the inline backend would otherwise show it a second time at the end of the cell
        display(fig)
        text = self.note() + (f" ({reason})" if reason else "")
        display(HTML(f'<p class="companion-explorer-note">{html.escape(text)}</p>'))

    def _rerun(self, *_):
        import matplotlib.pyplot as plt
        from IPython.display import display

        values = {k: w.value for k, w in self.widgets.items()}
        with self.output:
            self.output.clear_output(wait=True)
            fig = self.figure(**values)
            plt.close(fig)
            display(fig)

    def _build_live(self):
        import ipywidgets as w

        self.widgets = {k: c.widget(k) for k, c in self.controls.items()}
        self.output = w.Output()
        for wid in self.widgets.values():
            wid.observe(self._rerun, names="value")
        self.box = w.VBox([w.HBox(list(self.widgets.values()), layout=w.Layout(flex_flow="row wrap")), self.output])
        self._rerun()
        return self.box

    def show(self) -> None:
        """Display the explorer in the current cell (static figure or live widgets, per :func:`mode`)."""
        self._shown = True
        self.mode = mode()
        if not _in_ipython():  # a plain script: draw the default figure the usual matplotlib way
            import matplotlib.pyplot as plt

            self.figure()
            plt.show()
            return
        if self.mode == "live":
            try:
                import ipywidgets  # noqa: F401
            except ImportError:
                self.mode = "static"
                self._show_static("install ipywidgets for the live version")
                return
            from IPython.display import display

            display(self._build_live())
        else:
            self._show_static()

    def _ipython_display_(self):
        # explorer() has already displayed it; as a cell's last expression it must not show twice
        if not self._shown:
            self.show()

    def __repr__(self) -> str:
        return f"Explorer({getattr(self.fn, '__name__', 'fn')}, {', '.join(self.controls)}; mode={self.mode})"


def explorer(fn: Callable[..., Any], /, **controls) -> Explorer:
    """Show an interactive explorer of ``fn`` (static figure on the website and in tests, live in Jupyter/Colab).

    ``fn`` is a callable ``fn(**values) -> matplotlib.figure.Figure`` with one keyword argument per control; keep it
    small (≲ 2 s on a CPU): it reruns on every change. The controls are keyword arguments
    ``name=LogSlider(lo, hi, value)``, ``Slider(lo, hi, step, value)`` or ``Choice(options, value)``.

    Returns the :class:`Explorer` (already displayed when running under IPython; ``.show()`` shows it again).
    Raises ``ValueError`` on a non-callable ``fn``, no controls, a non-control argument, an out-of-range default,
    or when ``fn`` does not return a Figure.

    The explorers of :ref:`ch-landscape` (init scale σ, perturbation ε), :ref:`ch-failures` (σ, width ``k``) and
    :ref:`ch-rate` (depth ``L``, init scale).

    Parameters
    ----------
    fn : callable, ``fn(**values) -> matplotlib.figure.Figure``
        The experiment, positional only; one keyword argument per control.
    ``**controls`` : LogSlider, Slider or Choice
        The knobs, named like ``fn``'s arguments.

    Returns
    -------
    Explorer
        The explorer, shown in the current cell under IPython.

    Raises
    ------
    ValueError
        On a non-callable ``fn``, no controls or a non-control argument (at once), or when ``fn`` does not return a
        Figure (when it is shown).

    Examples
    --------
    Outside IPython nothing is displayed; the explorer still draws its default figure:

    >>> from matplotlib.figure import Figure
    >>> from companion import explore
    >>> def line(slope):
    ...     fig = Figure()
    ...     fig.add_subplot().plot([0, 1], [0, slope])
    ...     return fig
    >>> ex = explore.explorer(line, slope=explore.Slider(1, 4, step=1, value=2))
    >>> print(ex.note())
    Interactive in Jupyter or Colab (open this chapter's notebook): slope ∈ 1 … 4 (step 1). Shown here: slope = 2.
    >>> isinstance(ex.figure(slope=3), Figure)
    True
    """
    ex = Explorer(fn, controls)
    if _in_ipython():
        ex.show()
    return ex
