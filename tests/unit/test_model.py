"""Every network module speaks companion.model's protocol: the four verbs with their signatures over a parameter list
with a leading ensemble axis, loss_and_gradient equal to autograd, the closure's restrict contract, and gd.run (with
and without a stop rule) on every model without an adapter."""

import doctest
import inspect
import typing

import pytest
import torch

from companion import deepnet, device, fused, gd, model, population, relunet, widenet

F64 = torch.float64
E = 4
MODULES = {"deepnet": deepnet, "relunet": relunet, "population": population, "fused": fused, "widenet": widenet}
DATA_NAMES = {"population": ("target",)}  # the others take (X, Y)


class Case:
    """One model on a tiny problem: its module, parameters, data, options, and an autograd reference loss."""

    def __init__(self, module, params, data, options, reference, step):
        self.module, self.params, self.data, self.options = module, params, data, options
        self.reference, self.step = reference, step

    def closure(self):
        return self.module.make_loss_and_grad(*self.data, **self.options)


def _gen(seed=0):
    return device.generator(seed)


def _deepnet(per_member):
    g = _gen(1)
    X = deepnet.ball_data(E * 9 if per_member else 9, 3, generator=g, device="cpu")
    X = X.reshape(E, 9, 3) if per_member else X
    y = 0.5 * X[..., 0]
    params = deepnet.init_params([3, 5, 4, 1], E, generator=g, device="cpu")
    return Case(deepnet, params, (X, y), {"act": "tanh"}, lambda p: ((deepnet.forward(p, X, "tanh") - y) ** 2).mean(-1), 0.2)


def _two_layer_data(per_member, r):
    g = _gen(2)
    d = 5
    A = relunet.unit_target(d, device="cpu") if r is None else relunet.orthonormal_rows(r, d, generator=g, device="cpu")
    X, Y = relunet.gaussian_data(30, d, A, ensemble=E if per_member else None, generator=g, device="cpu")
    params = relunet.init_params(3, d, E, 0.5, r=r, generator=g, device="cpu")
    return A, X, Y, params


def _empirical(W, V, X, Y):
    P = relunet.forward([W, V], X)
    return 0.5 * ((P - Y) ** 2).reshape(E, -1).sum(-1) / X.shape[-2]


def _relunet(per_member=False, r=None, fixed=None):
    _, X, Y, (W, V) = _two_layer_data(per_member, r)
    if fixed is None:
        return Case(relunet, [W, V], (X, Y), {}, lambda p: _empirical(*p, X, Y), 0.1)
    v = V[0] if fixed == "shared" else V  # (k,) / (k, r) for every member, or one per member
    Vf = v.expand(E, *v.shape) if fixed == "shared" else v
    return Case(relunet, [W], (X, Y), {"fixed_v": v}, lambda p: _empirical(p[0], Vf, X, Y), 0.1)


def _population(r=None, fixed=None, form="gram"):
    A, _, _, (W, V) = _two_layer_data(False, r)

    def reference(W, V):
        if r is None:
            return population.loss(W, V, A)
        return sum(population.loss(W, V[..., j], A[j]) for j in range(r))  # r outputs: a sum of one-output losses

    opts = {"form": form}
    if fixed is None:
        return Case(population, [W, V], (A,), opts, lambda p: reference(*p), 0.1)
    v = V[0] if fixed == "shared" else V
    Vf = v.expand(E, *v.shape) if fixed == "shared" else v
    return Case(population, [W], (A,), {**opts, "fixed_v": v}, lambda p: reference(p[0], Vf), 0.1)


def _fused():
    _, X, Y, (W, V) = _two_layer_data(False, None)
    return Case(fused, [W, V], (X, Y), {"mode": None}, lambda p: _empirical(*p, X, Y), 0.1)


def _widenet(arch, per_member):
    g = _gen(3)
    net = widenet.Net(arch)
    X = widenet.sphere_inputs(E * 5 if per_member else 5, 3, generator=g, device="cpu")
    X = X.reshape(E, 5, 3) if per_member else X
    y = device.randn((E, 5), generator=g, device="cpu")
    params = widenet.init_params(3, 8, 3, E, generator=g, device="cpu")
    return Case(widenet, params, (X, y), {"net": net}, lambda p: 0.5 * ((widenet.forward(p, X, net) - y) ** 2).sum(-1), 0.02)


CASES = {
    "deepnet": lambda: _deepnet(False),
    "deepnet-per-member": lambda: _deepnet(True),
    "relunet": lambda: _relunet(),
    "relunet-per-member": lambda: _relunet(per_member=True),
    "relunet-r-outputs": lambda: _relunet(r=2),
    "relunet-fixed-v-shared": lambda: _relunet(fixed="shared"),
    "relunet-fixed-v-per-member": lambda: _relunet(per_member=True, fixed="per-member"),
    "relunet-r-outputs-fixed-v-shared": lambda: _relunet(r=2, fixed="shared"),
    "population": lambda: _population(),
    "population-kahan": lambda: _population(form="kahan"),
    "population-r-outputs": lambda: _population(r=2),
    "population-fixed-v-shared": lambda: _population(fixed="shared", form="kahan"),
    "population-fixed-v-per-member": lambda: _population(fixed="per-member"),
    "fused": _fused,
    "widenet-fc": lambda: _widenet("fc", False),
    "widenet-res-per-member": lambda: _widenet("res", True),
}


def _leading(fn, count):
    """The names of the first ``count`` parameters of ``fn``, each of which must be positional."""
    ps = list(inspect.signature(fn).parameters.values())[:count]
    assert all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps), fn
    return [p.name.lower() for p in ps]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_model_module_speaks_the_protocol(name):
    module = MODULES[name]
    assert isinstance(module, model.Model)
    data = [n.lower() for n in DATA_NAMES.get(name, ("X", "Y"))]
    assert _leading(module.forward, 2) == ["params", "x"]
    assert _leading(module.loss_and_gradient, 1 + len(data)) == ["params", *data]
    assert _leading(module.make_loss_and_grad, len(data)) == data
    assert typing.get_type_hints(module.init_params)["return"] == list[torch.Tensor]
    for verb in model.VERBS:
        assert verb in module.__all__, (name, verb)
        doc = inspect.getdoc(getattr(module, verb))
        assert all(s in doc for s in ("Parameters\n----------", "Returns\n-------", ":ref:`ch-")), (name, verb)
    assert "Examples\n--------\n" in inspect.getdoc(module.make_loss_and_grad)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_make_loss_and_grad_examples_run(name):
    fn = MODULES[name].make_loss_and_grad
    tests = doctest.DocTestFinder().find(fn, name, globs={})
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradient_matches_autograd(case):
    c = CASES[case]()
    loss, grads = c.module.loss_and_gradient(c.params, *c.data, **c.options)
    assert loss.shape == (E,) and isinstance(grads, list) and len(grads) == len(c.params)
    leaves = [p.detach().clone().requires_grad_(True) for p in c.params]
    with torch.enable_grad():
        ref = c.reference(leaves)
        ref_grads = torch.autograd.grad(ref.sum(), leaves)
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-11, atol=1e-13)
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-12 * max(1.0, r.abs().max().item()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_closure_equals_the_verb_and_keeps_the_restrict_contract(case):
    c = CASES[case]()
    f = c.closure()
    assert isinstance(f, model.LossAndGrad)
    loss, grads = f(c.params)
    ref_loss, ref_grads = c.module.loss_and_gradient(c.params, *c.data, **c.options)
    assert torch.equal(loss, ref_loss) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    index = torch.tensor([1, 3])
    sub_loss, sub_grads = f.restrict(index)([p[index] for p in c.params])
    torch.testing.assert_close(sub_loss, loss[index], rtol=1e-13, atol=1e-15)
    for a, b in zip(sub_grads, grads):
        torch.testing.assert_close(a, b[index], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gd_runs_every_model_with_and_without_a_stop_rule(case):
    c = CASES[case]()
    f = c.closure()
    ref = gd.run(f, c.params, 40, c.step, record_at=[0, 20, 40], progress=False)
    assert not ref.diverged.any() and torch.isfinite(ref.history["loss"]).all()
    assert (ref.history["loss"][-1] < ref.history["loss"][0]).all()
    even = lambda p, loss, g: torch.arange(loss.shape[0]) % 2 == 0  # members 0 and 2 leave at the first check
    got = gd.run(f, c.params, 40, c.step, record_at=[0, 20, 40], stop=even, check_every=20, progress=False)
    assert got.stopped_at.tolist() == [20, -1, 20, -1]
    torch.testing.assert_close(got.history["loss"][:2], ref.history["loss"][:2], rtol=1e-13, atol=1e-15)
    for p, q in zip(got.params, ref.params):
        torch.testing.assert_close(p[1::2], q[1::2], rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("module", [relunet, population])
def test_fixed_output_weights_shared_or_per_member_are_one_thing(module):
    """Both paper-B models take fixed output weights through model.two_layer_closure: a shared (k,) or (k, r) equals
    the same weights given per member, and restricting slices per-member weights only."""
    for r in (None, 2):
        A, X, Y, (W, V) = _two_layer_data(False, r)
        data = (A,) if module is population else (X, Y)
        shared = module.make_loss_and_grad(*data, fixed_v=V[0])
        per_member = module.make_loss_and_grad(*data, fixed_v=V[0].expand(E, *V[0].shape))
        a, b = shared([W]), per_member([W])
        assert torch.equal(a[0], b[0]) and torch.equal(a[1][0], b[1][0])
        index = torch.tensor([0, 2])
        c, d = shared.restrict(index)([W[index]]), per_member.restrict(index)([W[index]])
        torch.testing.assert_close(c[0], d[0], rtol=0, atol=0)
        with pytest.raises(ValueError, match=r"params must be \[W\]"):
            shared([W, V])
        with pytest.raises(ValueError, match=r"params must be \[W, v\]"):
            module.make_loss_and_grad(*data)([W])


def test_relunet_init_params_schemes_are_the_named_initialisations():
    for scheme, fn, args in (
        ("xavier", relunet.xavier_init, (3, 4, 2, 0.5)),
        ("gaussian", relunet.gaussian_init, (3, 4, 2, 0.5)),
        ("theorem2", relunet.theorem2_init, (4, 2, 0.5)),
    ):
        ref = fn(*args, generator=_gen(4), device="cpu")
        k = 2 if scheme == "theorem2" else 3
        got = relunet.init_params(k, 4, 2, 0.5, scheme=scheme, generator=_gen(4), device="cpu")
        assert isinstance(got, list) and all(torch.equal(a, b) for a, b in zip(got, ref))
    W, v = relunet.init_params(3, 4, 2, 0.5, scheme="theorem2", generator=_gen(4), device="cpu")
    assert (v[:, 0] > 0).all() and (v[:, 1] < 0).all() and (v[:, 2] > 0).all()
    with pytest.raises(ValueError, match="scheme"):
        relunet.init_params(2, 4, 2, 0.5, scheme="he")
    with pytest.raises(ValueError, match="signs must have"):
        relunet.init_params(3, 4, 2, 0.5, scheme="theorem2", signs=(1.0, -1.0))
    with pytest.raises(ValueError, match="xavier"):
        relunet.init_params(3, 4, 2, 0.5, scheme="gaussian", r=2)
