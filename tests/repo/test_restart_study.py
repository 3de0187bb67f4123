"""tools/restart_study.py: the line search's restarts study quoted by the Finding on ``d`` of
``ch-uniform-concentration``."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import restart_study  # noqa: E402

from companion import device  # noqa: E402


def test_more_chains_never_find_less():
    ratios, best, seconds = restart_study.study(4, 4, 32, device.generator(0))
    assert list(ratios) == [8, 32] and ratios[32] == 1.0
    assert 0 < ratios[8] <= 1.0 and best > 0 and seconds >= 0


def test_the_table_has_a_row_per_data_set(capsys):
    restart_study.main(["--dims", "4", "--ratio", "4", "--chains", "32", "--sets", "2"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 4 |")]
    assert len(rows) == 2


def test_too_few_chains_is_refused():
    with pytest.raises(ValueError, match="at least 32"):
        restart_study.main(["--chains", "8"])
