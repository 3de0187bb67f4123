"""Sphinx glue for the book's pages: ``sphinx.extra_extensions: [companion._book]`` in _config.yml.

It lives in the package rather than in book/ so that a build with a copied ``--config`` (tests/conftest.py)
still finds it; nothing in the package imports it (it needs Sphinx, which only the book build has).

* **The claim records.** Every chapter's claim check embeds its rows as JSON in its table's HTML
  (:meth:`companion.claims.ClaimCheck.report`); the build collects them from the executed chapters and writes them
  to ``claims.json`` at the site's root (row id, kind, chapter, paper value, measured value, interval, verdict,
  revisions, seed, scale, device, dtype, torch version, commit, wall time).
* ``{companion-chapters}`` (the landing page): every chapter of ``_toc.yml`` with the results its ``prf:`` boxes
  state and its claim check as this build executed it, rows counted by kind (bound and value rows are the
  evidence; consistency rows check the machinery; errata test a corrected statement) and by revision after data,
  with a total per paper.
* ``{companion-coverage}`` (the coverage page): every result of the inventory (``book/coverage/{A,B,C}.yml``), each
  paper's counts, its results drawn as a dependency graph coloured by status, and a table with the rows that check
  each result, or the category and reason of its excuse. A result counts as checked only by a ``bound`` or
  ``value`` row that ran in this build and holds.
* ``{companion-deviations}`` (the status page): every revision of a registered rule made after seeing data, with its
  date, old and new rule, rationale and impact, and every retired row — from the registry (``book/claims``).
* ``{companion-ledger}`` (the status page): where each chapter last ran, chapters × (CPU, CUDA, float32 on CUDA), from
  the claim records committed under ``book/_generated/runs/`` (``tools/ledger.py``).
* MathJax on every page (a chapter title with maths is typeset in every page's navigation), and plain-text titles
  for the browser's tab.
* The ``.ipynb`` download button of each chapter serves the chapter's **paired notebook** (``book/<part>/<NN>_x.ipynb``,
  the file the Colab button opens, no outputs) instead of sphinx-book-theme's copy of myst-nb's executed
  notebook. The ``.md`` button serves the jupytext source (the theme's ``_sources`` copy, unchanged).
* Drops duplicate ``<script>`` entries: sphinx-thebe adds its inline ``const THEBE_JS_URL = …`` once per
  ``env-before-read-docs``, which fires twice in a jupyter-book build, and the second copy throws
  "Identifier 'THEBE_JS_URL' has already been declared" on every page (seen by tools/browser_check.py).
* Adds ``_static/companion.css`` (figures as white cards in the dark theme, the claim tables, the graphs).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive

PRF_TITLE_RE = re.compile(r"^\s*(?:```+|:::+)\{prf:(?!proof\b)\w+\}[ \t]*(?P<title>[^\n]*)$", re.M)
LABEL_RE = re.compile(r"^\((?P<label>ch-[a-z0-9-]+)\)=\s*$", re.M)
PAPERS = ("A", "B", "C")
EXCUSES = {
    "definition": "a definition or a hypothesis of the setting",
    "standard-tool": "a standard tool quoted from the literature",
    "proof-step": "a step of a proof, covered by the result it serves",
    "open-question": "a question the paper leaves open: it asserts nothing a row could check",
}
MARK = {"holds": "✅", "erratum": "⚠️", "fails": "❌"}


# ------------------------------------------------------------------------------- placeholders
class chapter_table(nodes.General, nodes.Element):
    """Placeholder for the chapter table, replaced at doctree-resolved (when every chapter has been read)."""


class coverage_table(nodes.General, nodes.Element):
    """Placeholder for the coverage summary, graphs and table, replaced at doctree-resolved."""


class deviations_list(nodes.General, nodes.Element):
    """Placeholder for the deviations from registration."""


class ledger_table(nodes.General, nodes.Element):
    """Placeholder for the ledger of where each chapter last ran."""


class _PlaceholderDirective(Directive):
    has_content = False
    node: type = chapter_table

    def run(self):
        env = self.state.document.settings.env
        if not hasattr(env, "companion_chapter_table_docs"):
            env.companion_chapter_table_docs = set()
        env.companion_chapter_table_docs.add(env.docname)
        return [self.node()]


def _directive(node_cls):
    return type(f"{node_cls.__name__}_directive", (_PlaceholderDirective,), {"node": node_cls})


# ------------------------------------------------------------------------------- sources
def toc_chapters(srcdir: Path) -> list[str]:
    """Docnames of the jupytext chapters listed in ``_toc.yml``, in order."""
    return [d for _, docs in toc_parts(srcdir) for d in docs]


def toc_parts(srcdir: Path) -> list[tuple[str, list[str]]]:
    """``(caption, chapter docnames)`` of each part of ``_toc.yml`` that holds jupytext chapters."""
    toc = yaml.safe_load((Path(srcdir) / "_toc.yml").read_text())
    out = []
    for part in toc.get("parts", []):
        docs = [
            c["file"]
            for c in part.get("chapters", [])
            if (Path(srcdir) / f"{c['file']}.md").exists()
            and (Path(srcdir) / f"{c['file']}.md").read_text().startswith("---\njupytext:")
        ]
        if docs:
            out.append((part.get("caption", ""), docs))
    return out


def chapter_label(srcdir: Path, doc: str) -> str:
    """The ``(ch-…)=`` label of a chapter (the name of its registry and records)."""
    m = LABEL_RE.search((Path(srcdir) / f"{doc}.md").read_text())
    if not m:
        raise ValueError(f"{doc}.md has no (ch-...)= label before its title")
    return m.group("label")


CLAIMS_JSON_RE = re.compile(r"<script type='application/json' class='companion-claims'>(?P<data>.*?)</script>", re.S)


def chapter_records(doctree) -> list[dict]:
    """The claim records embedded in an executed chapter's claim-check output (empty when not executed)."""
    out: list[dict] = []
    for raw in doctree.findall(nodes.raw):
        for m in CLAIMS_JSON_RE.finditer(raw.astext()):
            out += json.loads(m.group("data"))  # "<\/" in the HTML is JSON for "</"
    return out


def inventory(srcdir: Path) -> dict[str, dict]:
    """Each paper's inventory file (``book/coverage/<P>.yml``): ``{paper: {"ids": [...], "results": [...]}}``."""
    out = {}
    for p in PAPERS:
        path = Path(srcdir) / "book" / "coverage" / f"{p}.yml"
        if path.exists():
            out[p] = yaml.safe_load(path.read_text())
    return out


def coverage_inventory(srcdir: Path) -> list[dict]:
    """The results of the three papers (``book/coverage/{A,B,C}.yml``), in order."""
    return [r for data in inventory(srcdir).values() for r in data.get("results") or []]


def counts(records: list[dict]) -> Counter:
    """Rows by what they are: ``evidence`` (bound and value rows), ``bound``, ``value``, ``consistency``,
    ``erratum``, ``fails``, ``revised`` (rows whose rule was revised after data), ``rows``."""
    c = Counter(rows=len(records))
    for r in records:
        kind = r.get("kind", "value")
        c[kind] += 1
        c["evidence"] += kind in ("bound", "value")
        c["erratum"] += r["verdict"] == "erratum"
        c["fails"] += r["verdict"] == "fails"
        c["revised"] += bool(r.get("revised_after_data"))
    return c


def verdict_text(records: list[dict]) -> str:
    """One line: the verdict of a claim check, its rows counted by kind and by revision after data."""
    if not records:
        return "not executed in this build"
    c = counts(records)
    parts = [f"{c['evidence']} evidence rows ({c['bound']} bound, {c['value']} value)"]
    if c["consistency"]:
        parts.append(f"{c['consistency']} consistency")
    if c["erratum"]:
        parts.append(f"{c['erratum']} erratum" + ("s" if c["erratum"] > 1 else ""))
    if c["revised"]:
        parts.append(f"{c['revised']} revised after data")
    if c["fails"]:
        head = f"❌ {c['fails']} of {c['rows']} rows fail"
    elif c["erratum"]:
        head = "⚠️ paper corrected (erratum; the corrected statement holds)"
    else:
        head = "✅ holds"
    return f"{head} · " + " · ".join(parts)


def _records_by_chapter(app) -> dict[str, list[dict]]:
    env = app.env
    return {doc: chapter_records(env.get_doctree(doc)) for doc in toc_chapters(Path(app.srcdir)) if doc in env.all_docs}


def _row(cells) -> nodes.row:
    r = nodes.row()
    for c in cells:
        entry = nodes.entry()
        entry += c if isinstance(c, nodes.Node) else nodes.paragraph(text=c)
        r += entry
    return r


def _table(cls: str, columns: dict[str, int]):
    """An empty docutils table with a header row: ``(table, body, row)``, where ``row(cells)`` makes a body row. Its
    classes: ``cls`` and ``generated-table``, the one class that the site's stylesheet (fixed layout, wrapped cells)
    and the browser check (``tools/browser_check.py``: no table wider than its column) select."""
    table = nodes.table(classes=[cls, "generated-table", "colwidths-given"])
    tgroup = nodes.tgroup(cols=len(columns))
    table += tgroup
    for width in columns.values():
        tgroup += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    tgroup += head
    tgroup += body
    head += _row(list(columns))
    return table, body, _row


def _title_nodes(env, doc):
    # the title's own nodes, so that a formula in it ("the $O(T^{-1/L})$ rate") is typeset, not shown as TeX
    return [c.deepcopy() for c in env.titles[doc].children] if doc in env.titles else [nodes.Text(doc)]


def _link(app, fromdoc, doc, children, anchor: str = ""):
    uri = app.builder.get_relative_uri(fromdoc, doc) + (f"#{anchor}" if anchor else "")
    return nodes.reference("", "", *children, internal=True, refuri=uri)


# ------------------------------------------------------------------------------- the landing table
def _chapter_table(app, fromdoc: str):
    env, srcdir = app.env, Path(app.srcdir)
    by_chapter = _records_by_chapter(app)
    table, body, row = _table(
        "chapter-table", {"Chapter": 30, "Result it reproduces": 36, "Its claim check, as this build ran it": 34}
    )
    for caption, docs in toc_parts(srcdir):
        docs = [d for d in docs if d in env.all_docs]
        for doc in docs:
            link = nodes.paragraph()
            link += _link(app, fromdoc, doc, _title_nodes(env, doc))
            source = (srcdir / f"{doc}.md").read_text()
            results = "; ".join(m.group("title").strip() for m in PRF_TITLE_RE.finditer(source)) or "—"
            body += row([link, results, verdict_text(by_chapter.get(doc, []))])
        total = [r for d in docs for r in by_chapter.get(d, [])]
        strong = nodes.paragraph()
        strong += nodes.strong(text=f"{caption}: all chapters")
        body += row([strong, "", verdict_text(total)])
    return table


# ------------------------------------------------------------------------------- the coverage page
def result_status(item: dict, records: list[dict]) -> str:
    """``holds``, ``erratum``, ``fails``, ``excused`` or ``unchecked``: the result's status in this build, from the
    evidence rows (bound and value) that name it."""
    hits = [r for r in records if item["id"] in r.get("refs", []) and r.get("kind", "value") in ("bound", "value")]
    if any(r["verdict"] == "fails" for r in hits):
        return "fails"
    if any(r["verdict"] == "erratum" for r in hits):
        return "erratum"
    if hits:
        return "holds"
    return "excused" if item.get("excused") else "unchecked"


STATUS_STYLE = {  # face colour, edge colour, legend text
    "holds": ("#8fd19e", "#1e7b34", "checked, holds"),
    "erratum": ("#ffd27f", "#b36b00", "erratum: the corrected statement holds"),
    "fails": ("#f28b82", "#a50e0e", "checked, fails"),
    "excused": ("#e0e0e0", "#7a7a7a", "excused (definition, quoted tool, proof step)"),
    "unchecked": ("#ffffff", "#a50e0e", "not checked in this build"),
}


def short_id(rid: str) -> str:
    """A node label: ``A Lemma 4.5`` -> ``L4.5``, ``B Theorem 10`` -> ``T10``, ``A Eq. (14)`` -> ``(14)``."""
    name = rid.split(" ", 1)[1]
    for word, abbrev in (
        ("Lemma ", "L"), ("Theorem ", "T"), ("Assumption ", "As"), ("Figure ", "F"), ("Eq. ", ""),
        ("Appendix ", "App "), ("Section ", "§"),
    ):  # fmt: skip
        if name.startswith(word):
            return abbrev + name[len(word) :]
    words = re.findall(r"[A-Za-z0-9.]+", name)
    return "".join(w[0].upper() for w in words)[:5] if len(name) > 7 else name


def _layer_order(g, depth: dict[str, int], sweeps: int = 8) -> dict[str, float]:
    """x positions within each layer that keep edges short: the barycentre heuristic of layered graph drawing
    (each layer ordered by the mean position of its neighbours in the layers below and above, alternately)."""
    layers: dict[int, list[str]] = {}
    for n in g:  # inventory order to start with
        layers.setdefault(depth[n], []).append(n)
    width = max(len(v) for v in layers.values())

    def place(nodes):  # centred, unit spacing
        return {n: k - (len(nodes) - 1) / 2 for k, n in enumerate(nodes)}

    x = {n: v for nodes in layers.values() for n, v in place(nodes).items()}
    order = sorted(layers)
    for sweep in range(sweeps):
        seq = order[1:] if sweep % 2 == 0 else order[-2::-1]
        for lay in seq:
            nbrs = g.predecessors if sweep % 2 == 0 else g.successors

            def centre(n):
                xs = [x[m] for m in nbrs(n)]
                return sum(xs) / len(xs) if xs else x[n]

            layers[lay].sort(key=centre)
            x.update(place(layers[lay]))
    return {n: v * (width / max(width, 1)) for n, v in x.items()}


def dependency_graph(results: list[dict], status: dict[str, str], path: Path, title: str) -> None:
    """Draw one paper's results as a layered dependency graph (``uses`` edges, a result above what it uses),
    each node coloured by its status, to ``path`` (SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    from matplotlib.patches import Patch

    g = nx.DiGraph()
    ids = [r["id"] for r in results]
    g.add_nodes_from(ids)
    for r in results:
        for u in r.get("uses") or []:
            if u in g:
                g.add_edge(u, r["id"])  # u is used by r
    depth = {}
    for n in nx.topological_sort(g):
        depth[n] = 1 + max((depth[p] for p in g.predecessors(n)), default=-1)
    for n in g:
        g.nodes[n]["layer"] = depth[n]
    layers = max(depth.values()) + 1
    widest = max(Counter(depth.values()).values())
    pos = {n: (x, depth[n]) for n, x in _layer_order(g, depth).items()}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * widest + 1.0), 0.8 * layers + 1.4), dpi=100)
    fig.patch.set_facecolor("white")
    ax.set_facecolor("white")
    nx.draw_networkx_edges(g, pos, ax=ax, edge_color="#8a8a8a", alpha=0.55, arrows=True, arrowsize=8, width=0.7, node_size=700)
    for state, (face, edge, _) in STATUS_STYLE.items():
        nodelist = [n for n in g if status.get(n) == state]
        if nodelist:
            nx.draw_networkx_nodes(
                g, pos, nodelist=nodelist, ax=ax, node_color=face, edgecolors=edge, linewidths=1.4, node_size=700
            )
    for n in g:  # a long label in a smaller font, so that it stays inside its node
        label = short_id(n)
        ax.text(*pos[n], label, ha="center", va="center", fontsize=7 if len(label) <= 5 else 5.5, color="#111111")
    present = [s for s in STATUS_STYLE if s in status.values()]
    ax.legend(
        handles=[Patch(facecolor=STATUS_STYLE[s][0], edgecolor=STATUS_STYLE[s][1], label=STATUS_STYLE[s][2]) for s in present],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=min(3, len(present)),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title, fontsize=10, color="#111111")
    ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", facecolor="white")
    plt.close(fig)


def _coverage_table(app, fromdoc: str):
    by_chapter = _records_by_chapter(app)
    env, srcdir = app.env, Path(app.srcdir)
    records = [r for recs in by_chapter.values() for r in recs]
    label_doc = {chapter_label(srcdir, d): d for d in by_chapter}
    from . import registry

    scales = {r.get("scale") for r in records}
    elsewhere_rows: dict[str, set[str]] = {}  # result -> evidence rows registered only at other scales
    for reg in registry.load_all(srcdir / "book" / "claims").values():
        for rule in reg.rows.values():
            if rule.kind in ("bound", "value") and not scales & set(rule.scales):
                for ref in rule.refs:
                    elsewhere_rows.setdefault(ref, set()).add(rule.id)
    out = []
    for paper, data in inventory(srcdir).items():
        results = data.get("results") or []
        status = {r["id"]: result_status(r, records) for r in results}
        ids = {r["id"] for r in results}
        rows = [r for r in records if any(ref in ids for ref in r.get("refs", []))]
        sec = nodes.section(ids=[f"coverage-paper-{paper.lower()}"])
        sec += nodes.title(text=f"Paper {paper}")
        tally = Counter(status.values())
        excused = Counter((r.get("excused") or {}).get("category") for r in results if r.get("excused"))
        c = counts(rows)
        summary = (
            f"{len(results)} results: {tally['holds']} checked and hold, {tally['erratum']} with an erratum, "
            f"{tally['fails']} failing, {tally['unchecked']} not checked in this build, {tally['excused']} excused ("
            + ", ".join(f"{n} {k}" for k, n in sorted(excused.items()))
            + f"). Rows naming them: {c['evidence']} evidence rows ({c['bound']} bound, {c['value']} value), "
            f"{c['consistency']} consistency rows, {c['erratum']} errata, {c['revised']} revised after data."
        )
        sec += nodes.paragraph(text=summary if records else "Not executed in this build: " + summary)
        if rows:
            sec += _rows_by_chapter(app, fromdoc, rows, ids, label_doc)
        name = f"coverage-graph-{paper}.svg"
        dependency_graph(
            results, status, Path(app.outdir) / "_static" / name, f"Paper {paper}: each result above the results it uses"
        )
        prefix = "../" * fromdoc.count("/")  # _static/ sits at the site's root
        sec += nodes.raw(
            "",
            f"<figure class='companion-graph'><a href='{prefix}_static/{name}'><img src='{prefix}_static/{name}' "
            f"alt='dependency graph of paper {paper}'></a><figcaption>Paper {paper}'s results, each drawn above the "
            "results its proof uses (the inventory's <code>uses</code>), coloured by status in this build; click the "
            "graph to open it at full size.</figcaption></figure>",
            format="html",
        )
        table, body, row = _table("coverage-table", {"Result": 22, "Statement": 40, "Checked by (verdict), or why not": 38})
        for item in results:
            cell = nodes.paragraph()
            hits = [r for r in records if item["id"] in r.get("refs", [])]
            for r in hits:
                doc = label_doc.get(r["chapter"])
                title = env.titles[doc].astext() if doc in env.titles else r["chapter"]
                short = title.split(".")[0] if title[:1].isdigit() else title
                cell += _link(app, fromdoc, doc, [nodes.Text(short)], f"claim-{r['id']}") if doc else nodes.Text(short)
                kind = "" if r.get("kind", "value") in ("bound", "value") else f" [{r.get('kind')}]"
                cell += nodes.Text(f" {MARK[r['verdict']]} {r['claim']}{kind}; ")
            if item.get("excused"):
                ex = item["excused"]
                cell += nodes.Text(f"excused ({EXCUSES.get(ex.get('category'), ex.get('category'))}): {ex.get('why')}")
            elif not [r for r in hits if r.get("kind", "value") in ("bound", "value")]:
                elsewhere = sorted(elsewhere_rows.get(item["id"], ()))
                if not records:
                    cell += nodes.Text("not executed in this build")
                elif elsewhere:
                    cell += nodes.Text(
                        f"not checked at this build's scale (registered rows at other scales: {', '.join(elsewhere)})"
                    )
                else:
                    cell += nodes.Text("❌ no bound or value row checks it in this build")
            body += row([f"{item['id']}: {item.get('title', '')}", with_math(item.get("statement", "")), cell])
        sec += table
        out.append(sec)
    return out


def chapter_tally(rows: list[dict], ids: set[str]) -> dict[str, list[str]]:
    """Per chapter label, in the order the rows come: the rows naming a result of ``ids`` counted by kind, the
    errata, the revisions after data, and how many of those results its evidence rows check and hold."""
    out: dict[str, list[str]] = {}
    for label in dict.fromkeys(r["chapter"] for r in rows):
        mine = [r for r in rows if r["chapter"] == label]
        c = counts(mine)
        held = {
            ref
            for r in mine
            if r.get("kind", "value") in ("bound", "value") and r["verdict"] in ("holds", "erratum")
            for ref in r.get("refs", [])
            if ref in ids
        }
        out[label] = [
            f"{c['evidence']} ({c['bound']} bound, {c['value']} value)",
            str(c["consistency"]),
            str(c["erratum"]),
            str(c["revised"]),
            str(len(held)),
        ]
    return out


def _rows_by_chapter(app, fromdoc: str, rows: list[dict], ids: set[str], label_doc: dict[str, str]):
    env = app.env
    columns = {
        "Chapter": 27,
        "Evidence rows": 19,
        "Consistency rows": 16,
        "Errata": 10,
        "Revised after data": 14,
        "Results checked, holding": 14,
    }
    table, body, row = _table("coverage-chapters", columns)
    for label, cells in chapter_tally(rows, ids).items():
        doc = label_doc.get(label)
        title = nodes.paragraph()
        title += _link(app, fromdoc, doc, _title_nodes(env, doc)) if doc else nodes.Text(label)
        body += row([title, *cells])
    return table


def with_math(text: str) -> nodes.paragraph:
    """Plain text with ``$…$`` spans rendered as inline maths (MathJax)."""
    par = nodes.paragraph()
    for k, part in enumerate(text.split("$")):
        if part:
            par += nodes.math(part, part) if k % 2 else nodes.Text(part)
    return par


# ------------------------------------------------------------------------------- the status page
def _retired_anchor(row_id: str) -> str:
    return nodes.make_id(f"retired-{row_id}")


def _deviations(app, fromdoc: str):
    from . import registry

    srcdir = Path(app.srcdir)
    regs = registry.load_all(srcdir / "book" / "claims")
    docs = {chapter_label(srcdir, d): d for d in toc_chapters(srcdir)}
    items, retired = [], []
    for label, reg in regs.items():
        for rule in reg.rows.values():
            for rev in rule.revisions:
                items.append((rev.date, label, rule, rev))
        retired += list(reg.retired)
        for r in reg.retired:  # a retired row's rule may have been revised after data before it was retired
            items += [(rev.date, label, r, rev) for rev in r.revisions]
    after = [it for it in items if it[3].after_data]
    out = [
        nodes.paragraph(
            text=f"{len(after)} revisions of registered rules were made after seeing data, in "
            f"{len({it[2].id for it in after})} rows; {len(items) - len(after)} other revisions; {len(retired)} retired "
            "rows. Each is shown under its row in the chapter's claim table."
        )
    ]
    table, body, row = _table("deviations-table", {"Date": 10, "Row": 24, "Rule: was → now": 33, "Why, and its impact": 33})
    for date, label, rule, rev in sorted(after, key=lambda it: (it[0], it[2].id)):
        cell = nodes.paragraph()
        doc = docs.get(label)
        name = nodes.literal(text=rule.id)
        active = hasattr(rule, "kind")  # a retired row has no claim table entry: link to its line below
        if active:
            cell += _link(app, fromdoc, doc, [name], f"claim-{rule.id}") if doc else name
        else:
            cell += _link(app, fromdoc, fromdoc, [name], _retired_anchor(rule.id))
        claim = re.sub(r"\{([A-Za-z_]\w*)\}", r"⟨\1⟩", rule.claim)  # a placeholder the chapter fills
        cell += nodes.Text(f" {claim}" + ("" if active else " (row since retired)"))
        body += row([date, cell, f"{rev.was} → {rev.now}", f"{rev.rationale} Impact: {rev.impact}"])
    out.append(table)
    if retired:
        out.append(nodes.rubric(text="Retired rows"))
        t2, b2, row2 = _table("retired-table", {"Retired": 10, "Row": 30, "Reason": 60})
        for r in sorted(retired, key=lambda it: (it.retired, it.id)):
            reason = r.reason + (f" Replaced by {r.replaced_by}." if r.replaced_by else "")
            b2 += row2([r.retired, nodes.paragraph(text=f"{r.id}: {r.claim}", ids=[_retired_anchor(r.id)]), reason])
        out.append(t2)
    # the test's logic is the chapters' code: each change of a chapter's claim-check cells after its log began
    logs = {label: reg.claim_code for label, reg in regs.items() if reg.claim_code}
    later = sorted(((c, label) for label, log in logs.items() for c in log[1:]), key=lambda it: (it[0].date, it[1]))
    out.append(nodes.rubric(text="Changes of the claim-check code"))
    start = min((log[0].date for log in logs.values()), default="")
    out.append(
        nodes.paragraph(
            text=f"Each chapter's claim-check cells (every cell that reads a rule or adds a row) are fingerprinted from "
            f"{start} on (the claim_code log of its registry file; the test suite fails when the cells change without "
            f"an entry). {len(later)} changes logged since" + (":" if later else ".")
        )
    )
    if later:
        t3, b3, row3 = _table("code-changes-table", {"Date": 10, "Chapter": 20, "Change": 45, "Rules it changed": 25})
        for c, label in later:
            b3 += row3([c.date, label, c.change, ", ".join(c.rules_changed) or "none"])
        out.append(t3)
    return out


LEDGER_COLUMNS = (("cpu", "float64", "CPU"), ("cuda", "float64", "CUDA"), ("cuda", "float32", "float32 on CUDA"))


def ledger_runs(srcdir: Path) -> list[dict]:
    """The committed runs (``book/_generated/runs/*.json``): each ``{"records": [...]}`` of one build or check."""
    out = []
    for path in sorted((Path(srcdir) / "book" / "_generated" / "runs").glob("*.json")):
        data = json.loads(path.read_text())
        out.append({"name": path.stem, **data})
    return out


def ledger_cell(runs: list[dict], label: str, device: str, dtype: str) -> list[str]:
    """The ledger's cell of one chapter on one kind of machine: one line per committed run that holds records of the
    chapter there (falsified records left out), the latest first: ``"<scale>[, float32 requested]: <date>, <commit>:
    <n> ✅, …"``, counted over that run's records of the chapter on their last day. Empty when none."""
    lines = []
    for run in runs:
        recs = [
            r
            for r in run.get("records", [])
            if r["chapter"] == label and r["device"].split(":")[0] == device and r["dtype"] == dtype and not r.get("falsify")
        ]
        if not recs:
            continue
        last = max(r["date"] for r in recs)
        recs = [r for r in recs if r["date"][:10] == last[:10]]
        c = Counter(r["verdict"] for r in recs)
        verdicts = ", ".join(f"{n} {MARK[v]}" for v, n in sorted(c.items()))
        scales = "/".join(sorted({r["scale"] for r in recs}))
        requested = {r.get("requested_dtype") or r["dtype"] for r in recs} - {dtype}
        note = "".join(f", {q} requested" for q in sorted(requested))
        commits = "/".join(sorted({r["commit"][:7] for r in recs}))
        lines.append((last, f"{scales}{note}: {last[:10]}, {commits}: {verdicts}"))
    return [text for _, text in sorted(lines, reverse=True)]


def _ledger(app, fromdoc: str):
    srcdir = Path(app.srcdir)
    runs = ledger_runs(srcdir)
    cols = {"Chapter": 28} | {name: 24 for *_, name in LEDGER_COLUMNS}
    table, body, row = _table("ledger-table", cols)
    for doc in toc_chapters(srcdir):
        label = chapter_label(srcdir, doc)
        cells = [nodes.paragraph()]
        cells[0] += _link(app, fromdoc, doc, _title_nodes(app.env, doc))
        for dev, dtype, _ in LEDGER_COLUMNS:
            lines = ledger_cell(runs, label, dev, dtype)
            cell = nodes.container()
            for text in lines or ["not run"]:
                cell += nodes.paragraph(text=text)
            cells.append(cell)
        body += row(cells)
    return [table]


def _replace_placeholders(app, doctree, docname):
    for node in list(doctree.findall(chapter_table)):
        node.replace_self(_chapter_table(app, docname))
    for node in list(doctree.findall(coverage_table)):
        node.replace_self(_coverage_table(app, docname))
    for node in list(doctree.findall(deviations_list)):
        node.replace_self(_deviations(app, docname))
    for node in list(doctree.findall(ledger_table)):
        node.replace_self(_ledger(app, docname))


def _write_claims_json(app, exception):
    """``claims.json`` at the site's root: every record of this build's executed chapters."""
    if exception is not None or app.builder.format != "html":
        return
    records = [r for recs in _records_by_chapter(app).values() for r in recs]
    Path(app.outdir, "claims.json").write_text(json.dumps(records, indent=1, ensure_ascii=False))


def _always_reread_table_pages(app, env, added, changed, removed):
    # the tables depend on every chapter's outputs: re-read the pages that hold them on every build
    return sorted(getattr(env, "companion_chapter_table_docs", set()) - set(removed))


def _purge(app, env, docname):
    getattr(env, "companion_chapter_table_docs", set()).discard(docname)


def _merge(app, env, docnames, other):
    env.companion_chapter_table_docs = getattr(env, "companion_chapter_table_docs", set()) | getattr(
        other, "companion_chapter_table_docs", set()
    )


def _skip(self, node):
    raise nodes.SkipNode


def _paired_notebook_download(app, pagename, templatename, context, doctree):
    if not context.get("ipynb_source"):
        return
    paired = Path(app.srcdir, pagename).with_suffix(".ipynb")
    if paired.exists():
        target = Path(app.outdir, "_sources", context["ipynb_source"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paired, target)


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = (str(getattr(js, "filename", js) or ""), repr(sorted(getattr(js, "attributes", {}).items())))  # None == ""
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


TEX_PLAIN = [
    (re.compile(r"\\\(|\\\)|\$"), ""),
    (re.compile(r"\\propto\b\s*"), "∝ "),
    (re.compile(r"\^\{([^{}]*)\}"), r"^(\1)"),
    (re.compile(r"\\([A-Za-z]+)"), r"\1"),
]


def plain_title(text: str) -> str:
    """A title without TeX, for the browser's tab: ``The \\(O(T^{-1/L})\\) rate`` -> ``The O(T^(-1/L)) rate``."""
    for pat, rep in TEX_PLAIN:
        text = pat.sub(rep, text)
    return text


def _plain_tab_title(app, pagename, templatename, context, doctree):
    if context.get("title") and ("\\(" in context["title"] or "$" in context["title"]):
        context["title"] = plain_title(context["title"])


def setup(app):
    # priority 502: after sphinx-book-theme's add_launch_buttons (501), which copies the executed notebook there
    app.connect("html-page-context", _paired_notebook_download, priority=502)
    # 502 too: a later handler may never run, since Sphinx stops at the first one returning a template name
    app.connect("html-page-context", _dedupe_scripts, priority=502)
    app.connect("html-page-context", _plain_tab_title, priority=502)
    # MathJax on every page: a chapter title with maths appears in the navigation of pages without maths of their own
    app.set_html_assets_policy("always")
    app.add_css_file("companion.css")
    for node in (chapter_table, coverage_table, deviations_list, ledger_table):
        app.add_node(node, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_directive("companion-chapters", _directive(chapter_table))
    app.add_directive("companion-coverage", _directive(coverage_table))
    app.add_directive("companion-deviations", _directive(deviations_list))
    app.add_directive("companion-ledger", _directive(ledger_table))
    app.connect("build-finished", _write_claims_json)
    app.connect("doctree-resolved", _replace_placeholders)
    app.connect("env-get-outdated", _always_reread_table_pages)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "0.2"}
