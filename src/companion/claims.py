"""The claim check that ends every chapter: a table (claim · paper · threshold · measured · verdict), an
``assert``, a negative control per value row, and a provenance record.

Usage in a chapter::

    check = claims.ClaimCheck("Chapter 9: when training fails", chapter="09_failures")
    # a bound: the paper's inequality with the paper's constant
    check.add("Lemma 11: sup ratio ≤ δ̂", refs="B Lemma 11", source="'… ≤ δ̂ uniformly over (u, w)'",
              threshold="worst ratio ≤ 1 (the lemma's constant)", paper="≤ 1", measured=f"{r:.3f}", passed=r <= 1)
    # a value: the paper's value against an interval, with the nearest wrong value as negative control
    check.compare("decay rate of P(fail) in k", refs="B Section 3", source="'decays as e^{-k}'",
                  threshold="99 % t-interval of the fitted rate contains the value", paper="c = ln 2 (see erratum)",
                  measured=str(fit), expected=math.log(2), wrong=1.0, test=fit.contains, erratum="c = 1")
    check.report()                                  # shows the table, writes the record
    assert check.all_passed, check.failures()       # fails the chapter (and its nbval test) on a failed claim

Rules (CONTRIBUTING.md, "Claims"): every row states its source (the result's number and the paper's words) and
its threshold with the threshold's origin, both written *before* the experiment runs; a value row names the
nearest wrong value a reader might believe (``wrong=``), and ``COMPANION_FALSIFY=1`` swaps it in: the row's
verdict becomes the test's verdict on the wrong value, so a row that cannot tell the two apart shows up as a
control that passed (``tests/test_claims_robust.py`` runs every chapter that way). A row with ``erratum=`` tests
the *corrected* statement; the paper's contradicted statement is shown beside it and on the landing page.

Provenance: :meth:`ClaimCheck.report` embeds the rows as JSON in the table's HTML (the book build collects them
into ``claims.json`` and the landing and coverage pages) and, when ``COMPANION_CLAIMS_DIR`` is set, writes
``<dir>/<chapter>.seed<k>[.falsify].json``.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

_T0 = time.perf_counter()  # the chapter imports companion first: wall time is measured from here
_COMMIT: list[str] = []


def falsify() -> bool:
    """Whether ``COMPANION_FALSIFY=1``: every value row is judged on its negative control (its wrong value)."""
    raw = os.environ.get("COMPANION_FALSIFY", "0").strip()
    if raw not in ("0", "1", ""):
        raise ValueError(f"COMPANION_FALSIFY must be 0 or 1, got {raw!r}")
    return raw == "1"


def _commit() -> str:
    if not _COMMIT:
        value = os.environ.get("COMPANION_COMMIT", "")
        if not value:
            try:
                value = subprocess.run(
                    ["git", "rev-parse", "--short=12", "HEAD"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    cwd=Path(__file__).resolve().parent,
                ).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                value = ""
        _COMMIT.append(value or "unknown")
    return _COMMIT[0]


@dataclass
class Claim:
    """One row. ``passed`` is the verdict on the data; ``control_passed`` the same test's verdict on the
    nearest wrong value (``None`` for a bound row, whose slack is shown by the chapter's tightness probes)."""

    claim: str
    refs: list[str]
    source: str
    threshold: str
    paper: str
    measured: str
    passed: bool
    control: str | None = None
    control_passed: bool | None = None
    erratum: str | None = None
    value: float | None = None
    interval: list[float] | None = None

    @property
    def kind(self) -> str:
        return "erratum" if self.erratum else "holds"

    def verdict(self, falsified: bool = False) -> bool:
        """The row's verdict; under the falsify switch, the verdict of its negative control if it has one."""
        if falsified and self.control is not None:
            return bool(self.control_passed)
        return self.passed


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value.strip()


def _number(name: str, value: object) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)  # numpy scalars, 0-d tensors
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    return v


def _as_bool(name: str, value: object) -> bool:
    if hasattr(value, "item"):
        value = value.item()  # numpy.bool_, 0-d tensors
    if not isinstance(value, (bool, int)) or isinstance(value, int) and value not in (0, 1):
        raise ValueError(f"{name} must be a boolean outcome, got {value!r}")
    return bool(value)


@dataclass
class ClaimCheck:
    """Collects a chapter's claims, renders them as a table, asserts them, and records them."""

    title: str
    chapter: str = ""
    rows: list[Claim] = field(default_factory=list)

    def add(
        self,
        claim: str,
        *,
        refs: str | Sequence[str],
        source: str,
        threshold: str,
        paper: str,
        measured: str,
        passed: bool,
        control: tuple[str, bool] | None = None,
        erratum: str | None = None,
        value: float | None = None,
        interval: Sequence[float] | None = None,
    ) -> bool:
        """Record one claim and return its verdict.

        ``refs``: the numbered results it checks (ids of the coverage page, e.g. ``"A Lemma 4.5"``);
        ``source``: the paper's words; ``threshold``: the test and where its threshold comes from (the paper's
        constant, a stated statistical rule, float64 resolution); ``passed``: the outcome, a boolean computed from
        the data; ``control``: ``(wrong value, the same test's outcome on it)`` for a row that compares a measured
        rate, exponent, constant, probability or location with a value; ``erratum``: the paper's statement that the
        data contradict (the row then tests the corrected statement).
        """
        refs = [refs] if isinstance(refs, str) else list(refs)
        if not refs:
            raise ValueError("refs must name at least one result of the papers")
        for r in refs:
            _text("refs", r)
        if control is not None:
            if not (isinstance(control, tuple) and len(control) == 2):
                raise ValueError("control must be a pair (wrong value, the test's outcome on it)")
            control = (_text("control's wrong value", control[0]), _as_bool("control's outcome", control[1]))
        iv = None
        if interval is not None:
            iv = [_number("interval", x) for x in interval]
            if len(iv) != 2:
                raise ValueError(f"interval must be a pair (low, high), got {interval!r}")
        row = Claim(
            _text("claim", claim),
            refs,
            _text("source", source),
            _text("threshold", threshold),
            _text("paper", paper),
            _text("measured", measured),
            _as_bool("passed", passed),
            control=None if control is None else control[0],
            control_passed=None if control is None else control[1],
            erratum=None if erratum is None else _text("erratum", erratum),
            value=_number("value", value),
            interval=iv,
        )
        if any(r.claim == row.claim for r in self.rows):
            raise ValueError(f"two rows named {row.claim!r}: each row needs its own name")
        self.rows.append(row)
        return row.passed

    def compare(
        self,
        claim: str,
        *,
        refs: str | Sequence[str],
        source: str,
        threshold: str,
        paper: str,
        measured: str,
        test: Callable[[float], bool],
        expected: float,
        wrong: float,
        wrong_label: str | None = None,
        erratum: str | None = None,
        value: float | None = None,
        interval: Sequence[float] | None = None,
    ) -> bool:
        """A value row: ``passed = test(expected)`` and the negative control ``test(wrong)``.

        ``test`` is the acceptance rule decided before the run (e.g. ``fit.contains``: a 99 % interval contains the
        value); ``expected`` the value the row asserts (the paper's, or the corrected one of an erratum);
        ``wrong`` the nearest wrong value a reader might believe, which the rule must reject.
        """
        if not (math.isfinite(float(expected)) and math.isfinite(float(wrong))) or float(expected) == float(wrong):
            raise ValueError(f"expected and wrong must be distinct finite numbers, got {expected!r}, {wrong!r}")
        label = wrong_label or f"{float(wrong):.4g}"
        return self.add(
            claim,
            refs=refs,
            source=source,
            threshold=threshold,
            paper=paper,
            measured=measured,
            passed=test(float(expected)),
            control=(label, test(float(wrong))),
            erratum=erratum,
            value=value,
            interval=interval,
        )

    # ---------------------------------------------------------------------------------------- verdicts
    @property
    def all_passed(self) -> bool:
        """Every row holds (under ``COMPANION_FALSIFY=1``: every row holds with its negative control swapped in,
        which a sound check never does)."""
        falsified = falsify()
        return bool(self.rows) and all(r.verdict(falsified) for r in self.rows)

    def failures(self) -> str:
        """The failed claims with their measurements, one per line (the chapter's assertion message)."""
        if not self.rows:
            return f"{self.title}: no claims were checked"
        lines = [f"{self.title}: {r.claim} failed (paper: {r.paper}; measured: {r.measured})" for r in self.rows if not r.passed]
        if falsify():
            lines += [
                f"{self.title}: negative control of {r.claim!r}: the wrong value {r.control} is "
                f"{'accepted (the row cannot fail!)' if r.control_passed else 'rejected'}"
                for r in self.rows
                if r.control is not None
            ]
        return "\n".join(lines)

    # ---------------------------------------------------------------------------------------- records
    def records(self) -> list[dict]:
        """One provenance record per row (the fields of ``claims.json``)."""
        import torch

        from . import device, scale

        dev, dt = device.resolve()
        common = {
            "chapter": self.chapter or self.title,
            "title": self.title,
            "seed_offset": device.seed_offset(),
            "scale": scale.current(),
            "device": str(dev),
            "dtype": str(dt).replace("torch.", ""),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "commit": _commit(),
            "falsify": falsify(),
            "wall_s": round(time.perf_counter() - _T0, 1),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        }
        return [
            {**common, **asdict(r), "kind": r.kind, "verdict": ("erratum" if r.erratum else "holds") if r.passed else "fails"}
            for r in self.rows
        ]

    def write(self, directory: str | os.PathLike | None = None) -> Path | None:
        """Write the records to ``directory`` (default ``COMPANION_CLAIMS_DIR``; nothing when neither is set)."""
        directory = directory or os.environ.get("COMPANION_CLAIMS_DIR")
        if not directory:
            return None
        if not self.chapter:
            raise ValueError("ClaimCheck(chapter=...) is needed to write records")
        from . import device

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        out = path / f"{self.chapter}.seed{device.seed_offset()}{'.falsify' if falsify() else ''}.json"
        out.write_text(json.dumps(self.records(), indent=1, ensure_ascii=False))
        return out

    # ---------------------------------------------------------------------------------------- display
    def _repr_html_(self) -> str:
        falsified = falsify()
        head = "<tr><th>claim</th><th>paper says</th><th>threshold (origin)</th><th>measured</th><th>verdict</th></tr>"

        def mark(r: Claim) -> str:
            ok = r.verdict(falsified)
            if not ok:
                return "❌ fails" + (" (negative control)" if falsified and r.control is not None else "")
            return "⚠️ erratum: corrected statement holds" if r.erratum else "✅ holds"

        def paper_cell(r: Claim) -> str:
            said = html.escape(r.paper)
            if r.erratum:
                said = f"<s>{html.escape(r.erratum)}</s> → {said}"
            return f"{said}<br><small>{html.escape(', '.join(r.refs))}: {html.escape(r.source)}</small>"

        def measured_cell(r: Claim) -> str:
            out = html.escape(r.measured)
            if r.control is not None:
                verdict = "rejected" if not r.control_passed else "NOT rejected"
                out += f"<br><small>control {html.escape(r.control)}: {verdict}</small>"
            return out

        body = "".join(
            f"<tr><td>{html.escape(r.claim)}</td><td>{paper_cell(r)}</td><td>{html.escape(r.threshold)}</td>"
            f"<td>{measured_cell(r)}</td><td>{mark(r)}</td></tr>"
            for r in self.rows
        )
        data = json.dumps(self.records(), ensure_ascii=False).replace("</", "<\\/")
        return (
            f"<table class='claim-check'><caption>Claim check: {html.escape(self.title)}</caption>{head}{body}"
            f"</table><script type='application/json' class='companion-claims'>{data}</script>"
        )

    def __str__(self) -> str:
        falsified = falsify()
        lines = [f"Claim check: {self.title}"]
        for r in self.rows:
            tag = "PASS" if r.verdict(falsified) else "FAIL"
            extra = f" | control {r.control}: {'accepted' if r.control_passed else 'rejected'}" if r.control else ""
            err = f" | erratum of: {r.erratum}" if r.erratum else ""
            lines.append(
                f"  [{tag}] {r.claim} | paper: {r.paper} | threshold: {r.threshold} | measured: {r.measured}{extra}{err}"
            )
        return "\n".join(lines)

    def report(self) -> None:
        """Display the table (HTML in a notebook, text elsewhere) and write the records; the chapter asserts
        ``all_passed`` next."""
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
        """Raise ``AssertionError`` listing every failed claim (or none checked); for use outside a chapter."""
        assert self.all_passed, self.failures()


def load_records(directory: str | os.PathLike) -> list[dict]:
    """Every record written to ``directory`` by :meth:`ClaimCheck.write`, in file order."""
    out: list[dict] = []
    for path in sorted(Path(directory).glob("*.json")):
        out += json.loads(path.read_text())
    return out
