"""companion.paramlist: arithmetic on parameter lists (a leading ensemble axis, members independent) against the
flattened vectors, and its input checks."""

import pytest
import torch

from companion import paramlist

F64 = torch.float64


def _lists(E=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(E, 4, 2), (E, 5), (E, 1, 1, 3)]
    return [torch.randn(s, generator=g, dtype=F64) for s in shapes], [torch.randn(s, generator=g, dtype=F64) for s in shapes]


def _flat(params):
    return torch.cat([p.flatten(1) for p in params], 1)  # (E, total)


def test_the_operations_are_those_of_each_member_s_flattened_vector():
    p, h = _lists()
    P, H = _flat(p), _flat(h)
    assert torch.allclose(_flat(paramlist.add(p, h, t=-0.5)), P - 0.5 * H, rtol=0, atol=1e-15)
    assert torch.allclose(paramlist.sq_norm(h), (H**2).sum(1), rtol=1e-15, atol=0)
    assert torch.allclose(paramlist.dot(p, h), (P * H).sum(1), rtol=1e-14, atol=1e-15)
    D = torch.tensor([1.0, 2.0, 0.5], dtype=F64)
    scaled = paramlist.scale_to(h, D)
    assert torch.allclose(paramlist.sq_norm(scaled).sqrt(), D, rtol=1e-15, atol=0)
    assert torch.allclose(_flat(scaled), H / H.norm(dim=1, keepdim=True) * D[:, None], rtol=1e-14, atol=0)
    assert [q.shape for q in scaled] == [q.shape for q in h]


def test_members_do_not_mix():
    p, h = _lists()
    q = [t.clone() for t in p]
    q[0][1] += 1.0  # change member 1 only
    assert torch.equal(paramlist.dot(p, h)[[0, 2]], paramlist.dot(q, h)[[0, 2]])
    assert not torch.equal(paramlist.dot(p, h)[1], paramlist.dot(q, h)[1])


def test_bad_lists_are_refused():
    p, h = _lists()
    with pytest.raises(ValueError, match="non-empty list"):
        paramlist.add([], [])
    with pytest.raises(ValueError, match="as many tensors"):
        paramlist.add(p, h[:2])
    with pytest.raises(ValueError, match="shape"):
        paramlist.dot(p, [h[0], h[1][:, :4], h[2]])
    with pytest.raises(ValueError):
        paramlist.add(p, [h[0].float(), h[1], h[2]])  # another dtype
    with pytest.raises(ValueError):
        paramlist.add(p, [h[0].to("meta"), h[1], h[2]])  # another device
    h[1][2] = 0.0
    h[0][2], h[2][2] = 0.0, 0.0
    with pytest.raises(ValueError, match="zero direction"):
        paramlist.scale_to(h, 1.0)
