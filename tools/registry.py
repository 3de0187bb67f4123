"""The claim registry's history: every change of a registered rule must come with a revision entry.

    python tools/registry.py check          # exit 1 on an unrecorded change anywhere in the registry's git history
    python tools/registry.py show failures  # one chapter's rows: id, kind, scales, revisions
    python tools/registry.py deviations     # every revision made after seeing data
    python tools/registry.py code           # each chapter's claim-check fingerprint against its claim_code log
    python tools/registry.py code failures --change "what changed" [--rules ID ...]   # log a change of the cells

``check`` reads every committed version of ``book/claims/*.yml`` (``git log``), then the working tree, and compares
each version with its parent versions (a merge with each of the lines it joins), row by row:

* a row whose rule changed (:func:`companion.registry.fingerprint`: kind, rule text, parameters, expected and wrong
  values, scales, erratum) must have gained a revision entry;
* the revisions already recorded are never rewritten or dropped (a revision list only grows at its end);
* a row never disappears: it stays active, or it moves to the file's ``retired`` list (and stays there);
* a chapter's registry file is never deleted;
* a file's ``claim_code`` log only grows at its end.

The test's logic is the chapter's code: ``code`` fingerprints each chapter's claim-check cells (every code cell that
calls ``check.rule``, ``check.add`` or ``check.compare``; the hash of their syntax trees, so comments and layout do not
count) and compares the fingerprint with the last entry of the chapter's ``claim_code`` log; with ``--change`` it
appends an entry for the cells as they are now, naming the rows whose rule the change changed (each needs a revision
of today's date).

So a number changed in a registry file without a revision entry fails the test suite (``tests/book/test_registry.py``),
whether the change is committed or not.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from companion import registry  # noqa: E402

REGISTRY = "book/claims"


@dataclass
class Version:
    """The registry at one commit (or the working tree): ``{file name: parsed YAML}``."""

    name: str
    files: dict[str, dict]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def git_available() -> bool:
    try:
        return _git("rev-parse", "--is-inside-work-tree").strip() == "true"
    except (OSError, subprocess.CalledProcessError):
        return False


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML was built with it
_PARSED: dict[str, dict] = {}  # blob hash -> parsed file: a file that no commit changed is read once


def _load(text: str) -> dict:
    return yaml.load(text, Loader=_LOADER)


def _files_at(commit: str) -> dict[str, dict]:
    """``{file name: parsed YAML}`` of the registry at ``commit``; the parsed files are shared, read-only."""
    out = {}
    for line in _git("ls-tree", commit, f"{REGISTRY}/").splitlines():
        meta, path = line.split("\t", 1)
        blob = meta.split()[2]
        if path.endswith(".yml"):
            if blob not in _PARSED:
                _PARSED[blob] = _load(_git("cat-file", "blob", blob))
            out[Path(path).name] = _PARSED[blob]
    return out


def versions(include_worktree: bool = True) -> list[tuple[Version, list[str]]]:
    """Every committed version of the registry with the names of the versions it follows, parents first.

    The history is read as a graph (``git log --parents`` on the registry's folder, parents rewritten to the commits
    that touched it), so that two lines of work merged together are each compared with their own parent, never
    with each other. The working tree follows the version at ``HEAD``.
    """
    out: list[tuple[Version, list[str]]] = []
    log = _git("log", "--reverse", "--topo-order", "--parents", "--format=%H %P|%cs", "--", REGISTRY)
    for line in log.splitlines():
        hashes, date = line.split("|")
        commit, *parents = hashes.split()
        out.append((Version(f"{commit[:10]} ({date})", _files_at(commit)), [p[:10] for p in parents]))
    if include_worktree:
        if out:
            out.append((Version("HEAD", _files_at("HEAD")), []))
        files = {p.name: _load(p.read_text()) for p in sorted((ROOT / REGISTRY).glob("*.yml"))}
        out.append((Version("the working tree", files), ["HEAD"] if out else []))
    return out


def _rows(data: dict) -> dict[str, dict]:
    return {r["id"]: r for r in (data or {}).get("rows") or [] if isinstance(r, dict) and "id" in r}


def _retired(data: dict) -> set[str]:
    return {r["id"] for r in (data or {}).get("retired") or [] if isinstance(r, dict) and "id" in r}


def _same_revision(old: dict, new: dict) -> bool:
    """A recorded revision stays as written, except that an empty ``commit`` may be filled in later with the short
    hash of the commit that made the change (the provenance is completed; nothing of the rule's history changes)."""
    if old == new:
        return True
    rest = {k: v for k, v in old.items() if k != "commit"} == {k: v for k, v in new.items() if k != "commit"}
    return rest and not old.get("commit") and bool(re.fullmatch(r"[0-9a-f]{7,40}", str(new.get("commit") or "")))


def _same_revisions(old: list, new: list) -> bool:
    return len(new) >= len(old) and all(_same_revision(o, n) for o, n in zip(old, new))


CLAIM_CALLS = ("check.rule(", "check.add(", "check.compare(")


def chapter_sources() -> dict[str, Path]:
    """``{label: chapter source}`` for every chapter of ``_toc.yml`` (the ``(ch-…)=`` label above its title)."""
    from companion import _book

    return {_book.chapter_label(ROOT, doc): ROOT / f"{doc}.md" for doc in _book.toc_chapters(ROOT)}


def claim_cells(source: Path) -> list[str]:
    """The code of the chapter's claim-check cells: every code cell that reads a rule or adds a row."""
    import jupytext

    nb = jupytext.read(source, fmt="md:myst")
    return [c.source for c in nb.cells if c.cell_type == "code" and any(k in c.source for k in CLAIM_CALLS)]


def _normalised(code: str) -> str:
    try:
        return ast.dump(ast.parse(code))  # comments, blank lines and layout do not count
    except SyntaxError:  # a cell with IPython syntax: its lines without comments and surrounding blanks
        return "\n".join(ln.split("#", 1)[0].rstrip() for ln in code.splitlines() if ln.strip())


def code_fingerprint(source: Path) -> str:
    """12 hex digits: the hash of the chapter's claim-check cells (:func:`claim_cells`), in order."""
    digest = hashlib.sha256("\n\x00".join(_normalised(c) for c in claim_cells(source)).encode())
    return digest.hexdigest()[:12]


def code_problems(regs: dict | None = None) -> list[str]:
    """Each chapter whose claim-check fingerprint is not the last entry of its ``claim_code`` log."""
    regs = registry.load_all(ROOT / REGISTRY) if regs is None else regs
    problems = []
    for label, source in chapter_sources().items():
        log = regs[label].claim_code if label in regs else ()
        now = code_fingerprint(source)
        if not log or log[-1].fingerprint != now:
            last = log[-1].fingerprint if log else "none"
            problems.append(
                f"{label}: the claim-check cells of {source.relative_to(ROOT)} have the fingerprint {now}, the last "
                f"entry of {REGISTRY}/{label.removeprefix('ch-')}.yml's claim_code log {last}: log the change with "
                f"`python tools/registry.py code {label.removeprefix('ch-')} --change '...' [--rules ROW ...]`"
            )
    return problems


def log_code_change(label: str, change: str, rules: list[str]) -> Path:
    """Append an entry for the chapter's claim-check cells as they are now to its registry file's ``claim_code``
    log (dated today); the file is checked with :func:`companion.registry.parse` before it is written."""
    source, path = chapter_sources()[label], ROOT / REGISTRY / f"{label.removeprefix('ch-')}.yml"
    text = path.read_text()
    entry = {"date": _dt.date.today().isoformat(), "fingerprint": code_fingerprint(source), "change": change}
    if rules:
        entry["rules_changed"] = rules
    block = yaml.safe_dump([entry], allow_unicode=True, sort_keys=False, width=120)
    if re.search(r"^claim_code:", text, re.M):
        if not re.search(r"^claim_code:.*(?:\n(?:[ -].*)?)*\Z", text, re.M):
            raise SystemExit(f"{path.name}: the claim_code log must be the file's last top-level key")
        new = text.rstrip("\n") + "\n" + block
    else:
        head = "# Each change of the chapter's claim-check cells (tools/registry.py code).\nclaim_code:\n"
        new = text.rstrip("\n") + "\n\n" + head + block
    registry.parse(_load(new), path)
    path.write_text(new)
    return path


def compare(before: Version, after: Version) -> list[str]:
    """The unrecorded changes from ``before`` to ``after``."""
    problems = []
    for name, old in before.files.items():
        new = after.files.get(name)
        if new is None:
            problems.append(f"{after.name}: {REGISTRY}/{name} was deleted (its rows must stay, active or retired)")
            continue
        old_rows, new_rows, new_retired = _rows(old), _rows(new), _retired(new)
        for rid, row in old_rows.items():
            if rid not in new_rows:
                if rid not in new_retired:
                    problems.append(f"{after.name}: row {rid} disappeared without being retired")
                continue
            nrow = new_rows[rid]
            old_revs, new_revs = row.get("revisions") or [], nrow.get("revisions") or []
            if not _same_revisions(old_revs, new_revs):
                problems.append(f"{after.name}: row {rid}: a recorded revision was rewritten or removed")
            elif registry.fingerprint(row) != registry.fingerprint(nrow) and len(new_revs) <= len(old_revs):
                problems.append(
                    f"{after.name}: row {rid}: its rule changed (kind, rule, scales or erratum) without a new "
                    "revision entry (date, was, now, rationale, impact, after_data)"
                )
        for rid in _retired(old) - new_retired:
            problems.append(f"{after.name}: retired row {rid} was taken off the retired list")
        old_log, new_log = old.get("claim_code") or [], new.get("claim_code") or []
        if new_log[: len(old_log)] != old_log:
            problems.append(f"{after.name}: {REGISTRY}/{name}: an entry of the claim_code log was rewritten or removed")
    return problems


def history_problems(vs: list[tuple[Version, list[str]]] | None = None) -> list[str]:
    """Every unrecorded change along the registry's history (empty when there is none); ``vs`` as
    :func:`versions` returns it (read when not given)."""
    vs = versions() if vs is None else vs
    by_name = {v.name.split()[0]: v for v, _ in vs}
    problems = []
    for after, parents in vs:
        for parent in parents:
            if parent in by_name:
                problems += compare(by_name[parent], after)
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="unrecorded changes along the registry's git history")
    show = sub.add_parser("show", help="one chapter's registered rows")
    show.add_argument("chapter", help="the chapter's label without ch- (e.g. failures)")
    sub.add_parser("deviations", help="every revision made after seeing data")
    code = sub.add_parser("code", help="claim-check fingerprints against the claim_code logs, or log a change")
    code.add_argument("chapter", nargs="?", help="the chapter's label without ch- (with --change)")
    code.add_argument("--change", help="what changed in the chapter's claim-check cells")
    code.add_argument("--rules", nargs="*", default=[], help="the rows whose rule the change changed")
    args = ap.parse_args(argv)
    if args.cmd == "code":
        if args.change:
            if not args.chapter:
                ap.error("code --change needs the chapter")
            print(f"logged in {log_code_change('ch-' + args.chapter.removeprefix('ch-'), args.change, args.rules)}")
            return 0
        problems = code_problems()
        print("\n".join(problems) or "every chapter's claim-check cells match the last entry of its claim_code log")
        return 1 if problems else 0
    if args.cmd == "check":
        if not git_available():
            print("not a git checkout: the registry's history cannot be read")
            return 2
        vs = versions()
        problems = history_problems(vs)
        committed = sum(v.name not in ("HEAD", "the working tree") for v, _ in vs)
        print("\n".join(problems) or f"{committed} committed versions: every change is recorded")
        return 1 if problems else 0
    regs = registry.load_all(ROOT / REGISTRY)
    if args.cmd == "show":
        reg = regs[f"ch-{args.chapter.removeprefix('ch-')}"]
        for r in reg.rows.values():
            print(f"{r.id:48s} {r.kind:12s} {','.join(r.scales):11s} revisions {len(r.revisions)}")
        for r in reg.retired:
            print(f"{r.id:48s} retired {r.retired}: {r.reason}")
        return 0
    for reg in regs.values():  # as the status page lists them: active rows, then rows revised before they retired
        for r in (*reg.rows.values(), *reg.retired):
            gone = f" (retired {r.retired})" if isinstance(r, registry.Retired) else ""
            for v in (v for v in r.revisions if v.after_data):
                print(f"{v.date} {r.id}{gone}: {v.was} -> {v.now}\n    why: {v.rationale}\n    impact: {v.impact}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
