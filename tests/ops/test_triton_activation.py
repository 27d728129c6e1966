"""silu_mul's Triton kernel against the torch body, under the interpreter (in a child process, so the
TRITON_INTERPRET setting cannot clash with a triton imported earlier by other tests)."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = r"""
import torch
from hinfer.ops.activation import silu_mul_ref
from hinfer.ops.triton.activation import silu_mul
for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 0.0)):
    for t, inter in ((1, 24), (3, 1500), (5, 7)):
        x = (torch.randn(t, 2 * inter) * 3).to(dtype)
        got, want = silu_mul(x), silu_mul_ref(x)
        assert got.shape == want.shape and torch.isfinite(got).all()
        err = (got.float() - want.float()).abs().max().item()
        # bf16: the interpreter truncates instead of rounding (twice here), so allow 2 ulp of the largest value
        bound = tol * want.float().abs().max().item() if tol else 2.0**-6 * want.float().abs().max().item()
        assert err <= bound, (dtype, t, inter, err)
    v = torch.randn(4, 64).to(dtype)[:, :48]  # a strided view: copied, same result
    assert torch.allclose(silu_mul(v).float(), silu_mul_ref(v).float(), rtol=1e-2, atol=1e-2)
from hinfer.ops.activation import sigmoid_gate_ref
from hinfer.ops.triton.activation import sigmoid_gate
for dtype in (torch.float32, torch.bfloat16):
    qg = (torch.randn(5, 3, 2 * 40) * 4).to(dtype)
    q, g = qg.chunk(2, dim=-1)  # strided, as in the model
    x = torch.randn(5, 3, 40).to(dtype)
    got, want = sigmoid_gate(x, g), sigmoid_gate_ref(x, g)
    err = (got.float() - want.float()).abs().max().item()
    assert err <= 2.0**-6 * want.float().abs().max().item() + 1e-6, (dtype, err)
print("ok")
"""


def test_silu_mul_kernel_matches_reference():
    env = os.environ | {"TRITON_INTERPRET": "1", "HINFER_TRITON": "1"}
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
