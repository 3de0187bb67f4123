"""The claim check that ends every chapter: a table (claim · paper · measured · verdict) and an assert.

Usage in a chapter::

    check = claims.ClaimCheck("Lemma 4.2")
    check.add("explicit gradient = autograd", paper="exact", measured=f"{err:.1e}", passed=err <= 1e-12)
    check.report()                                  # shows the table
    assert check.all_passed, check.failures()       # fails the chapter (and its nbval test) on a failed claim
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Claim:
    claim: str
    paper: str
    measured: str
    passed: bool


@dataclass
class ClaimCheck:
    """Collects claims, renders them as a table, and asserts them all at once."""

    title: str
    rows: list[Claim] = field(default_factory=list)

    def add(self, claim: str, *, paper: str, measured: str, passed: bool) -> bool:
        """Record one claim; ``passed`` must be an actual boolean outcome, not a constant."""
        passed = bool(passed)
        self.rows.append(Claim(claim, paper, measured, passed))
        return passed

    @property
    def all_passed(self) -> bool:
        return bool(self.rows) and all(r.passed for r in self.rows)

    def _repr_html_(self) -> str:
        head = "<tr><th>claim</th><th>paper says</th><th>measured</th><th>verdict</th></tr>"
        body = "".join(
            f"<tr><td>{html.escape(r.claim)}</td><td>{html.escape(r.paper)}</td><td>{html.escape(r.measured)}</td>"
            f"<td>{'✅ holds' if r.passed else '❌ fails'}</td></tr>" for r in self.rows)
        return f"<table class='claim-check'><caption>Claim check: {html.escape(self.title)}</caption>{head}{body}</table>"

    def __str__(self) -> str:
        lines = [f"Claim check: {self.title}"]
        lines += [f"  [{'PASS' if r.passed else 'FAIL'}] {r.claim} | paper: {r.paper} | measured: {r.measured}" for r in self.rows]
        return "\n".join(lines)

    def failures(self) -> str:
        """The failed claims with their measurements, one per line (the chapter's assertion message)."""
        if not self.rows:
            return f"{self.title}: no claims were checked"
        return "\n".join(f"{self.title}: {r.claim} failed (paper: {r.paper}; measured: {r.measured})"
                         for r in self.rows if not r.passed)

    def report(self) -> None:
        """Display the table (HTML in a notebook, text elsewhere). The chapter asserts ``all_passed`` next."""
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
