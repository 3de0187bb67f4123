"""Tests of companion.search (random pairs and the adversarial probes of paper A's smoothness statements;
ch-smoothness)."""

import math

import pytest
import torch

from companion import deepnet, search, smoothness


def test_random_pairs_cover_the_requested_norms(gen):
    p1, p2 = search.random_pairs([3, 4, 4, 1], 200, (0.5, 8.0), (1e-2, 2.0), generator=gen)
    a, r = deepnet.norm(p1), deepnet.norm([v - u for u, v in zip(p1, p2)])
    assert [w.shape for w in p1] == [(200, 4, 3), (200, 4, 4), (200, 1, 4)] == [w.shape for w in p2]
    assert (a >= 0.5 * (1 - 1e-12)).all() and (a <= 8.0 * (1 + 1e-12)).all()
    assert (r >= 1e-2 * (1 - 1e-12)).all() and (r <= 2.0 * (1 + 1e-12)).all()
    assert a.log().std() > 0.5 * math.log(16) / math.sqrt(12)  # spread over the decades, not one norm
    q1, _ = search.random_pairs([3, 4, 4, 1], 200, (0.5, 8.0), (1e-2, 2.0), generator=torch.Generator().manual_seed(1234))
    assert all(torch.equal(u, v) for u, v in zip(p1, q1))  # one seed, one draw
    with pytest.raises(ValueError, match="norm_range"):
        search.random_pairs([3, 4, 1], 2, (2.0, 1.0), generator=gen)


def test_tightness_probe_stays_below_one(gen):
    best = search.tightness_probe("4.3", [1, 1, 1], "linear", starts=8, steps=40, generator=gen)
    assert best.shape == (8,) and (best <= 1).all() and best.max() > 0.1


def test_proof_probe_finds_near_tight_cases_and_never_exceeds_one(gen):
    best = search.proof_probe([1, 1, 1], "linear", starts=2, steps=30, generator=gen)
    assert set(best) == set(smoothness.PROOF_STEPS)
    lemmas = search.proof_probe([1, 1, 1], "linear", statements=smoothness.LEMMAS, starts=2, steps=30, generator=gen)
    assert set(lemmas) == set(smoothness.LEMMAS) and all((v <= 1).all() for v in lemmas.values())
    with pytest.raises(ValueError, match="statements"):
        search.proof_probe([1, 1, 1], "linear", statements=("4.9",), generator=gen)
    for k, v in best.items():
        assert v.shape == (2,) and (v <= 1 + 1e-12).all(), k
    assert best["A.5"].max() >= 1 - 1e-12  # delta_L = sigma'(z_L) = 1 for the linear activation
    assert best["A.1"].max() > 0.5


def test_proof_probes_batches_activations(gen):
    out = search.proof_probes([2, 2, 1], ("linear", "sigmoid"), statements=("A.5", "4.3"), starts=2, steps=5, generator=gen)
    assert set(out) == {"linear", "sigmoid"} and all(set(v) == {"A.5", "4.3"} for v in out.values())
    assert out["linear"]["A.5"].max() >= 1 - 1e-12  # delta_L = 1 for the linear activation
    assert out["sigmoid"]["A.5"].max() <= 0.25 + 1e-12  # sigmoid' <= 1/4
    with pytest.raises(ValueError, match="distinct"):
        search.proof_probes([2, 2, 1], ("linear", "linear"), generator=gen)
