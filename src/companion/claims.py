"""The claim check that ends every chapter: registered rows, their verdicts, an ``assert``, a negative control per
value row, and a provenance record.

The rules are data, registered before the data in ``book/claims/<short>.yml`` (:mod:`companion.registry`); the
chapter supplies the measurement and the test's logic. Usage, in the chapter labelled ``ch-failures``::

    check = claims.ClaimCheck("ch-failures")
    rule = check.rule("failures.xavier-rate")            # the registered rule: texts, numbers, revisions
    rate = stats.wilson(failures, runs, confidence=rule["confidence"])
    check.compare("failures.xavier-rate", measured=rate, test=rate.contains)   # expected and wrong: registered
    check.add("failures.lemma-11", measured=f"{worst:.3f}", passed=worst <= check.rule("failures.lemma-11")["limit"])
    check.report()                                       # shows the table, writes the record
    assert check.all_passed, check.failures()            # fails the chapter (and its nbval test) on a failed claim

``compare`` evaluates the registered rule at the expected value (the verdict) and at the wrong value (the negative
control); ``add`` takes an outcome computed by the chapter, and for a value row the outcome of the same test on the
wrong value (``control=``). A row that is not registered, a registered row that did not run at a scale where it is
declared, or a value row without its control fails the check.

``COMPANION_FALSIFY=1`` judges every row that has a control on its control instead: the chapter's check must then
fail, naming those rows (the test suite runs every chapter that way). A registered ``erratum`` marks a row that
tests the *corrected* statement; the paper's contradicted one is shown struck through beside it.

Provenance: :meth:`ClaimCheck.report` embeds the rows as JSON in the table's HTML (the book build collects them
into ``claims.json``, the landing table, the coverage page and the status page) and, when ``COMPANION_CLAIMS_DIR``
is set, writes ``<dir>/<label>.seed<k>[.falsify].json``.

Examples
--------
>>> from companion import claims, registry
>>> reg = registry.parse({"chapter": "ch-toy", "rows": [{
...     "id": "toy.mean", "claim": "the mean is 0", "refs": ["B Appendix A"], "kind": "value",
...     "source": "'E x = 0'", "paper": "0", "scales": ["quick", "paper"], "registered": "2026-12-01",
...     "rule": {"text": "the mean lies within 4 standard errors of the expected value",
...              "params": {"z": {"value": 4, "from": "a stated rule: 4 standard errors"}},
...              "expected": {"value": 0, "from": "symmetry"},
...              "wrong": {"value": 1, "from": "a shifted mean"}}}]})
>>> check = claims.ClaimCheck("ch-toy", registry=reg)
>>> z = check.rule("toy.mean")["z"]
>>> check.compare("toy.mean", measured="0.012 ± 0.016", test=lambda v: abs(0.012 - v) <= z * 0.016)
True
>>> check.all_passed
True
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import registry as _registry

__all__ = ["Claim", "ClaimCheck", "falsify", "load_records"]

_T0 = time.perf_counter()  # the chapter imports companion first: wall time is measured from here
_COMMIT: list[str] = []


def falsify() -> bool:
    """Whether ``COMPANION_FALSIFY=1``: every row with a control is judged on its control (its wrong value).

    The negative-control switch of every chapter's claim check (:ref:`ch-setup` is the first): under it a sound
    chapter fails.

    Returns
    -------
    bool
        ``True`` when ``COMPANION_FALSIFY=1``; ``False`` when it is ``0``, empty or unset.

    Raises
    ------
    ValueError
        When ``COMPANION_FALSIFY`` is set to anything else.
    """
    raw = os.environ.get("COMPANION_FALSIFY", "0").strip()
    if raw not in ("0", "1", ""):
        raise ValueError(f"COMPANION_FALSIFY must be 0 or 1, got {raw!r}")
    return raw == "1"


def _commit() -> str:
    """The commit the records come from: ``COMPANION_COMMIT``, else ``HEAD``'s short hash with ``+dirty`` appended
    when the package, the chapters or the registry differ from ``HEAD`` (then the code that ran is no commit)."""
    if not _COMMIT:
        value = os.environ.get("COMPANION_COMMIT", "")
        if not value:
            here = Path(__file__).resolve().parent
            try:
                run = dict(capture_output=True, text=True, timeout=10, cwd=here)
                value = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], **run).stdout.strip()
                if value:  # ":/" paths are relative to the repository's top
                    changed = subprocess.run(["git", "status", "--porcelain", "-uno", "--", ":/src", ":/book"], **run)
                    value += "+dirty" if changed.stdout.strip() else ""
            except (OSError, subprocess.SubprocessError):
                value = ""
        _COMMIT.append(value or "unknown")
    return _COMMIT[0]


@dataclass
class Claim:
    """One row as it ran: the registered rule's texts, the measurement and the verdicts.

    ``passed`` is the verdict on the data; ``control_passed`` the same test's verdict on the nearest wrong value
    (``None`` for a row without a control: a bound row, whose slack the chapter shows instead).

    Made by :meth:`ClaimCheck.add`; one row of a chapter's claim table and of ``claims.json``.

    Parameters
    ----------
    id, kind, claim, source, paper : str
        The registered row's id, kind and texts (placeholders filled).
    refs : list of str
        The results it checks.
    threshold : str
        The registered rule in words.
    measured : str
        What was measured, as shown.
    passed : bool
        The verdict on the data.
    control : str or None
        The wrong value the control tested (``None``: no control).
    control_passed : bool or None
        The rule's outcome on the wrong value (``False`` for a sound row).
    control_measured : str or None
        The control's own data, where it has some.
    erratum : str or None
        The paper's contradicted statement, for a row that tests a corrected one.
    value : float or None
        The point value of the measurement.
    interval : list of float, (2,), or None
        Its confidence interval ``[low, high]``.
    params : dict of str to str
        The rule's numbers as shown.
    expected : str or None
        The expected value as shown.
    registered : str
        The registration date.
    revisions : list of dict
        The rule's revisions (the fields of :class:`companion.registry.Revision`).
    fields : dict of str to str
        The values the chapter filled in the placeholders.
    replaces : list of dict
        The retired rows this one replaces (``id``, ``retired``, ``reason``): a redesign after a failure or a review
        shows its predecessors on the page, as a revision would.
    """

    id: str
    kind: str
    claim: str
    refs: list[str]
    source: str
    threshold: str
    paper: str
    measured: str
    passed: bool
    control: str | None = None
    control_passed: bool | None = None
    control_measured: str | None = None
    erratum: str | None = None
    value: float | None = None
    interval: list[float] | None = None
    params: dict[str, str] = field(default_factory=dict)
    expected: str | None = None
    registered: str = ""
    revisions: list[dict] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    replaces: list[dict] = field(default_factory=list)

    @property
    def revised_after_data(self) -> list[dict]:
        """The revisions made after seeing data."""
        return [r for r in self.revisions if r["after_data"]]

    def verdict(self, falsified: bool = False) -> bool:
        """The row's verdict; under the falsify switch, the verdict of its negative control if it has one.

        Parameters
        ----------
        falsified : bool
            Whether to judge the row on its control (:func:`falsify`).

        Returns
        -------
        bool
            ``control_passed`` when ``falsified`` and the row has a control, else ``passed``.
        """
        if falsified and self.control is not None:
            return bool(self.control_passed)
        return self.passed

    @property
    def outcome(self) -> str:
        """``holds``, ``erratum`` (the corrected statement holds) or ``fails``, on the data."""
        return ("erratum" if self.erratum else "holds") if self.passed else "fails"


def _as_bool(name: str, value: object) -> bool:
    if hasattr(value, "item"):
        value = value.item()  # numpy.bool_, 0-d tensors
    if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
        raise ValueError(f"{name} must be a boolean outcome, got {value!r}")
    return bool(value)


def _number(name: str, value: object) -> float | None:
    if value is None:
        return None
    try:
        return float(value)  # numpy scalars, 0-d tensors
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _measurement(measured) -> tuple[str, float | None, list[float] | None]:
    """The measured text, and the point value and interval of an estimate (a :class:`companion.stats.Estimate`, or
    anything with ``value`` and ``low``/``high``; its text is ``str(measured)``), or of a plain number."""
    if isinstance(measured, str):
        if not measured.strip():
            raise ValueError("measured must not be empty")
        return measured.strip(), None, None
    if isinstance(measured, (int, float)) and not isinstance(measured, bool):
        return f"{measured:.6g}", float(measured), None
    point = getattr(measured, "value", None)
    low, high = getattr(measured, "low", None), getattr(measured, "high", None)
    if point is None:
        raise ValueError(f"measured must be a text, a number or an estimate, got {type(measured).__name__}")
    if any(x is not None and getattr(x, "ndim", 0) != 0 for x in (point, low, high)):
        raise ValueError(f"measured must be a single estimate, got a vectorised one: {measured}")
    interval = None if low is None or high is None else [float(low), float(high)]
    return str(measured), float(point), interval


PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _format(text: str, fields: Mapping[str, object], where: str) -> str:
    """Fill the ``{name}`` placeholders of a registered text; other braces (``e^{-cd}``) stay, ``{{``/``}}`` are
    literal braces."""

    def fill(m: re.Match) -> str:
        if m.group(1) is None:
            return m.group(0)[0]
        if m.group(1) not in fields:
            raise ValueError(f"{where}: the registered text {text!r} needs fields={{{m.group(1)!r}: ...}}")
        return str(fields[m.group(1)])

    return PLACEHOLDER.sub(fill, text)


class ClaimCheck:
    """Collects a chapter's registered claims, renders them, asserts them, and records them.

    ``chapter``: the chapter's label (``"ch-failures"``); its rows are read from the registry
    (:func:`companion.registry.load`), or from ``registry`` when given (a parsed
    :class:`companion.registry.ChapterRegistry`, for tests).

    The claim check that ends every chapter (:ref:`ch-setup` is the first). The scale is read once, at
    construction (:func:`companion.scale.current`).

    Parameters
    ----------
    chapter : str
        The chapter's label.
    registry : ChapterRegistry or None
        The chapter's registry (``None``: :func:`companion.registry.load` of ``chapter``).
    title : str
        The caption of the table (default ``"Claim check"``).

    Raises
    ------
    ValueError
        When ``registry`` is another chapter's, ``chapter`` is not a label, or ``COMPANION_SCALE`` is malformed.
    FileNotFoundError
        When the chapter has no registry file.

    Examples
    --------
    >>> from companion import claims, registry
    >>> reg = registry.parse({"chapter": "ch-toy", "rows": [{
    ...     "id": "toy.bound", "claim": "the ratio is at most {limit}", "refs": ["A Lemma 4.1"], "kind": "bound",
    ...     "source": "'ratio ≤ 1'", "paper": "≤ 1", "scales": ["quick", "paper"], "registered": "2026-12-01",
    ...     "rule": {"text": "the largest ratio over the ensemble is at most {limit}",
    ...              "params": {"limit": {"value": 1, "from": "the lemma's constant"}}}}]})
    >>> check = claims.ClaimCheck("ch-toy", registry=reg)
    >>> check.missing(), check.all_passed
    (['toy.bound'], False)
    >>> worst = 0.42
    >>> check.add("toy.bound", measured=worst, passed=worst <= check.rule("toy.bound")["limit"])
    True
    >>> check.missing(), check.all_passed
    ([], True)
    >>> print(str(check).splitlines()[1].split(" | ")[0].strip())
    [PASS] toy.bound (bound) the ratio is at most 1
    """

    def __init__(self, chapter: str, *, registry: _registry.ChapterRegistry | None = None, title: str = "") -> None:
        self.registry = registry if registry is not None else _registry.load(chapter)
        if self.registry.label != chapter:
            raise ValueError(f"the registry given is {self.registry.label}'s, not {chapter}'s")
        self.chapter = chapter
        self.title = title or "Claim check"
        self.rows: list[Claim] = []
        from . import scale

        self.scale = scale.current()

    # ---------------------------------------------------------------------------------------- the rows
    def rule(self, row_id: str) -> _registry.Rule:
        """The registered rule of ``row_id``: its texts, its numbers (``rule["confidence"]``), its revisions.

        Parameters
        ----------
        row_id : str
            A registered row of the chapter.

        Returns
        -------
        companion.registry.Rule
            The row's rule.

        Raises
        ------
        KeyError
            When the row is not registered (or was retired).
        ValueError
            When the row is not declared at the current scale.
        """
        rule = self.registry[row_id]
        if not rule.runs_at(self.scale):
            raise ValueError(f"{row_id} is registered for scales {list(rule.scales)}, not {self.scale!r}")
        return rule

    def add(
        self,
        row_id: str,
        *,
        measured,
        passed: bool,
        control: bool | None = None,
        control_measured: str | None = None,
        fields: Mapping[str, object] | None = None,
        computed: Mapping[str, object] | None = None,
        value: float | None = None,
        interval=None,
    ) -> bool:
        """Record the verdict of the registered row ``row_id`` and return it.

        ``measured``: what was measured (a text, a number or an estimate of :mod:`companion.stats`); ``passed``: the
        outcome of the registered rule on the data, a boolean computed by the chapter; ``control``: the same rule's
        outcome on the registered wrong value (required for a value row whose wrong value is registered as a number
        or as ``computed``; a ``wrong`` with only a label names an alternative the row does not test, and the table
        says that no control was computed); ``control_measured``: what the control's data were, where it has data
        of its own (e.g. the success counts at ``n = d``), shown beside it; ``fields``: values for the ``{name}``
        placeholders of the registered texts (e.g. a loop's ``L``); ``computed``: the values of the rule's
        parameters that the registry says the chapter computes (``computed:``), shown with the rule's numbers.

        Parameters
        ----------
        row_id : str
            A registered row, declared at the current scale.
        measured : str, float or Estimate
            What was measured; an estimate's point value and interval go into the record.
        passed : bool
            The registered rule's outcome on the data (a numpy bool or a 0-d tensor is accepted).
        control : bool or None
            The rule's outcome on the registered wrong value (see above).
        control_measured : str or None
            The control's own data, shown beside it.
        fields : Mapping of str to object or None
            Values for the ``{name}`` placeholders of the registered texts.
        computed : Mapping of str to object or None
            Values of the parameters the chapter computes.
        value : float or None
            The point value to record, overriding the one taken from ``measured``.
        interval : pair of float or None
            The interval ``(low, high)`` to record, overriding the one taken from ``measured``.

        Returns
        -------
        bool
            ``passed``.

        Raises
        ------
        ValueError
            When the row is not declared at this scale, was already checked with the same fields, is a value row
            without ``control``, has a ``control`` but no registered wrong value, names a parameter the chapter does
            not compute, needs a field it was not given, or when ``measured``, ``passed``, ``control``, ``value`` or
            ``interval`` is malformed.
        KeyError
            When the row is not registered.

        Examples
        --------
        >>> from companion import claims, registry
        >>> reg = registry.parse({"chapter": "ch-toy", "rows": [{
        ...     "id": "toy.bound", "claim": "the ratio is at most {limit}", "refs": ["A Lemma 4.1"], "kind": "bound",
        ...     "source": "'ratio ≤ 1'", "paper": "≤ 1", "scales": ["quick", "paper"], "registered": "2026-12-01",
        ...     "rule": {"text": "the largest ratio over the ensemble is at most {limit}",
        ...              "params": {"limit": {"value": 1, "from": "the lemma's constant"}}}}]})
        >>> check = claims.ClaimCheck("ch-toy", registry=reg)
        >>> worst = 0.42
        >>> check.add("toy.bound", measured=worst, passed=worst <= check.rule("toy.bound")["limit"])
        True
        >>> check.rows[0].claim, check.rows[0].measured
        ('the ratio is at most 1', '0.42')
        """
        rule = self.rule(row_id)
        computed = {k: str(v) for k, v in (computed or {}).items()}
        for name in computed:
            if name not in rule.params or rule.params[name].value is not None:
                raise ValueError(f"{row_id}: {name!r} is not a parameter the registry says the chapter computes")
        fields = {**computed, **dict(fields or {})}
        shown = {k: str(v) for k, v in fields.items()}
        # the registered texts may name the rule's own numbers ("ratio ≤ {limit}") and the chapter's fields
        context = {k: _registry._show(q.value) for k, q in rule.params.items() if q.value is not None} | fields
        if any(r.id == row_id and r.fields == shown for r in self.rows):
            raise ValueError(f"{row_id} was checked twice" + (f" with the same fields {shown}" if shown else ""))
        tested = rule.wrong is not None and (rule.wrong.value is not None or rule.wrong.computed is not None)
        if rule.kind == "value" and control is None and tested:
            raise ValueError(f"{row_id} is a value row: pass control= (the rule's outcome on the wrong value)")
        if control is not None and rule.wrong is None:
            raise ValueError(f"{row_id}: a control was given but the registry names no wrong value (rule.wrong)")
        text, point, iv = _measurement(measured)
        if value is not None:
            point = _number("value", value)
        if interval is not None:
            iv = [_number("interval", x) for x in interval]
            if len(iv) != 2:
                raise ValueError(f"interval must be a pair (low, high), got {interval!r}")
        where = row_id
        wrong_label = None
        if rule.wrong is not None and (tested or control is not None):
            wrong_label = rule.wrong.label or (
                _registry._show(rule.wrong.value) if rule.wrong.value is not None else rule.wrong.computed
            )
            wrong_label = _format(wrong_label, context, where)
        row = Claim(
            id=row_id,
            kind=rule.kind,
            claim=_format(rule.claim, context, where),
            refs=list(rule.refs),
            source=rule.source,
            threshold=_format(rule.text, context, where),
            paper=_format(rule.paper, context, where),
            measured=text,
            passed=_as_bool("passed", passed),
            control=None if control is None else wrong_label,
            control_passed=None if control is None else _as_bool("control", control),
            control_measured=None if control_measured is None else str(control_measured),
            erratum=rule.erratum,
            value=point,
            interval=iv,
            params={
                k: (f"{computed[k]} ({q.computed}; {q.origin})" if k in computed else q.describe())
                for k, q in rule.params.items()
            },
            expected=None if rule.expected is None else _format(rule.expected.describe(), context, where),
            registered=rule.registered,
            revisions=[asdict(r) for r in rule.revisions],
            fields=shown,
            replaces=[
                {"id": t.id, "retired": t.retired, "reason": t.reason} for t in self.registry.retired if t.replaced_by == row_id
            ],
        )
        self.rows.append(row)
        return row.passed

    def compare(
        self,
        row_id: str,
        *,
        measured,
        test: Callable[[float], bool],
        expected: float | None = None,
        wrong: float | None = None,
        control_measured: str | None = None,
        fields: Mapping[str, object] | None = None,
        computed: Mapping[str, object] | None = None,
        value: float | None = None,
        interval=None,
    ) -> bool:
        """A value row: the verdict is ``test(expected)``, the negative control ``test(wrong)`` (with several registered
        wrong values, a tuple such as ``(0, 1)``: accepted when the test accepts any of them).

        ``test`` is the registered rule as code (e.g. ``fit.contains``: the interval contains the value). ``expected``
        and ``wrong`` come from the registry; pass them only where the registry says the chapter computes them
        (``computed:``), e.g. a prediction made from the chapter's own data. The module's example is a ``compare``.

        Parameters
        ----------
        row_id : str
            A registered value row with a registered ``wrong``.
        measured : str, float or Estimate
            What was measured (as in :meth:`add`).
        test : callable, ``test(float) -> bool``
            The registered rule: does the measurement agree with this value?
        expected, wrong : float or None
            Only where the registry says the chapter computes them; a registered number must not be contradicted.
        control_measured, fields, computed, value, interval
            As in :meth:`add`.

        Returns
        -------
        bool
            ``test(expected)``, the verdict.

        Raises
        ------
        ValueError
            When no wrong or expected value is registered, a computed one is missing or not finite, a registered one
            is contradicted, expected and wrong coincide, or :meth:`add` rejects the row.
        """
        rule = self.rule(row_id)
        if rule.wrong is None:
            raise ValueError(f"{row_id}: compare() needs a registered wrong value (rule.wrong)")
        exp = self._quantity(row_id, "expected", rule.expected, expected)
        wro = self._quantity(row_id, "wrong", rule.wrong, wrong)
        wrongs = wro if isinstance(wro, tuple) else (wro,)
        if exp in wrongs:
            raise ValueError(f"{row_id}: expected and wrong must be distinct, got {exp!r} twice")
        return self.add(
            row_id,
            measured=measured,
            passed=test(exp),
            control=any(test(w) for w in wrongs),
            control_measured=control_measured,
            fields=fields,
            computed=computed,
            value=value,
            interval=interval,
        )

    @staticmethod
    def _quantity(row_id: str, name: str, registered: _registry.Quantity | None, given: float | None) -> float:
        if registered is None:
            raise ValueError(f"{row_id}: no {name} value is registered (rule.{name})")
        if registered.value is not None:
            if given is not None and float(given) != registered.value:
                raise ValueError(f"{row_id}: {name} is registered as {registered.value:g}; the chapter passed {given!r}")
            return registered.value
        if given is None:
            raise ValueError(f"{row_id}: the registry says the chapter computes {name} ({registered.computed}): pass it")
        v = float(given)
        if not math.isfinite(v):
            raise ValueError(f"{row_id}: {name} must be finite, got {given!r}")
        return v

    # ---------------------------------------------------------------------------------------- verdicts
    def missing(self) -> list[str]:
        """Registered rows of this scale that were not checked.

        Returns
        -------
        list of str
            Their ids, in registry order.
        """
        ran = {r.id for r in self.rows}
        return [r.id for r in self.registry.at_scale(self.scale) if r.id not in ran]

    @property
    def all_passed(self) -> bool:
        """Every registered row of this scale ran and holds (under ``COMPANION_FALSIFY=1``: every row holds with its
        negative control swapped in, which a sound check never does)."""
        falsified = falsify()
        return bool(self.rows) and not self.missing() and all(r.verdict(falsified) for r in self.rows)

    def accepted_controls(self) -> list[str]:
        """The rows whose negative control was *not* rejected: the same rule with the registered wrong value swapped
        in passed too, so the data cannot tell the claim from its alternative. A chapter that asserts this list empty
        (besides :attr:`all_passed`) makes each control part of its verdict, as the rules' texts say ("… and excludes
        the wrong value").

        Returns
        -------
        list of str
            The ids, in the order the rows were checked (empty when every control was rejected).
        """
        return [r.id for r in self.rows if r.control is not None and r.control_passed]

    def failures(self) -> str:
        """The failed claims with their measurements, one per line (the chapter's assertion message).

        Returns
        -------
        str
            One line per missing row and per failed row; under :func:`falsify`, one per control too.
        """
        lines = [f"{self.chapter}: registered row {m} did not run at {self.scale} scale" for m in self.missing()]
        if not self.rows:
            return "\n".join(lines + [f"{self.chapter}: no claims were checked"])
        lines += [
            f"{self.chapter}: {r.id} {r.claim!r} failed (paper: {r.paper}; measured: {r.measured})"
            for r in self.rows
            if not r.passed
        ]
        if falsify():
            lines += [
                f"{self.chapter}: negative control of {r.claim!r}: the wrong value {r.control} is "
                f"{'accepted (the row cannot fail!)' if r.control_passed else 'rejected'}"
                for r in self.rows
                if r.control is not None
            ]
        return "\n".join(lines)

    # ---------------------------------------------------------------------------------------- records
    def records(self) -> list[dict]:
        """One provenance record per row (the fields of ``claims.json``).

        Returns
        -------
        list of dict
            The fields of :class:`Claim` and of the run (chapter, scale, seed offset, device, dtype, torch, python,
            commit, wall time, date, …), plus ``verdict``, ``revision_count`` and ``revised_after_data``.
        """
        import torch

        from . import device

        dev, dt = device.resolve()
        common = {
            "chapter": self.chapter,
            "title": self.title,
            "seed_offset": device.seed_offset(),
            "scale": self.scale,
            "device": str(dev),
            "dtype": str(dt).replace("torch.", ""),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "requested_dtype": (device.switched_to_float64() or (str(dt).replace("torch.", ""),))[0],
            "float64_reason": (device.switched_to_float64() or (None, None))[1],
            "commit": _commit(),
            "falsify": falsify(),
            "wall_s": round(time.perf_counter() - _T0, 1),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        }
        out = []
        for r in self.rows:
            rec = {**common, **asdict(r)}
            rec["verdict"] = r.outcome
            rec["revision_count"] = len(r.revisions)
            rec["revised_after_data"] = len(r.revised_after_data)
            out.append(rec)
        return out

    def write(self, directory: str | os.PathLike | None = None) -> Path | None:
        """Write the records to ``directory`` (default ``COMPANION_CLAIMS_DIR``; nothing when neither is set).

        Parameters
        ----------
        directory : str, PathLike or None
            The folder (created if needed).

        Returns
        -------
        Path or None
            ``<directory>/<label>.seed<k>[.falsify].json``, or ``None`` when nothing was written.
        """
        directory = directory or os.environ.get("COMPANION_CLAIMS_DIR")
        if not directory:
            return None
        from . import device

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        out = path / f"{self.chapter}.seed{device.seed_offset()}{'.falsify' if falsify() else ''}.json"
        out.write_text(json.dumps(self.records(), indent=1, ensure_ascii=False))
        return out

    # ---------------------------------------------------------------------------------------- display
    def _mark(self, r: Claim, falsified: bool) -> tuple[str, str]:
        if not r.verdict(falsified):
            return "fails", "❌ fails" + (" (negative control)" if falsified and r.control is not None else "")
        if r.erratum:
            return "erratum", "⚠️ erratum: corrected statement holds"
        return "holds", "✅ holds"

    def _row_html(self, r: Claim, falsified: bool) -> str:
        e = html.escape
        cls, mark = self._mark(r, falsified)
        kind = {"bound": "bound", "value": "value", "consistency": "consistency (machinery, not evidence)"}[r.kind]
        badges = [f"<span class='claim-kind claim-kind-{r.kind}'>{e(kind)}</span>"]
        after = r.revised_after_data
        if after:
            last = after[-1]
            badges.append(
                f"<span class='claim-revised'>rule revised after data, {e(last['date'])}"
                f"{'' if len(after) == 1 else f' ({len(after)} revisions)'}</span>"
            )
        elif r.revisions:
            badges.append(f"<span class='claim-revised-plain'>rule revised {e(r.revisions[-1]['date'])}</span>")
        if r.replaces:
            badges.append(
                f"<span class='claim-replaces'>replaces {len(r.replaces)} retired row{'s' if len(r.replaces) > 1 else ''}</span>"
            )
        measured = e(r.measured)
        if r.control is not None:
            seen = f" ({e(r.control_measured)})" if r.control_measured else ""
            measured += (
                f"<span class='claim-control'>control {e(r.control)}{seen}: "
                f"{'rejected' if not r.control_passed else 'NOT rejected'}</span>"
            )
        said = e(r.paper)
        if r.erratum:
            said = f"<s>{e(r.erratum)}</s> → {said}"
        details = [
            ("paper says", f"{said}<br><small>{e(', '.join(r.refs))}: {e(r.source)}</small>"),
            ("rule", e(r.threshold)),
        ]
        numbers = [f"{e(k)} = {e(v)}" for k, v in r.params.items()]
        if r.expected:
            numbers.insert(0, f"expected: {e(r.expected)}")
        if numbers:
            details.append(("its numbers", "<br>".join(numbers)))
        if r.control is not None:
            details.append(("negative control", f"{e(r.control)}: {'rejected' if not r.control_passed else 'accepted'}"))
        elif r.kind == "value":
            details.append(("negative control", "none computed for this row (the registry names the alternative)"))
        history = [f"registered {e(r.registered)}"] + [
            f"<b>{e(v['date'])}</b>{' (after data)' if v['after_data'] else ''}: {e(v['was'])} → {e(v['now'])}. "
            f"<i>Why:</i> {e(v['rationale'])} <i>Impact:</i> {e(v['impact'])}"
            for v in r.revisions
        ]
        details.append(("history", "<br>".join(history)))
        if r.replaces:
            details.append(
                (
                    "replaces",
                    "<br>".join(f"<code>{e(t['id'])}</code>, retired {e(t['retired'])}: {e(t['reason'])}" for t in r.replaces),
                )
            )
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in details)
        return (
            f"<details class='claim-row claim-{cls}' id='claim-{e(r.id)}'><summary>"
            f"<span class='claim-title'>{e(r.claim)}<span class='claim-badges'>{''.join(badges)}"
            f"<code class='claim-id'>{e(r.id)}</code></span></span>"
            f"<span class='claim-measured'>{measured}</span><span class='claim-verdict'>{mark}</span>"
            f"</summary><dl>{dl}</dl></details>"
        )

    def _repr_html_(self) -> str:
        falsified = falsify()
        head = (
            "<div class='claim-head'><span>claim</span><span>measured</span><span>verdict</span></div>"
            "<p class='claim-hint'>Click a row for the paper's words, the registered rule and its numbers, "
            "the negative control and the rule's history.</p>"
        )
        body = "".join(self._row_html(r, falsified) for r in self.rows)
        missing = "".join(
            f"<div class='claim-row claim-fails'>❌ registered row {html.escape(m)} did not run</div>" for m in self.missing()
        )
        data = json.dumps(self.records(), ensure_ascii=False).replace("</", "<\\/")
        return (
            f"<div class='claim-check'><div class='claim-caption'>{html.escape(self.title)}</div>{head}{body}"
            f"{missing}</div><script type='application/json' class='companion-claims'>{data}</script>"
        )

    def __str__(self) -> str:
        falsified = falsify()
        lines = [f"{self.title} ({self.chapter}, {self.scale} scale)"]
        for r in self.rows:
            tag = "PASS" if r.verdict(falsified) else "FAIL"
            seen = f" ({r.control_measured})" if r.control_measured else ""
            extra = f" | control {r.control}{seen}: {'accepted' if r.control_passed else 'rejected'}" if r.control else ""
            err = f" | erratum of: {r.erratum}" if r.erratum else ""
            rev = f" | revised after data: {len(r.revised_after_data)}" if r.revised_after_data else ""
            lines.append(
                f"  [{tag}] {r.id} ({r.kind}) {r.claim} | paper: {r.paper} | rule: {r.threshold} | "
                f"measured: {r.measured}{extra}{err}{rev}"
            )
        lines += [f"  [MISSING] {m}" for m in self.missing()]
        return "\n".join(lines)

    def report(self) -> None:
        """Display the table (HTML in a notebook, text elsewhere) and write the records; the chapter asserts
        ``all_passed`` next.

        Returns
        -------
        None
        """
        self.write()
        try:
            from IPython import get_ipython
            from IPython.display import display

            if get_ipython() is not None:
                display(self)
            else:
                print(self)
        except ImportError:  # pragma: no cover - IPython is a dependency of the book, not the package
            print(self)

    def assert_all(self) -> None:
        """Raise ``AssertionError`` listing every failed claim (or none checked); for use outside a chapter.

        Returns
        -------
        None

        Raises
        ------
        AssertionError
            With :meth:`failures` as its message, unless :attr:`all_passed`.
        """
        assert self.all_passed, self.failures()


def load_records(directory: str | os.PathLike) -> list[dict]:
    """Every record written to ``directory`` by :meth:`ClaimCheck.write`, in file order.

    The records the seed-robustness runs and the book build compare (every chapter writes some; :ref:`ch-setup`
    is the first).

    Parameters
    ----------
    directory : str or PathLike
        A folder of ``*.json`` record files.

    Returns
    -------
    list of dict
        The records of every file, files in name order.
    """
    out: list[dict] = []
    for path in sorted(Path(directory).glob("*.json")):
        out += json.loads(path.read_text())
    return out
