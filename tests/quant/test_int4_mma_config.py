"""Host-side pieces of the Gluon int4 mma kernel that need no GPU: its tile heuristic and argument checks."""

from __future__ import annotations

import pytest
import torch

from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.linear import mma_block_m, mma_config
from hinfer.quant.int4 import quantize_int4
from hinfer.quant.int4_mma_weight import Int4MmaWeight

SHAPES_27B = [(14336, 5120), (16384, 5120), (34816, 5120), (5120, 6144), (5120, 17408)]


@pytest.mark.parametrize("n,k", SHAPES_27B)
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 32, 64])
def test_mma_config_fits_and_fills_the_gpu(n, k, m):
    c = mma_config(m, n, k, sms=132)
    assert n % c.block_n == 0 and c.block_n % (16 * c.num_warps) == 0 and c.block_m <= mma_block_m(m)
    assert c.block_m in (8, 16, 32, 64) and c.num_stages in (2, 4) and c.block_k == 128
    assert (k // 128) // c.split_k >= 4  # every split streams a few groups
    assert (n // c.block_n) * c.split_k >= 132 or c.split_k * m * 16 > 0.1 * k  # one program per SM at least


def test_bad_arguments_are_refused_before_launch():
    w = Int4MmaWeight.from_int4(quantize_int4(torch.randn(32, 256).bfloat16()))
    with pytest.raises(ValueError):
        int4_mma_matmul(torch.randn(65, 256).bfloat16(), w)  # M > 64
    with pytest.raises(ValueError):
        int4_mma_matmul(torch.randn(2, 128).bfloat16(), w)  # K mismatch
    with pytest.raises(ValueError):
        int4_mma_matmul(torch.randn(2, 256), w)  # not bf16
    with pytest.raises(ValueError):
        int4_mma_matmul(torch.randn(12, 256).bfloat16(), w, cfg=SkinnyConfig(32, 128, 12, 1, 2, 2))  # BLOCK_M 12
    with pytest.raises(ValueError):
        int4_mma_matmul(torch.randn(2, 256).bfloat16(), w, cfg=SkinnyConfig(32, 128, 8, 1, 2, 3))  # depth 3
