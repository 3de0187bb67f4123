"""companion.failures (paper B, Section 4; ch-failures): the one failure definition (nan counts as a failure),
the stop rule that takes decided members out of gd.run's batch, the growth signs that predict a run's outcome
(against relunet and population runs, outside near-ties), and their input checks."""

import numpy as np
import pytest
import scipy.stats as sst
import torch

from companion import device, failures, gd, phases, population, relunet


def test_failed_is_one_threshold_with_nan_as_failure():
    a = torch.tensor([2.0, 0.0])  # |a|^2 = 4
    loss = torch.tensor([0.05, 0.03, float("nan")])
    assert failures.failed(loss, a).tolist() == [True, False, True]
    assert failures.failed(loss, a, tau=1e-3).tolist() == [True, True, True]
    with pytest.raises(ValueError):
        failures.failed(loss, a, tau=0.0)


def test_stop_rule_marks_decided_members():
    a = relunet.unit_target(3)
    W = torch.stack([torch.stack([a, -a]), torch.zeros(2, 3)])
    v = torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=a.dtype)
    assert failures.stop_rule(a)([W, v], None, None).tolist() == [True, False]
    with pytest.raises(ValueError):
        failures.stop_rule(a, stop=-1.0)


def test_growth_signs_match_relunet_and_the_population_allowance_is_second_order():
    gen = device.generator(5)
    a = relunet.unit_target(8)
    W, v = relunet.gaussian_init(3, 8, 200, 1e-6, generator=gen)
    gs = failures.growth_signs(W, v, a)
    assert np.array_equal(gs.sign, relunet.growth_sign(W, v, a).cpu().numpy())
    # interaction allowance ~ sigma^2, far below the margins ~ sigma
    assert np.median(gs.allowance) < 1e-5 * np.median(gs.margin)
    X, _ = relunet.gaussian_data(80, 8, a, generator=gen)
    ge = failures.growth_signs(W, v, a, X)
    assert np.array_equal(ge.sign, relunet.growth_sign(W, v, a, X).cpu().numpy())
    assert (ge.allowance >= gs.allowance).all()  # the turning of c_i adds to it
    with pytest.raises(ValueError):
        failures.growth_signs(W[:, :2], v, a)


def test_growth_signs_predict_population_runs_outside_near_ties():
    gen = device.generator(11)
    a = relunet.unit_target(6)
    W, v = relunet.gaussian_init(2, 6, 300, 1e-8, generator=gen)
    res = gd.run(population.make_loss_and_grad(a), [W, v], 700, 0.1, progress=False)
    fl = failures.failed(population.loss(*res.params, a), a)
    gs = failures.growth_signs(W, v, a)
    out = failures.exceptions(failures.signs_agree(gs.sign), fl, gs.tied)
    assert out["mismatches"] == 0 and out["decided"] + out["tied"] == 300
    initial = failures.exceptions(failures.signs_agree(np.sign(v.cpu().numpy())), fl, gs.tied)
    assert initial["mismatches"] > 0


def test_signs_agree_and_exceptions_validate_shapes():
    assert failures.signs_agree(np.array([[1, 1, 1], [1, -1, 1]])).tolist() == [True, False]
    with pytest.raises(ValueError):
        failures.signs_agree(np.array([1, 1]))
    with pytest.raises(ValueError):
        failures.exceptions(np.array([True]), np.array([True, False]))


@pytest.mark.parametrize("size, share", [(1000, 0.5), (701, 0.47), (7, 0.3), (5, 0.0)])
def test_outcome_blind_predictor_splits_each_outcome_in_halves(size, share):
    fail = np.random.default_rng(size).random(size) < share
    predictor = failures.outcome_blind_predictor(fail)
    table = phases.failure_table(predictor, fail)
    assert table.sum() == size
    assert np.all(table[0] - table[1] >= 0) and np.all(table[0] - table[1] <= 1)  # equal rows, up to one count
    assert sst.fisher_exact(table)[1] > 0.5
    assert failures.outcome_blind_predictor(torch.tensor(fail)).tolist() == predictor.tolist()
    with pytest.raises(ValueError):
        failures.outcome_blind_predictor(fail.reshape(1, -1))
