"""companion.pl: the reduced gaps of Lemmas 8, 12, 13 equal the minimum over the target of the population closed forms,
the paper's printed formulas, and their boundary values; Jet derivatives; the certificates hold and fail where they
should."""

import math

import pytest
import torch
from flint import arb

from companion import pl
from companion import population as P


def _grid():
    r = torch.linspace(0.1, 3.0, 30, dtype=torch.float64).repeat_interleave(25)  # r = 0: the limit, below
    theta = torch.linspace(0.0, math.pi, 25, dtype=torch.float64).repeat(30)
    return r, theta


def test_gaps_equal_the_minimum_over_the_target_of_the_closed_forms():
    r, theta = _grid()
    forms = P.target_forms(P.effective_pair(r, theta, dtype=torch.float64))
    reference = {
        8: P.min_over_target(forms["grad2"], forms["L"], 0.05),
        13: P.min_over_target(forms["L"], forms["err"], 0.05),
        12: P.min_over_target(2.5 * forms["err"], forms["grad2"], 1.0),
    }
    for lemma, ref in reference.items():
        assert (pl.gap(lemma, r, theta) - ref).abs().max() < 1e-12


def test_the_printed_formulas_are_the_gaps_for_every_ratio():
    r, theta = _grid()
    assert (pl.printed_figure4(r, theta, 0.05) - pl.gap(8, r, theta)).abs().max() < 1e-13
    assert (pl.printed_figure5(r, theta, 0.05) - pl.gap(13, r, theta)).abs().max() < 1e-13
    # the loss without the factor 1/2 is a different function
    assert abs(pl.printed_figure5(1.0, 2.0) - pl.gap(13, 1.0, 2.0, 0.025)) > 1e-3


def test_symmetry_r_to_one_over_r():
    for lemma in (8, 12, 13):
        for r, th in ((0.3, 2.0), (0.7, 1.0), (0.05, 3.0)):
            assert pl.gap(lemma, r, th) == pytest.approx(r**2 * pl.gap(lemma, 1 / r, th), rel=1e-12, abs=1e-14)


def test_boundary_value_and_zero_slope_at_theta_pi():
    for lemma in (8, 12, 13):
        for r in (0.0, 0.25, 0.5, 1.0, 2.0):
            at_pi = pl.gap(lemma, r, pl.Jet.variable(math.pi))
            assert at_pi.value == pytest.approx(pl.boundary_constant(lemma) * (r - 1) ** 2, abs=1e-14)
            assert abs(at_pi.d1) < 1e-14


def test_jet_derivatives_match_finite_differences():
    f = lambda x: (x * x + 1).sin() / (2 + x.cos()) if isinstance(x, pl.Jet) else math.sin(x * x + 1) / (2 + math.cos(x))
    x0, h = 0.7, 1e-5
    jet = f(pl.Jet.variable(x0))
    assert jet.value == pytest.approx(f(x0))
    assert jet.d1 == pytest.approx((f(x0 + h) - f(x0 - h)) / (2 * h), rel=1e-8)
    assert jet.d2 == pytest.approx((f(x0 + h) - 2 * f(x0) + f(x0 - h)) / h**2, rel=1e-4)
    with pytest.raises(ValueError, match="powers"):
        pl.Jet.variable(1.0) ** -1


def test_the_three_lemmas_are_certified_and_a_wrong_constant_is_not():
    twentieth = arb(1) / 20
    for lemma, t_max, coef in ((8, math.pi / 2, twentieth), (13, math.pi / 2, twentieth), (12, math.pi, arb(5) / 2)):
        cert = pl.certify_gap(lambda r, th: pl.gap(lemma, r, th, coef), t_max=t_max, corner=(0.2, 0.2))
        assert cert.holds and cert.margin > 0 and cert.curvature > 0 and cert.boxes > 3
    # Lemma 8 with alpha = 0.2 fails near theta = pi/2 (the worst ratio is about 0.083)
    wrong = pl.certify_gap(lambda r, th: pl.gap(8, r, th, arb(1) / 5), t_max=math.pi / 2, corner=(0.2, 0.2))
    assert not wrong.holds
    assert any(c.counterexample is not None for _, _, c in wrong.pieces)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="lemma"):
        pl.gap(9, 1.0, 2.0)
    with pytest.raises(ValueError, match="convex"):
        pl.gap(13, 1.0, 2.0, 0.3)
    with pytest.raises(ValueError, match="rho"):
        pl.certify_gap(lambda r, th: pl.gap(13, r, th), t_max=1.0, corner=(0.2, 2.0))
