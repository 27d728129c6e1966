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


def test_x_ring_chunks_divide_every_slice():
    """x's groups per cp.async chunk: halved until two chunks divide every K slice's groups, else x through
    registers (0); the kernel runs pairs of whole chunks."""
    from hinfer.ops.triton.linear_int4_wgmma import x_ring_groups

    assert x_ring_groups(4, 40, 1) == 4  # 40 groups: 5 pairs of 4
    assert x_ring_groups(4, 40, 2) == 2  # slices of 20
    assert x_ring_groups(4, 48, 4) == 2  # slices of 12
    assert x_ring_groups(4, 136, 4) == 1  # slices of 34
    assert x_ring_groups(4, 136, 8) == 0  # slices of 17: no pairs
    assert x_ring_groups(4, 40, 3) == 1  # slices of 14, 14, 12
    assert x_ring_groups(0, 40, 1) == 0
    for ring in (1, 2, 4, 8):
        for groups in range(4, 200):
            for split in (1, 2, 3, 4, 8):
                xg = x_ring_groups(ring, groups, split)
                per = -(-groups // split)
                sizes = [min(per, groups - i * per) for i in range(split)]
                assert xg <= ring and all(s % (2 * xg) == 0 for s in sizes if xg), (ring, groups, split)
