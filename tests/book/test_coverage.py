"""Coverage of the three papers, computed from what ran: every result of the inventory (book/coverage/*.yml) is checked
by a bound or value row that ran and holds at this scale (in this test run, and in the committed runs of
book/_generated/runs), or is excused with a category; no result ever leaves the inventory; the dependency graph
(``uses``) names known results and has no cycle."""

import json
import os
import subprocess
from pathlib import Path

import networkx as nx
import pytest
import yaml

from companion import _book, claims, registry, scale

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = _book.inventory(ROOT)
RESULTS = {r["id"]: r for r in _book.coverage_inventory(ROOT)}
REGS = registry.load_all(ROOT / "book" / "claims")
EVIDENCE = ("bound", "value")


def test_each_paper_keeps_its_frozen_list_of_results():
    assert set(INVENTORY) == {"A", "B", "C"}
    for paper, data in INVENTORY.items():
        ids = [r["id"] for r in data["results"]]
        assert ids == data["ids"], f"{paper}.yml: the results must be exactly the frozen `ids`, in order"
        assert len(set(ids)) == len(ids) and all(i.startswith(f"{paper} ") for i in ids)


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def _ids_at(commit: str, path: str) -> set[str]:
    data = yaml.safe_load(_git("show", f"{commit}:{path}"))
    items = data if isinstance(data, list) else data.get("ids", [])
    return {i["id"] if isinstance(i, dict) else i for i in items}


@pytest.mark.skipif(subprocess.run(["git", "rev-parse"], cwd=ROOT).returncode != 0, reason="not a git checkout")
def test_no_result_ever_leaves_the_inventory():
    for paper in INVENTORY:
        path = f"book/coverage/{paper}.yml"
        now = set(INVENTORY[paper]["ids"])
        for commit in _git("log", "--format=%H", "--", path).split():
            try:
                gone = _ids_at(commit, path) - now
            except subprocess.CalledProcessError:
                continue  # the file did not exist at that commit
            assert not gone, f"{path}: results removed since {commit[:10]}: {sorted(gone)}"


def test_excuses_name_their_category_and_no_row_checks_an_excused_result():
    for rid, item in RESULTS.items():
        ex = item.get("excused")
        if ex:
            assert ex.get("category") in _book.EXCUSES and ex.get("why"), f"{rid}: excused needs a category and why"
    checked = {ref for reg in REGS.values() for r in reg.rows.values() if r.kind in EVIDENCE for ref in r.refs}
    both = sorted(i for i in checked if RESULTS[i].get("excused"))
    assert both == [], f"results checked by a bound or value row but also excused: {both}"


def _evidence_scales() -> dict[str, set[str]]:
    """Result id -> the scales at which a registered bound or value row checks it."""
    out: dict[str, set[str]] = {}
    for reg in REGS.values():
        for r in reg.rows.values():
            if r.kind in EVIDENCE:
                for ref in r.refs:
                    out.setdefault(ref, set()).update(r.scales)
    return out


def test_every_result_is_registered_or_excused():
    """A result that no bound or value row checks at any scale must be excused; one checked only at paper scale is
    shown so on the coverage page of a quick build (and not counted as checked there)."""
    scales = _evidence_scales()
    orphan = sorted(i for i, item in RESULTS.items() if i not in scales and not item.get("excused"))
    assert orphan == [], f"results without a bound or value row and without an excuse: {orphan}"


def test_the_dependency_graph_names_known_results_and_has_no_cycle():
    g = nx.DiGraph()
    for rid, item in RESULTS.items():
        g.add_node(rid)
        for u in item.get("uses") or []:
            assert u in RESULTS, f"{rid} uses {u!r}, which is not in the inventory"
            g.add_edge(u, rid)
    assert nx.is_directed_acyclic_graph(g), nx.find_cycle(g)


def _executed_chapters(session) -> set[str]:
    return {Path(str(it.parent.fspath)).stem for it in session.items if type(it).__name__ == "IPyNbCell"}


def _unchecked(records: list[dict], where: str, at: str) -> None:
    """Every chapter wrote records, and every result a bound or value row registered at this scale names was checked
    at scale ``at`` by such a row that ran and holds (or holds as corrected by an erratum); no excused result was checked."""
    labels = {_book.chapter_label(ROOT, d) for d in _book.toc_chapters(ROOT)}
    assert {r["chapter"] for r in records} == labels, f"every chapter has claim records in {where}"
    held = {ref for r in records if r["kind"] in EVIDENCE and r["verdict"] in ("holds", "erratum") for ref in r["refs"]}
    here = {i for i, s in _evidence_scales().items() if at in s}  # registered at this scale
    unchecked = sorted(i for i in here if i not in held)
    assert unchecked == [], f"results no bound or value row checked in {where}: {unchecked}"
    assert not any(i in held for i, item in RESULTS.items() if item.get("excused"))


def test_every_result_is_checked_by_a_row_that_ran_and_holds(request):
    """From the records the chapters wrote in this test session (nbval runs them first; conftest sets
    COMPANION_CLAIMS_DIR): a result counts as checked only by a bound or value row that ran and holds."""
    chapters = {Path(d).name for d in _book.toc_chapters(ROOT)}
    if not chapters <= _executed_chapters(request.session):
        pytest.skip("the chapters are not executed in this session; the committed runs are tested below")
    directory = os.environ["COMPANION_CLAIMS_DIR"]
    records = [r for r in claims.load_records(directory) if not r["falsify"] and r["scale"] == scale.current()]
    _unchecked(records, "this run", scale.current())


@pytest.mark.parametrize("run", ["cpu-quick", "cpu-paper"])
def test_every_result_is_checked_in_the_committed_runs(run):
    """The same from the runs committed to book/_generated/runs (the status page's ledger), so that the test does
    not need the chapters executed: a record counts only while its row is still registered, with the registry's
    kind and results (a retired row, or one whose results changed, does not), and with its registry's scales."""
    path = ROOT / "book" / "_generated" / "runs" / f"{run}.json"
    if not path.exists():
        pytest.skip(f"no committed run {run}")
    rows = {rid: rule for reg in REGS.values() for rid, rule in reg.rows.items()}
    records = []
    for r in json.loads(path.read_text())["records"]:
        rule = rows.get(r["id"])
        if r["falsify"] or rule is None or r["scale"] not in rule.scales:
            continue
        records.append({**r, "kind": rule.kind, "refs": list(rule.refs)})
    scale_of_run = {r["scale"] for r in records}
    assert len(scale_of_run) == 1, f"{run}: one scale per committed run, not {scale_of_run}"
    _unchecked(records, f"the committed run {run}", scale_of_run.pop())
