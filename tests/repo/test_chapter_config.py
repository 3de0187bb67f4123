"""tools/chapter_config.py: the seed-study tools read a chapter's Config from its source instead of a copy."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import chapter_config  # noqa: E402


def test_the_parameter_ball_config_at_both_scales():
    quick, paper = (chapter_config.config("13_parameter_ball", s) for s in ("quick", "paper"))
    assert quick.widths == (64, 128, 256, 512) and paper.widths[-1] == 2048
    assert (quick.m_depth, paper.m_depth) == (64, 256) and quick.depths == paper.depths
    assert quick.lanczos_iters < paper.lanczos_iters and quick.seed == paper.seed == 0
    assert paper.radii[0] == 2.0**-10  # a default computed in the dataclass


def test_a_missing_chapter_or_scale_is_refused():
    with pytest.raises(ValueError, match="no single chapter"):
        chapter_config.config("99_nothing", "quick")
    with pytest.raises(ValueError, match="no CONFIGS"):
        chapter_config.config("13_parameter_ball", "huge")


def test_seed_offsets_parse_and_refuse():
    import argparse

    ap = argparse.ArgumentParser()
    chapter_config.add_offsets_argument(ap)
    assert chapter_config.seed_offsets(ap.parse_args([]).offsets) == range(0, 20)
    assert chapter_config.seed_offsets(ap.parse_args(["--offsets", "3", "7"]).offsets) == range(3, 7)
    for pair in ([3, 3], [-1, 2]):
        with pytest.raises(ValueError, match="FIRST < STOP"):
            chapter_config.seed_offsets(pair)
