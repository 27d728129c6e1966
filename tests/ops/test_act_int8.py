"""x in int8 for the int4 x int8 decode (hinfer/ops/triton/act_int8.py): the Triton kernel against its reference,
bit for bit (the interpreter on the CPU, compiled on a GPU), and the reference against quantize_act_int8_ref."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.act_int8 import quantize_x_int8
from hinfer.quant.int4 import quantize_act_int8_ref, quantize_x_int8_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _x(m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 4).bfloat16()
    x[0, 128:256] = 0  # a zero group: scale 1, zeros
    x[-1, :128] = x[-1, :128].round()  # integers: ties at .5 after the scale, rounded to even
    return x.to(DEV)


@pytest.mark.parametrize("m, k", [(1, 640), (3, 1024), (8, 512)])
def test_kernel_matches_the_reference_bit_for_bit(m, k):
    seed = fixed_test_seed()
    for s in (seed, seed + 1):
        x = _x(m, k, s)
        got, want = quantize_x_int8(x), quantize_x_int8_ref(x)
        assert torch.equal(got.words, want.words), s
        assert torch.equal(got.scales, want.scales) and torch.equal(got.sums, want.sums), s
        assert got.shape == (m, k)


def test_reference_words_hold_the_int8_values_in_mma_column_order():
    """Byte b of word w is K offset 4 w + (0, 2, 1, 3)[b]; sums are scale * sum q per group."""
    x = _x(2, 256, fixed_test_seed())
    ref = quantize_x_int8_ref(x)
    q, s = quantize_act_int8_ref(x.cpu(), 128)
    b = ref.words.cpu().contiguous().view(torch.int8).view(2, 64, 4)
    assert torch.equal(b[..., [0, 2, 1, 3]].reshape(2, 256), q)
    assert torch.equal(ref.scales.cpu(), s)
    assert torch.allclose(ref.sums.cpu(), q.float().view(2, 2, 128).sum(-1) * s)


def test_k_not_a_multiple_of_the_group_is_refused():
    with pytest.raises(ValueError, match="K % 128"):
        quantize_x_int8(torch.zeros(1, 200, dtype=torch.bfloat16, device=DEV))
