"""tools/entry_search.py: the monotone ascent quoted by the entrywise-search finding of ``ch-parameter-ball``."""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import entry_search  # noqa: E402

from companion import widenet as wn  # noqa: E402


def _pairs(m=16):
    params, X, _ = wn.sweep_draws(m, 2, n=3, d=4, members=2, data_seed=0, init_seed=1)
    params = [p.detach().double() for p in params]
    X = X.double()
    rows, cols = torch.triu_indices(3, 3)
    Xp = torch.stack([X[:, rows], X[:, cols]], 2)
    return params, X, Xp, wn._pair_entries(params, Xp, wn.Net())[0]


def test_the_ascent_never_decreases_and_starts_at_the_first_order_point():
    params, X, Xp, g0 = _pairs()
    for sign in (1.0, -1.0):
        hist = entry_search.ascend(params, Xp, g0, wn.Net(), 0.5, sign, steps=6)
        assert hist.shape == (7, 2, 6)
        assert bool((hist[1:] >= hist[:-1]).all())
    first = wn.gram_entry_ascent(params, X, 0.5, wn.Net(), refine=0)["steps"][0]
    both = [entry_search.ascend(params, Xp, g0, wn.Net(), 0.5, s, steps=0)[0] for s in (1.0, -1.0)]
    torch.testing.assert_close(torch.maximum(*both).amax(-1), first, rtol=1e-12, atol=0)


def test_combined_and_compressed_directions_keep_their_norm():
    params, _, Xp, _ = _pairs()
    h = wn._scaled(*wn._pair_entry_gradients(params, Xp, wn.Net()), 0.5)
    g = wn._scaled(*wn._pair_entry_gradients(params, Xp, wn.Net(), h), 0.5)
    c = torch.full(h[1].shape[:2], 0.6, dtype=torch.float64)
    mix = entry_search.combine(c, h, 1 - c, g)
    dense = lambda hh: torch.cat([(U @ V.transpose(-1, -2)).flatten(2) for U, V in hh[0]] + [hh[1]], -1)  # noqa: E731
    torch.testing.assert_close(dense(entry_search.compress(mix)), dense(mix), rtol=0, atol=1e-12)
    torch.testing.assert_close(entry_search.inner(mix, mix), (dense(mix) ** 2).sum(-1), rtol=1e-12, atol=0)
