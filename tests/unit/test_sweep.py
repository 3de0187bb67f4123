"""companion.sweep: the ensemble axis sharded over processes gives the same per-member results as one process.

The two-process run uses ``torchrun`` with the gloo backend on the CPU (what CI has); the same entry point
runs under NCCL on GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from companion import sweep

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "experiment": "failure_vs_width",
    "members": 40,
    "block": 16,
    "seed": 3,
    "dtype": "float64",
    "params": {"d": 6, "ks": [2, 3], "sigma": 1e-3, "mu": 0.1, "steps": 120, "tau": 0.01},
}


def tiny(tmp_path: Path, **over) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**TINY, "out": str(tmp_path / "out.npz"), **over}))
    return path


def test_single_process_shapes_and_roundtrip(tmp_path):
    cfg = sweep.SweepConfig.from_file(tiny(tmp_path))
    res = sweep.run_sweep(cfg, device="cpu")
    assert list(res["settings"]) == [2, 3]
    for key in ("final_loss", "fails", "initial_signs_agree", "growth_signs_agree", "diverged"):
        assert res[key].shape == (2, 40), key
    assert res["fails"].dtype == bool and np.isfinite(res["final_loss"]).all()
    back = sweep.load(sweep.save(res, tmp_path / "r.npz"))
    assert back["meta"]["config"]["params"]["ks"] == [2, 3] and back["meta"]["world_size"] == 1
    for key in res:
        if key != "meta":
            assert np.array_equal(back[key], res[key])


def test_member_draws_do_not_depend_on_the_sweep_size(tmp_path):
    """Full blocks are the same members whatever ``members`` is (each block has its own generator)."""
    a = sweep.run_sweep(sweep.SweepConfig.from_file(tiny(tmp_path)), device="cpu")
    b = sweep.run_sweep(sweep.SweepConfig.from_file(tiny(tmp_path, members=32)), device="cpu")
    assert np.array_equal(a["final_loss"][:, :32], b["final_loss"])
    c = sweep.run_sweep(sweep.SweepConfig.from_file(tiny(tmp_path, seed=4)), device="cpu")
    assert not np.array_equal(a["final_loss"], c["final_loss"])


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown configuration keys"):
        sweep.SweepConfig.from_file(tiny(tmp_path, bogus=1))
    with pytest.raises(ValueError, match="unknown experiment"):
        sweep.SweepConfig.from_file(tiny(tmp_path, experiment="nope"))
    with pytest.raises(ValueError, match="missing"):
        sweep.SweepConfig.from_file(tiny(tmp_path, params={"d": 6}))


def test_two_processes_gloo_equal_one_process(tmp_path):
    """``torchrun --nproc_per_node 2 -m companion.sweep`` (gloo) writes bit-identical per-member results."""
    cfg_path = tiny(tmp_path)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    out2 = tmp_path / "two.npz"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "companion.sweep",
        str(cfg_path),
        "--out",
        str(out2),
        "--device",
        "cpu",
        "--quiet",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    two = sweep.load(out2)
    assert two["meta"]["world_size"] == 2 and two["meta"]["backend"] == "gloo"
    one = sweep.run_sweep(sweep.SweepConfig.from_file(cfg_path), device="cpu")
    for key in one:
        if key != "meta":
            assert np.array_equal(two[key], one[key]), key


def test_shipped_configs_are_valid():
    for path in sorted((ROOT / "benchmarks" / "gpu" / "sweeps").glob("*.json")):
        cfg = sweep.SweepConfig.from_file(path)
        assert cfg.out.endswith(".npz"), path
