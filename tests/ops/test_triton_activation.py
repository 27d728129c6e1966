"""silu_mul's and sigmoid_gate's Triton kernels against the torch bodies, under the interpreter."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.activation import sigmoid_gate_ref, silu_mul_ref

pytest.importorskip("triton")


def test_silu_mul_kernel_matches_reference(interpreter):
    from hinfer.ops.triton.activation import sigmoid_gate, silu_mul

    torch.manual_seed(fixed_test_seed())
    for dtype, tol in ((torch.float32, 1e-6), (torch.bfloat16, 0.0)):
        for t, inter in ((1, 24), (3, 1500), (5, 7)):
            x = (torch.randn(t, 2 * inter) * 3).to(dtype)
            got, want = silu_mul(x), silu_mul_ref(x)
            assert got.shape == want.shape and torch.isfinite(got).all()
            err = (got.float() - want.float()).abs().max().item()
            # bf16: 2 ulp of the largest value (room for an interpreter that truncates, twice here)
            top = want.float().abs().max().item()
            bound = tol * top if tol else 2.0**-6 * top
            assert err <= bound, (dtype, t, inter, err)
        v = torch.randn(4, 64).to(dtype)[:, :48]  # a strided view: copied, same result
        assert torch.allclose(silu_mul(v).float(), silu_mul_ref(v).float(), rtol=1e-2, atol=1e-2)
    for dtype in (torch.float32, torch.bfloat16):
        qg = (torch.randn(5, 3, 2 * 40) * 4).to(dtype)
        q, g = qg.chunk(2, dim=-1)  # strided, as in the model
        x = torch.randn(5, 3, 40).to(dtype)
        got, want = sigmoid_gate(x, g), sigmoid_gate_ref(x, g)
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 2.0**-6 * want.float().abs().max().item() + 1e-6, (dtype, err)
