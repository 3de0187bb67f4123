"""companion.memory: the host allocator's setting, applied at import, with its opt-out and its errors."""

import os
import platform
import subprocess
import sys

import pytest

from companion import memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _state_in_child(setting: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COMPANION_HOST_MALLOC"}
    if setting is not None:
        env["COMPANION_HOST_MALLOC"] = setting
    code = "import companion.memory as m; print(m.state())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.skipif(not GLIBC, reason="the setting exists only with glibc")
def test_applied_at_import_unless_opted_out():
    assert _state_in_child(None).stdout.strip() == "reuse"
    assert _state_in_child("reuse").stdout.strip() == "reuse"
    assert _state_in_child("default").stdout.strip() == "default"


def test_a_malformed_setting_is_refused():
    done = _state_in_child("jemalloc")
    assert done.returncode != 0
    assert "COMPANION_HOST_MALLOC must be 'reuse' or 'default'" in done.stderr


@pytest.mark.skipif(not GLIBC, reason="the setting exists only with glibc")
def test_reapplying_is_harmless_and_computes_the_same():
    import torch

    x = torch.arange(2**23, dtype=torch.float64).reshape(8, 1024, 1024)  # 64 MiB: above glibc's mmap threshold
    before = (x @ x[0].T).sum()
    assert memory.reuse_freed_memory() is True
    assert memory.state() == "reuse"
    assert torch.equal((x @ x[0].T).sum(), before)
