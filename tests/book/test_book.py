"""The book's structure: chapter/notebook pairs, the Colab install cell, the table of contents, the -W build."""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import chapters  # noqa: E402


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


def test_every_chapter_pair_is_in_sync():
    assert chapters.chapters(), "no chapters found"
    assert chapters.problems() == []


def test_install_cell_url_matches_config():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert url.startswith("https://github.com/")
    for md in chapters.chapters():
        nb = md.with_suffix(".ipynb").read_text()
        assert f"companion @ git+{url}" in nb, md
        cell = re.search(r"subprocess\.run\(\s*\[(.*?)\]", md.read_text(), re.S).group(1)
        assert "torch" not in cell, "must not reinstall torch"


def test_toc_lists_exactly_the_chapters():
    listed = {f for f in _toc_files()}
    for f in listed:
        assert (ROOT / f"{f}.md").exists(), f"_toc.yml names a missing file {f}"
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in chapters.chapters()}
    assert on_disk <= listed, f"chapters missing from _toc.yml: {sorted(on_disk - listed)}"


def test_every_chapter_ends_in_a_claim_check():
    for md in chapters.chapters():
        text = md.read_text()
        assert "claims.ClaimCheck(" in text and "assert check.all_passed" in text, f"{md.name}: no claim check"
        assert text.index("assert check.all_passed") > text.index(".report()") > text.index("{code-cell}"), md.name
        assert "prf:" in text, f"{md.name}: the claim should be stated in a prf box"


def test_under_xdist_the_chapters_and_the_tests_reading_them_are_one_unit_of_work(request):
    """`make test` runs on two xdist workers; a chapter's cells share one kernel, and the coverage test, the -W build
    and the browser check read what the chapters left in their worker, so all of them must go to the same one."""
    conftest = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))
    readers = {
        "test_coverage.py": "test_every_result_is_checked_by_a_row_that_ran_and_holds",
        "test_book.py": "test_book_builds_with_warnings_as_errors",
        "test_browser.py": "test_page_reads_well_in_the_browser[book/index]",
    }
    for file, name in readers.items():  # the names the grouping matches are the tests' names
        assert f"def {name.split('[')[0]}(" in (ROOT / "tests" / "book" / file).read_text(), name
    ids = ["book/paper_a/01_setup.ipynb::Cell 0", *(f"tests/book/{f}::{n}" for f, n in readers.items())]
    assert {conftest.xdist_scope(i) for i in ids} == {conftest.CHAPTERS_GROUP}
    other = "tests/unit/test_stats.py::test_wilson_known_value"
    assert conftest.xdist_scope(other) == other


def test_book_builds_with_warnings_as_errors(built_site):
    code, log, html, executed = built_site
    assert code == 0, log[-4000:]
    if executed:  # built from nbval's outputs: no chapter may have missed its cached outputs
        assert "Executing notebook" not in log, "\n".join(line for line in log.splitlines() if "notebook" in line)
    assert (html / "book" / "paper_a" / "01_setup.html").exists()
    page = (html / "book" / "paper_a" / "01_setup.html").read_text()
    assert "colab.research.google.com/github/" in page and "01_setup.ipynb" in page


# ------------------------------------------------------------------------------ chapter conventions
BARE_RANDOM = re.compile(
    r"torch\.(randn|rand|randint|randperm|normal|bernoulli|multinomial|randn_like|rand_like)\(|"
    r"\.(uniform_|normal_|bernoulli_|exponential_|random_)\(|np\.random\.(default_rng|seed|rand|randn)\("
)
PRIVATE_CALL = re.compile(r"\b[A-Za-z_][\w.]*\._[a-z]\w*\(")
MAX_CELL_STATEMENTS = 30


def _glued_patterns(code: str) -> list[re.Pattern]:
    """The keys a chapter's code glues, as patterns: ``glue("key", …)`` exactly, ``glue(f"key_l{L}", …)`` with every
    replacement field read as any text."""
    out = []
    for prefix, key in re.findall(r"\bglue\(\s*(f?)([\"'][^\"']+[\"'])", code):
        body = key[1:-1]
        parts = re.split(r"\{[^}]*\}", body) if prefix else [body]
        out.append(re.compile(".+".join(re.escape(part) for part in parts) + r"\Z"))
    return out


def test_every_glued_number_in_the_prose_is_glued_by_the_code():
    """The execution-off -W build of the test suite cannot see a missing glue key (it has no outputs), so the prose's
    ``{glue:text}`key:format``` references are matched against the code's ``glue(...)`` calls here."""
    import jupytext

    for md in chapters.chapters():
        nb = jupytext.read(md)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        patterns = _glued_patterns(code)
        for key in re.findall(r"\{glue(?::\w+)?\}`([^`:]+)", prose):
            assert any(p.match(key) for p in patterns), f"{md.name}: the prose cites glue key {key!r} that no cell glues"


def _code_cells(md: Path) -> list[tuple[int, list[str]]]:
    """(index, non-blank source lines) of every code cell of a chapter."""
    import jupytext

    nb = jupytext.read(md)
    return [(i, [ln for ln in c.source.splitlines() if ln.strip()]) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _statements(lines: list[str]) -> int:
    """Logical lines of a cell: a statement the formatter wraps over several lines counts once, a comment not at all."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    return sum(t.type == tokenize.NEWLINE for t in tokens)


def test_chapters_draw_random_numbers_only_through_the_package():
    """The randomness policy (companion.device): a bare torch/numpy sampler would draw another stream on a GPU."""
    bad = [
        f"{md.name}:{i}: {ln.strip()}"
        for md in chapters.chapters()
        for i, ln in enumerate(md.read_text().splitlines(), 1)
        if BARE_RANDOM.search(ln)
    ]
    assert bad == [], "\n".join(bad)


def test_chapters_call_no_private_names_and_keep_cells_short():
    problems = []
    for md in chapters.chapters():
        for i, lines in _code_cells(md):
            problems += [
                f"{md.name} cell {i}: private name in {ln.strip()!r}"
                for ln in lines
                if PRIVATE_CALL.search(ln) and not ln.lstrip().startswith("#")
            ]
            if (n := _statements(lines)) > MAX_CELL_STATEMENTS:
                problems.append(f"{md.name} cell {i}: {n} statements (at most {MAX_CELL_STATEMENTS})")
    assert problems == [], "\n".join(problems)


def test_chapters_share_the_running_box_and_name_their_records():
    for md in chapters.chapters():
        text = md.read_text()
        assert "{include} ../_snippets/running.md" in text, f"{md.name}: the shared 'Running this chapter' box"
        label = re.search(r"^\((ch-[a-z0-9-]+)\)=$", text, re.M)
        assert label, f"{md.name}: a (ch-...)= label before the title"
        assert f'claims.ClaimCheck("{label.group(1)}"' in text, f"{md.name}: the claim check is named by the label"
        assert "set_num_threads" not in text, f"{md.name}: chapters do not change global thread settings"


# A name of one to three letters and an underscore (``m_``, ``hi_``) says nothing a reader can use. No chapter binds
# one; the allowance per chapter stays empty (a name that must stay, e.g. the paper's own symbol, would go here).
SHORT_NAME = re.compile(r"[A-Za-z]{1,3}_")
SHORT_NAMES_ALLOWED: dict[str, set[str]] = {}


def _bound_names(source: str) -> set[str]:
    """The names a cell binds: assignment and loop targets, ``with … as``, comprehensions, parameters, definitions."""
    import ast

    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
    return found


def test_chapters_bind_no_letters_and_underscore_names():
    import jupytext

    problems = []
    for md in chapters.chapters():
        cells = [c.source for c in jupytext.read(md).cells if c.cell_type == "code"]
        short = {name for src in cells for name in _bound_names(src) if SHORT_NAME.fullmatch(name)}
        if new := sorted(short - SHORT_NAMES_ALLOWED.get(md.name, set())):
            problems.append(f"{md.name}: {', '.join(new)} (name what the value is)")
    assert problems == [], "\n".join(problems)


def _imported_modules(lines: list[str]) -> set[str]:
    """Top-level modules a cell imports (``import a.b``, ``from a.b import c``); relative imports do not occur."""
    import ast

    tree = ast.parse("\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!"))))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_chapters_import_only_the_package_its_dependencies_and_the_kernel():
    """A reader who installs ``companion`` (Colab's install cell, a GPU machine) has the package's dependencies and a
    Jupyter kernel, not the book's build (MyST-NB, Sphinx): a chapter importing one of those stops at its first cell.
    Allowed: the standard library, ``companion``, the distributions of pyproject.toml's ``dependencies`` and extras,
    and IPython (every kernel's)."""
    import importlib.metadata as md_

    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    allowed_dists = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    allowed_dists |= {"ipython"}
    providers = md_.packages_distributions()

    def allowed(module: str) -> bool:
        if module in sys.stdlib_module_names or module == "companion":
            return True
        return any(dist.lower().replace("_", "-") in allowed_dists for dist in providers.get(module, []))

    bad = sorted(
        f"{md.name} cell {i}: import {m}"
        for md in chapters.chapters()
        for i, lines in _code_cells(md)
        for m in _imported_modules(lines)
        if not allowed(m)
    )
    assert bad == [], "\n".join(bad)
