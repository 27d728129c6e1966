"""The linear kernels compile for sm_90 (H100/H200) without spilling at their default tiles: ahead-of-time with
Triton's bundled ptxas, so CI on a CPU catches what the interpreter cannot (GPU-only constructs, inline PTX,
register pressure). Runs in a fresh process: here TRITON_INTERPRET turned the kernels into interpreted ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton wheel ships no ptxas")
def test_linear_kernels_compile_for_sm90_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "hinfer.ops.triton.linear_aot", "--check"], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "SPILL" not in r.stdout
