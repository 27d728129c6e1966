"""Programmatic dependent launch (on by default, HINFER_PDL=0 turns it off): the int4 tensor-core matmul and the norm give the same bits as
without it, in a CUDA graph of back-to-back dependent launches (a missing or misplaced wait shows up as a
mismatch: a kernel reading its input before the previous one wrote it).

    pytest -m gpu tests/gpu/test_pdl.py -q
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _chain(x, norms, weights, layers: int):
    from hinfer.ops.triton import norm
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

    h, r = x, torch.zeros_like(x)
    for i in range(layers):
        y, r = norm.add_rms_norm(h, r, norms[i % 2], 1e-6)
        up = int4_mma_matmul(y, weights[0])  # [M, I]
        h = int4_mma_matmul(up, weights[1])  # [M, H]
    return h


@pytest.mark.parametrize("m", [1, 8])
def test_pdl_chain_in_a_graph_is_bit_equal(monkeypatch, m):
    from hinfer.fixtures import fixed_test_seed
    from hinfer.quant import quantize_int4
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    g = torch.Generator(device="cuda").manual_seed(fixed_test_seed())
    hdim, inter = 5120, 17408
    weights = [Int4MmaWeight.from_int4(quantize_int4((torch.randn(n, k, generator=g, device="cuda") * k**-0.5)
                                                     .bfloat16(), zero_point=True))
               for n, k in ((inter, hdim), (hdim, inter))]  # fmt: skip
    norms = [torch.randn(hdim, generator=g, device="cuda").bfloat16() * 0.1 for _ in range(2)]
    x = torch.randn(m, hdim, generator=g, device="cuda").bfloat16()
    outs = []
    for pdl in (False, True):
        monkeypatch.setenv("HINFER_PDL", "1" if pdl else "0")
        eager = _chain(x, norms, weights, 8)
        graph = torch.cuda.CUDAGraph()
        _chain(x, norms, weights, 8)  # compiled before capture
        with torch.cuda.graph(graph):
            out = _chain(x, norms, weights, 8)
        for _ in range(20):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, eager), f"graph replay differs from eager, pdl={pdl}"
        outs.append(eager)
    assert torch.equal(outs[0], outs[1])
