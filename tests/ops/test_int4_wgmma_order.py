"""The warpgroup-MMA int4 kernel stages x in the K order of the fragment-ordered weights' A operand: its
renaming X_PERM, replayed on a group's offsets, is int4_mma_layout.real_k for one group."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")


def test_x_perm_is_the_fragments_k_order():
    from hinfer.ops.triton.linear_int4_wgmma import X_PERM
    from hinfer.quant.int4_mma_layout import real_k

    offsets = torch.arange(128).reshape(1, 4, 8, 2, 2).permute(X_PERM.value).reshape(128)  # column k' -> offset
    kp = torch.arange(128)
    assert torch.equal(offsets, real_k(kp // 16, kp % 16))  # k16 step kt, column col of group 0
