"""companion.certify: interval branch and bound proves what holds on a whole box, finds a counterexample where it
fails, encloses a supremum, and says when its budget ran out."""

import math

import pytest

from companion import certify


def test_a_true_inequality_is_proved_with_its_margin():
    c = certify.lower_bound(lambda t: t.sin() + 0.5, [(0.0, 3.0)])
    assert c.holds and 0.49 < c.value <= 0.5 and c.margin == pytest.approx(c.value - 0.0)
    two = certify.lower_bound(lambda x, y: (x - y) ** 2 + x * y + 1, [(-1.0, 1.0), (0.0, 2.0)], bound=0.0)
    assert two.holds and two.boxes > 1


def test_a_false_inequality_yields_a_counterexample():
    c = certify.lower_bound(lambda t: t.cos(), [(0.0, 3.0)])
    assert not c.holds and c.counterexample is not None and math.cos(c.counterexample[0]) < 0


def test_an_inequality_tight_at_the_boundary_is_undecided_within_the_budget():
    c = certify.lower_bound(lambda t: t, [(0.0, 1.0)], max_boxes=200)  # t >= 0 with equality at t = 0
    assert not c.holds and c.counterexample is None and c.boxes >= 200
    assert certify.lower_bound(lambda t: t, [(1e-3, 1.0)]).holds  # stop short of the boundary


def test_the_supremum_is_enclosed():
    # sup |tanh''| = 4 / (3 sqrt 3), attained at tanh x = 1 / sqrt 3
    c = certify.maximum(lambda x: abs(-2 * x.tanh() * (1 - x.tanh() ** 2)), [(-5.0, 5.0)])
    exact = 4 / (3 * math.sqrt(3))
    assert c.holds and c.attained <= exact <= c.value and c.value - c.attained <= 1e-6


def test_bad_domains_are_refused():
    with pytest.raises(ValueError, match="domain"):
        certify.lower_bound(lambda t: t, [(1.0, 0.0)])
    with pytest.raises(ValueError, match="domain"):
        certify.maximum(lambda t: t, [])
