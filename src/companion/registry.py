"""The claim registry: every claim row of every chapter, with its rule as data, fixed before the data.

Each chapter's rows are declared in ``book/claims/<short>.yml`` (``<short>`` is the chapter's label without its
``ch-`` prefix: the rows of :ref:`ch-failures` are in ``book/claims/failures.yml``). A row holds its stable id, the
results it checks (ids of ``book/coverage/*.yml``), the paper's words, its **kind** — ``bound`` (the paper's
inequality with the paper's constant), ``value`` (a measured rate, exponent, probability or location against a value,
with the nearest wrong value as its negative control) or ``consistency`` (an identity, or a check of the machinery:
counted, never evidence for a paper's claim) — its **rule** (the test in words, every number it uses with where the
number comes from, the expected and the wrong value), the scales it runs at, the date it was registered, and its
**revisions**: each change of the rule after the row first ran, with its date, the old and the new rule, the
rationale, the impact, and whether it was made after seeing data. Rows that are no longer asserted move to the
file's ``retired`` list, with their reason; an id is never reused.

A chapter's claim check (:class:`companion.claims.ClaimCheck`) reads its rows from here: the chapter supplies the
measurement and the test's logic, the registry the texts and the numbers. The registry's history is the history of
these files in git: ``tools/registry.py check`` (run by the test suite) fails when a row's rule changed between two
versions without a new revision entry, when a row disappeared without being retired, or when a revision was
rewritten. The test's logic lives in the chapter's code; a file's ``claim_code`` log records each change of the
chapter's claim-check cells (the cells that read a rule or add a row), by a fingerprint of their code, with what
changed and which rows' rules it changed (each such row carries the revision). The test suite fails when the cells'
fingerprint is not the log's last. The format, with a worked example, is in ``CONTRIBUTING.md`` ("The claim
registry").
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = [
    "KINDS",
    "SCALES",
    "Quantity",
    "Revision",
    "Rule",
    "Retired",
    "CodeChange",
    "ChapterRegistry",
    "RegistryError",
    "locate",
    "load",
    "load_all",
    "parse",
    "fingerprint",
]

KINDS = ("bound", "value", "consistency")
SCALES = ("quick", "paper")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*\.[a-z0-9][a-z0-9.\-]*$")
LABEL_RE = re.compile(r"^ch-[a-z0-9][a-z0-9-]*$")
ROW_KEYS = {
    "id", "claim", "refs", "kind", "source", "paper", "erratum", "rule", "scales", "registered", "revisions", "note",
}  # fmt: skip
RULE_KEYS = {"text", "params", "expected", "wrong"}
REVISION_KEYS = {"date", "after_data", "was", "now", "rationale", "impact", "commit"}
QUANTITY_KEYS = {"value", "computed", "label", "from"}
CODE_KEYS = {"date", "fingerprint", "change", "rules_changed"}
FINGERPRINT_RE = re.compile(r"^[0-9a-f]{12}$")


class RegistryError(ValueError):
    """A registry file that does not follow the format (the message names the file and the row)."""


def _show(value) -> str:
    return ", ".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"


@dataclass(frozen=True)
class Quantity:
    """A number of a rule: fixed (``value``) or computed by the chapter (``computed`` says how), with its origin.

    Made by :func:`parse` from a ``{value | computed, label, from}`` mapping of a registry file.

    Parameters
    ----------
    value : float, tuple of float, or None
        The registered number (a tuple for a range or a grid); ``None`` when the chapter computes it.
    computed : str or None
        How the chapter computes it.
    label : str or None
        A text shown instead of the number (a wrong value named but not tested).
    origin : str
        Where the number comes from (the paper's constant, a stated rule, …).
    """

    value: float | tuple[float, ...] | None
    computed: str | None
    label: str | None
    origin: str

    def describe(self) -> str:
        """``value`` (or what is computed), then where it comes from.

        Returns
        -------
        str
            ``"<label, value or computed> (<origin>)"``.
        """
        what = self.label or (_show(self.value) if self.value is not None else self.computed)
        return f"{what} ({self.origin})" if self.origin else str(what)


@dataclass(frozen=True)
class Revision:
    """One change of a rule after it first ran (a deviation from registration).

    Parameters
    ----------
    date : str
        ``YYYY-MM-DD``.
    after_data : bool
        Whether the change was made after seeing data.
    was, now : str
        The old and the new rule.
    rationale, impact : str
        Why it changed, and what the change did to the verdicts.
    commit : str
        The commit that made it (may be empty).
    """

    date: str
    after_data: bool
    was: str
    now: str
    rationale: str
    impact: str
    commit: str = ""


@dataclass(frozen=True)
class Rule:
    """One registered claim row: what it claims, the rule that decides it, and the rule's history.

    Made by :func:`parse`; a chapter reads it through :meth:`companion.claims.ClaimCheck.rule`, and
    ``rule["name"]`` is :meth:`param`.

    Parameters
    ----------
    id : str
        ``<short>.<slug>``, e.g. ``failures.xavier-rate``.
    chapter : str
        The chapter's label, e.g. ``ch-failures``.
    claim, source, paper : str
        The claim in words, the paper's words, and what the paper says the value is.
    refs : tuple of str
        The results it checks (ids of ``book/coverage/*.yml``).
    kind : str
        One of :data:`KINDS`.
    erratum : str or None
        The paper's contradicted statement, when the row tests a corrected one.
    text : str
        The rule in words.
    params : Mapping of str to Quantity
        The rule's numbers, by name.
    expected, wrong : Quantity or None
        The expected value and the nearest wrong value (a value row's negative control).
    scales : tuple of str
        The scales it runs at (of :data:`SCALES`).
    registered : str
        The date of registration, ``YYYY-MM-DD``.
    revisions : tuple of Revision
        The rule's changes after it first ran, in date order.
    note : str
        A remark shown with the row.
    fingerprint : str
        :func:`fingerprint` of the raw row.
    """

    id: str
    chapter: str
    claim: str
    refs: tuple[str, ...]
    kind: str
    source: str
    paper: str
    erratum: str | None
    text: str
    params: Mapping[str, Quantity]
    expected: Quantity | None
    wrong: Quantity | None
    scales: tuple[str, ...]
    registered: str
    revisions: tuple[Revision, ...] = ()
    note: str = ""
    fingerprint: str = ""

    def param(self, name: str) -> float | tuple[float, ...]:
        """The value of the rule's parameter ``name`` (a ``KeyError`` names the ones the registry has).

        Parameters
        ----------
        name : str
            A key of ``params``.

        Returns
        -------
        float or tuple of float
            The registered number (a tuple for a range or a grid).

        Raises
        ------
        KeyError
            When ``name`` is not registered, or is computed by the chapter.
        """
        if name not in self.params:
            raise KeyError(f"{self.id}: no parameter {name!r} registered (has: {', '.join(self.params) or 'none'})")
        q = self.params[name]
        if q.value is None:
            raise KeyError(f"{self.id}: parameter {name!r} is computed by the chapter ({q.computed}), not registered")
        return q.value

    def __getitem__(self, name: str) -> float:
        return self.param(name)

    @property
    def revised_after_data(self) -> tuple[Revision, ...]:
        """The revisions made after seeing data."""
        return tuple(r for r in self.revisions if r.after_data)

    def runs_at(self, scale: str) -> bool:
        """Whether the row is declared at ``scale`` (``"quick"`` or ``"paper"``).

        Parameters
        ----------
        scale : str
            A scale of :data:`SCALES`.

        Returns
        -------
        bool
            ``scale in self.scales``.
        """
        return scale in self.scales


@dataclass(frozen=True)
class Retired:
    """A row that ran once and is no longer asserted.

    Parameters
    ----------
    id : str
        Its id, never reused.
    claim : str
        What it claimed.
    retired : str
        The date it was retired, ``YYYY-MM-DD``.
    reason : str
        Why.
    replaced_by : str or None
        The id of the active row that replaces it.
    revisions : tuple of Revision
        Its revisions before it was retired.
    """

    id: str
    claim: str
    retired: str
    reason: str
    replaced_by: str | None = None
    revisions: tuple[Revision, ...] = ()


@dataclass(frozen=True)
class CodeChange:
    """One entry of a chapter's ``claim_code`` log: its claim-check cells as they are from ``date`` on.

    Parameters
    ----------
    date : str
        ``YYYY-MM-DD``.
    fingerprint : str
        12 hex digits: the hash of the cells' code (``tools/registry.py code`` computes it; comments and layout do
        not count).
    change : str
        What changed in the cells.
    rules_changed : tuple of str
        The rows whose rule the change changed; each has a revision of that date. Empty when no rule changed.
    """

    date: str
    fingerprint: str
    change: str
    rules_changed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChapterRegistry:
    """The registered rows of one chapter, in the order the chapter checks them.

    ``registry[row_id]`` is the :class:`Rule`; a ``KeyError`` says when the row was retired, or lists the rows.

    Parameters
    ----------
    label : str
        The chapter's label, e.g. ``ch-failures``.
    path : Path
        The registry file.
    rows : Mapping of str to Rule
        The active rows by id, in file order.
    retired : tuple of Retired
        The retired rows.
    claim_code : tuple of CodeChange
        The log of the chapter's claim-check cells, oldest first.
    """

    label: str
    path: Path
    rows: Mapping[str, Rule]
    retired: tuple[Retired, ...] = field(default=())
    claim_code: tuple[CodeChange, ...] = field(default=())

    def __getitem__(self, row_id: str) -> Rule:
        if row_id not in self.rows:
            retired = {r.id: r for r in self.retired}
            if row_id in retired:
                raise KeyError(f"{row_id} was retired on {retired[row_id].retired}: {retired[row_id].reason}")
            raise KeyError(f"{row_id} is not registered in {self.path.name} (rows: {', '.join(self.rows)})")
        return self.rows[row_id]

    def at_scale(self, scale: str) -> list[Rule]:
        """The rows declared at ``scale``, in order.

        Parameters
        ----------
        scale : str
            ``"quick"`` or ``"paper"``.

        Returns
        -------
        list of Rule
            The rows whose ``scales`` include ``scale``.
        """
        return [r for r in self.rows.values() if r.runs_at(scale)]


# ------------------------------------------------------------------------------------------------ parsing
def _fail(where: str, message: str):
    raise RegistryError(f"{where}: {message}")


def _text(where: str, raw: Mapping, key: str, *, optional: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        _fail(where, f"{key!r} must be a non-empty string, got {value!r}")
    return " ".join(value.split())


def _date(where: str, value) -> str:
    if isinstance(value, _dt.date):
        return value.isoformat()
    try:
        return _dt.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        _fail(where, f"dates are YYYY-MM-DD, got {value!r}")


def _quantity(where: str, raw) -> Quantity:
    if not isinstance(raw, Mapping):
        _fail(where, f"must be a mapping with 'value' or 'computed', and 'from'; got {raw!r}")
    extra = set(raw) - QUANTITY_KEYS
    if extra:
        _fail(where, f"unknown keys {sorted(extra)} (allowed: {sorted(QUANTITY_KEYS)})")
    value, computed, label = raw.get("value"), raw.get("computed"), raw.get("label")
    if value is not None:
        value = _number(where, value)
    if value is None and not computed and not label:
        _fail(where, "needs a 'value' (a number fixed before the run), or 'computed' (how the chapter computes it)")
    if value is not None and computed:
        _fail(where, "has both 'value' and 'computed': a number is either registered or computed")
    origin = raw.get("from")
    if not isinstance(origin, str) or not origin.strip():
        _fail(where, "needs 'from': where the number comes from (the paper's constant, a stated rule, ...)")
    return Quantity(value, computed and " ".join(str(computed).split()), label and " ".join(str(label).split()), origin)


def _number(where: str, value):
    """A number, or a list of numbers (a range, a grid), as floats."""
    if isinstance(value, (list, tuple)):
        if not value:
            _fail(where, "'value' is an empty list")
        return tuple(_number(where, v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        _fail(where, f"'value' must be a number or a list of numbers, got {value!r}")
    try:
        return float(value)
    except ValueError:
        _fail(where, f"'value' must be a number or a list of numbers, got {value!r}")


def fingerprint(raw_row: Mapping) -> str:
    """A hash of everything that decides a row's verdict: its kind, rule, scales and erratum.

    Two versions of a row with the same fingerprint judge the same data the same way; a change of the fingerprint
    must come with a new revision entry (``tools/registry.py check``). Whitespace in texts does not count.

    Parameters
    ----------
    raw_row : Mapping
        One row of a registry file as parsed from YAML (other keys than ``kind``, ``rule``, ``scales`` and
        ``erratum`` are ignored).

    Returns
    -------
    str
        16 hexadecimal digits (the start of a SHA-256).

    Examples
    --------
    >>> from companion import registry
    >>> a = registry.fingerprint({"kind": "bound", "rule": {"text": "ratio  ≤ 1"}, "scales": ["quick"]})
    >>> b = registry.fingerprint({"kind": "bound", "rule": {"text": "ratio ≤ 1"}, "scales": ["quick"], "note": "x"})
    >>> a == b, len(a)
    (True, 16)
    >>> a == registry.fingerprint({"kind": "bound", "rule": {"text": "ratio ≤ 2"}, "scales": ["quick"]})
    False
    """

    def norm(x):
        if isinstance(x, str):
            return " ".join(x.split())
        if isinstance(x, Mapping):
            return {str(k): norm(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
        if isinstance(x, (list, tuple)):
            return [norm(v) for v in x]
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, (_dt.date,)):
            return x.isoformat()
        return x

    core = {k: norm(raw_row.get(k)) for k in ("kind", "rule", "scales", "erratum")}
    return hashlib.sha256(json.dumps(core, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _revision(where: str, raw) -> Revision:
    if not isinstance(raw, Mapping):
        _fail(where, f"a revision is a mapping, got {raw!r}")
    extra = set(raw) - REVISION_KEYS
    if extra:
        _fail(where, f"unknown keys {sorted(extra)} (allowed: {sorted(REVISION_KEYS)})")
    if not isinstance(raw.get("after_data"), bool):
        _fail(where, "'after_data' must be true or false: was the change made after seeing data?")
    return Revision(
        _date(where, raw.get("date")),
        raw["after_data"],
        _text(where, raw, "was"),
        _text(where, raw, "now"),
        _text(where, raw, "rationale"),
        _text(where, raw, "impact"),
        str(raw.get("commit") or ""),
    )


def _rule(where: str, label: str, raw) -> Rule:
    if not isinstance(raw, Mapping):
        _fail(where, f"a row is a mapping, got {raw!r}")
    extra = set(raw) - ROW_KEYS
    if extra:
        _fail(where, f"unknown keys {sorted(extra)} (allowed: {sorted(ROW_KEYS)})")
    row_id = raw.get("id")
    short = label.removeprefix("ch-")
    if not isinstance(row_id, str) or not ID_RE.match(row_id) or not row_id.startswith(short + "."):
        _fail(where, f"id must be '{short}.<slug>' (lowercase letters, digits, '-', '.'), got {row_id!r}")
    where = f"{where} ({row_id})"
    kind = raw.get("kind")
    if kind not in KINDS:
        _fail(where, f"kind must be one of {KINDS}, got {kind!r}")
    refs = raw.get("refs")
    if isinstance(refs, str):
        refs = [refs]
    if not refs or not all(isinstance(r, str) and r.strip() for r in refs):
        _fail(where, "refs must name at least one result of book/coverage/*.yml")
    rule = raw.get("rule")
    if not isinstance(rule, Mapping):
        _fail(where, "needs a 'rule' mapping (text, params, expected, wrong)")
    extra = set(rule) - RULE_KEYS
    if extra:
        _fail(where, f"rule: unknown keys {sorted(extra)} (allowed: {sorted(RULE_KEYS)})")
    params = rule.get("params") or {}
    if not isinstance(params, Mapping):
        _fail(where, "rule.params must be a mapping name -> {value, from}")
    expected = None if rule.get("expected") is None else _quantity(f"{where} rule.expected", rule["expected"])
    wrong = None if rule.get("wrong") is None else _quantity(f"{where} rule.wrong", rule["wrong"])
    if kind == "value" and wrong is None:
        _fail(where, "a value row names the nearest wrong value a reader might believe (rule.wrong): its control")
    if expected is not None and wrong is not None and expected.value is not None and expected.value == wrong.value:
        _fail(where, "rule.expected and rule.wrong are the same number")
    scales = raw.get("scales")
    if isinstance(scales, str):
        scales = [scales]
    if not scales or any(s not in SCALES for s in scales) or len(set(scales)) != len(scales):
        _fail(where, f"scales must be a non-empty list of {SCALES}, got {scales!r}")
    revisions = raw.get("revisions") or []
    if not isinstance(revisions, list):
        _fail(where, "revisions must be a list")
    revs = tuple(_revision(f"{where} revision {k + 1}", r) for k, r in enumerate(revisions))
    registered = _date(where, raw.get("registered"))
    dates = [registered] + [r.date for r in revs]
    if dates != sorted(dates):
        _fail(where, f"revisions must be in date order, after the registration: {dates}")
    return Rule(
        id=row_id,
        chapter=label,
        claim=_text(where, raw, "claim"),
        refs=tuple(" ".join(r.split()) for r in refs),
        kind=kind,
        source=_text(where, raw, "source"),
        paper=_text(where, raw, "paper"),
        erratum=_text(where, raw, "erratum", optional=True),
        text=_text(f"{where} rule", rule, "text"),
        params={str(k): _quantity(f"{where} rule.params.{k}", v) for k, v in params.items()},
        expected=expected,
        wrong=wrong,
        scales=tuple(scales),
        registered=registered,
        revisions=revs,
        note=_text(where, raw, "note", optional=True) or "",
        fingerprint=fingerprint(raw),
    )


def parse(data: Mapping, path: Path | str = "<registry>") -> ChapterRegistry:
    """Validate one chapter's registry (the parsed YAML) and return it; a :class:`RegistryError` names the problem.

    The format of ``book/claims/<short>.yml`` that every chapter's claim check reads (:ref:`ch-setup` is the first).

    Parameters
    ----------
    data : Mapping
        The parsed file: ``chapter`` (the label), ``rows`` and optionally ``retired`` and ``claim_code``.
    path : Path or str
        The file's path, for the messages; a path with a suffix must be named after the label
        (``failures.yml`` for ``ch-failures``).

    Returns
    -------
    ChapterRegistry
        The chapter's rows, in file order.

    Raises
    ------
    RegistryError
        A ``ValueError`` naming the file, the row and the problem: an unknown key, a malformed id, kind, date,
        number or scale, a value row without its wrong value, revisions out of date order, a duplicate id, no rows,
        a retired row that is also active, or a ``claim_code`` entry out of date order or naming a row that has no
        revision of its date.

    Examples
    --------
    >>> from companion import registry
    >>> row = {"id": "toy.bound", "claim": "x ≤ 1", "refs": ["A Lemma 4.1"], "kind": "bound", "source": "'x ≤ 1'",
    ...        "paper": "≤ 1", "scales": ["quick", "paper"], "registered": "2026-12-01",
    ...        "rule": {"text": "the worst ratio is at most {limit}",
    ...                 "params": {"limit": {"value": 1, "from": "the lemma's constant"}}}}
    >>> reg = registry.parse({"chapter": "ch-toy", "rows": [row]})
    >>> reg["toy.bound"]["limit"], [r.id for r in reg.at_scale("quick")]
    (1.0, ['toy.bound'])
    >>> registry.parse({"chapter": "ch-toy", "rows": [{**row, "kind": "guess"}]})
    Traceback (most recent call last):
    ...
    companion.registry.RegistryError: <registry> row 1 (toy.bound): kind must be one of (...), got 'guess'
    """
    where = Path(path).name
    if not isinstance(data, Mapping):
        _fail(where, "a registry file is a mapping with 'chapter', 'rows' and optionally 'retired', 'claim_code'")
    extra = set(data) - {"chapter", "rows", "retired", "claim_code"}
    if extra:
        _fail(where, f"unknown top-level keys {sorted(extra)}")
    label = data.get("chapter")
    if not isinstance(label, str) or not LABEL_RE.match(label):
        _fail(where, f"'chapter' must be the chapter's label (ch-...), got {label!r}")
    if Path(path).suffix and Path(path).stem != label.removeprefix("ch-"):
        _fail(where, f"the file of chapter {label} is named {label.removeprefix('ch-')}.yml")
    rows: dict[str, Rule] = {}
    for k, raw in enumerate(data.get("rows") or []):
        rule = _rule(f"{where} row {k + 1}", label, raw)
        if rule.id in rows:
            _fail(where, f"two rows with the id {rule.id}")
        rows[rule.id] = rule
    if not rows:
        _fail(where, "no rows registered")
    retired = []
    for k, raw in enumerate(data.get("retired") or []):
        w = f"{where} retired {k + 1}"
        if not isinstance(raw, Mapping) or set(raw) - {"id", "claim", "retired", "reason", "replaced_by", "revisions"}:
            _fail(w, "a retired row has id, claim, retired (its date), reason and optionally replaced_by, revisions")
        rid = raw.get("id")
        if not isinstance(rid, str) or not ID_RE.match(rid):
            _fail(w, f"bad id {rid!r}")
        if rid in rows or any(r.id == rid for r in retired):
            _fail(w, f"{rid} is both active and retired, or retired twice: an id is never reused")
        replaced = raw.get("replaced_by")
        retired_ids = {r.get("id") for r in data.get("retired") or [] if isinstance(r, dict)}
        if replaced is not None and replaced not in rows and replaced not in retired_ids:
            # a replacement may itself be retired later (a chain of redesigns): it must still be a row of this chapter
            _fail(w, f"replaced_by names {replaced!r}, which is no row (active or retired) of this chapter")
        revs = tuple(_revision(f"{w} revision {k + 1}", r) for k, r in enumerate(raw.get("revisions") or []))
        claim, date, reason = _text(w, raw, "claim"), _date(w, raw.get("retired")), _text(w, raw, "reason")
        retired.append(Retired(rid, claim, date, reason, replaced, revs))
    log = _claim_code(where, data.get("claim_code") or [], {**rows, **{r.id: r for r in retired}})
    return ChapterRegistry(label, Path(path), rows, tuple(retired), log)


def _claim_code(where: str, raw, rows: Mapping) -> tuple[CodeChange, ...]:
    if not isinstance(raw, list):
        _fail(where, "'claim_code' is a list of {date, fingerprint, change, rules_changed}")
    out = []
    for k, entry in enumerate(raw):
        w = f"{where} claim_code {k + 1}"
        if not isinstance(entry, Mapping) or set(entry) - CODE_KEYS or not {"date", "fingerprint", "change"} <= set(entry):
            _fail(w, f"an entry has date, fingerprint, change and optionally rules_changed; got {entry!r}")
        date, change = _date(w, entry["date"]), _text(w, entry, "change")
        fp = str(entry["fingerprint"])
        if not FINGERPRINT_RE.match(fp):
            _fail(w, f"the fingerprint is 12 hex digits (tools/registry.py code), got {fp!r}")
        if out and date < out[-1].date:
            _fail(w, f"entries are in date order ({date} after {out[-1].date})")
        ids = entry.get("rules_changed") or []
        if not isinstance(ids, list):
            _fail(w, f"'rules_changed' is a list of row ids, got {ids!r}")
        for rid in ids:
            if rid not in rows:
                _fail(w, f"rules_changed names {rid!r}, which is no row (active or retired) of this chapter")
            if not any(r.date == date for r in rows[rid].revisions):
                _fail(w, f"the change of {rid}'s rule needs a revision of {rid} dated {date}")
        out.append(CodeChange(date, fp, change, tuple(ids)))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ loading
def locate() -> Path:
    """The folder of the registry files.

    ``COMPANION_REGISTRY`` when set; else the repository's ``book/claims`` beside the package's source (a clone, an
    editable install) or above the working directory (a notebook run from ``book/<part>/``); else the copy installed
    with the package (``pip install`` from the repository packs ``book/claims`` as ``companion/registry_files``).

    Where every chapter's claim check finds its rows (:ref:`ch-setup` is the first).

    Returns
    -------
    Path
        A folder holding ``*.yml`` registry files.

    Raises
    ------
    FileNotFoundError
        When ``COMPANION_REGISTRY`` is not a folder, or no registry is found.
    """
    env = os.environ.get("COMPANION_REGISTRY")
    if env:
        path = Path(env)
        if not path.is_dir():
            raise FileNotFoundError(f"COMPANION_REGISTRY={env} is not a folder")
        return path
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "book" / "claims"]
    cwd = Path.cwd().resolve()
    candidates += [p / "book" / "claims" for p in (cwd, *cwd.parents)]
    candidates.append(here.parent / "registry_files")
    for c in candidates:
        if c.is_dir() and any(c.glob("*.yml")):
            return c
    raise FileNotFoundError("the claim registry (book/claims/*.yml) was not found: set COMPANION_REGISTRY to its folder")


@lru_cache(maxsize=64)
def _load_file(path: str, mtime: float) -> ChapterRegistry:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: the same data
    return parse(yaml.load(Path(path).read_text(encoding="utf-8"), Loader=loader), path)


def load(label: str, directory: str | os.PathLike | None = None) -> ChapterRegistry:
    """The registered rows of the chapter labelled ``label`` (e.g. ``"ch-failures"``).

    What :class:`companion.claims.ClaimCheck` reads at the end of every chapter (:ref:`ch-setup` is the first).
    Parsed files are cached until they change.

    Parameters
    ----------
    label : str
        The chapter's label, ``ch-<short>``; the file is ``<directory>/<short>.yml``.
    directory : str, PathLike or None
        The registry's folder (``None``: :func:`locate`).

    Returns
    -------
    ChapterRegistry
        The chapter's rows.

    Raises
    ------
    ValueError
        When ``label`` is not a chapter label (``ch-...``).
    FileNotFoundError
        When the chapter has no registry file (or none is found).
    RegistryError
        When the file does not follow the format (see :func:`parse`).
    """
    if not isinstance(label, str) or not LABEL_RE.match(label):
        raise ValueError(f"a chapter is named by its label, e.g. 'ch-failures'; got {label!r}")
    folder = Path(directory) if directory is not None else locate()
    path = folder / f"{label.removeprefix('ch-')}.yml"
    if not path.exists():
        raise FileNotFoundError(f"no registry for {label}: expected {path}")
    return _load_file(str(path), path.stat().st_mtime)


def load_all(directory: str | os.PathLike | None = None) -> dict[str, ChapterRegistry]:
    """Every chapter's registry in the folder, by label.

    Read by the book build for the coverage and status pages, and by ``tools/registry.py check``.

    Parameters
    ----------
    directory : str, PathLike or None
        The registry's folder (``None``: :func:`locate`).

    Returns
    -------
    dict of str to ChapterRegistry
        One registry per ``*.yml`` file, keyed by chapter label, in file-name order.

    Raises
    ------
    FileNotFoundError
        When no registry folder is found.
    RegistryError
        When a file does not follow the format (see :func:`parse`).
    """
    folder = Path(directory) if directory is not None else locate()
    out = {}
    for path in sorted(folder.glob("*.yml")):
        reg = _load_file(str(path), path.stat().st_mtime)
        out[reg.label] = reg
    return out
