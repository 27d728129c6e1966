"""The linear kernels compile for sm_90 (H100/H200) without spilling at their default tiles: ahead-of-time with
Triton's bundled ptxas, so CI on a CPU catches what the interpreter cannot (GPU-only constructs, inline PTX,
register pressure). Runs in a fresh process (the `compiled_child` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


@pytest.mark.skipif(not PTXAS.exists(), reason="this triton wheel ships no ptxas")
def test_linear_kernels_compile_for_sm90_without_spills(compiled_child):
    r = compiled_child.run("-m", "hinfer.ops.triton.linear_aot", "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "SPILL" not in r.stdout
