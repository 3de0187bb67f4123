"""Tests of companion.ratios: the one-pass log ratios of paper A's smoothness statements equal the checked functions
of companion.smoothness (ch-smoothness)."""

import torch

from companion import deepnet, ratios, search, smoothness


def test_proof_log_ratios_equal_the_checked_functions(gen):
    """The probe's lean path gives the values of lemma_4_1, equation_14 and appendix_a."""
    p1, p2 = search.random_pairs([3, 4, 4, 1], 20, generator=gen)
    X = deepnet.ball_data(5, 3, generator=gen)
    y = torch.randn(5, generator=gen, dtype=torch.float64).to(X)
    for act in ("linear", "softplus"):
        got = {k: torch.exp(v) for k, v in ratios.proof_log_ratios(p1, p2, X, y, act).items()}
        assert set(got) == set(smoothness.STATEMENTS)
        comps = {
            "4.1": smoothness.lemma_4_1(p1, p2, X, y, act),
            **smoothness.appendix_a(p1, p2, X, act),
            "4.3": smoothness.lemma_4_3(p1, p2, X, act),
            "4.4": smoothness.lemma_4_4(p1, p2, X, act),
            "4.5": smoothness.lemma_4_5(p1, p2, X, y, act),
        }
        for k, row in got.items():
            if k == "14":
                want = torch.maximum(
                    smoothness.equation_14(p1, X, act).ratio.amax(1), smoothness.equation_14(p2, X, act).ratio.amax(1)
                )
            else:
                r = comps[k].ratio
                r = r.flatten(1).amax(1) if r.ndim > 1 else r
                want = r.view(2, -1).amax(0) if r.shape[0] == 40 else r
            assert torch.allclose(row, want, rtol=1e-10), k


def test_each_statement_alone_equals_its_value_among_all(gen):
    """Asked for one statement (Lemma 4.1 alone has no polynomial right-hand side), the lean path returns the value it
    returns among all of them."""
    p1, p2 = search.random_pairs([3, 4, 4, 1], 6, generator=gen)
    X = deepnet.ball_data(5, 3, generator=gen)
    y = torch.randn(5, generator=gen, dtype=torch.float64).to(X)
    every = ratios.proof_log_ratios(p1, p2, X, y, "tanh")
    for k in smoothness.STATEMENTS:
        alone = ratios.proof_log_ratios(p1, p2, X, y, "tanh", [k])
        assert list(alone) == [k] and torch.allclose(alone[k], every[k], rtol=1e-12, atol=0), k
