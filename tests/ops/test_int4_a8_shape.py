"""What the int4 x int8 decode kernel's programs hold (hinfer/ops/triton/linear_int4_a8.py, A8Shape) and which
calls it takes: pure arithmetic, no GPU (the kernel itself: tests/gpu/test_int4_a8.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hinfer.ops.triton.linear_int4_a8 import SMEM_LIMIT, A8Shape, a8_takes
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.linear import a8_config, a8_swept_faster, mma_config


@pytest.mark.parametrize("m, xrows", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8)])
def test_rows_of_x_quantized_per_program(m, xrows):
    """M rounded up to a power of two; groups a prologue step takes: 8, or 8 per warp left over by the rows."""
    cfg = SkinnyConfig(128, 128, 8, 4, 4, 2, 4)
    shape = A8Shape.of(m, 5120, cfg)
    assert shape.xrows == xrows
    assert shape.xq == 8 * (4 // min(4, xrows))
    assert shape.xg % shape.xq == 0 and shape.xg >= 10 > shape.xg - shape.xq  # 40 groups / split 4, rounded up
    assert shape.ring == 4


def test_x_quantized_ahead_holds_no_x():
    """The tile's x_ahead (x quantized in its own launch): the ring only, one compiled form for any M and split."""
    cfg = SkinnyConfig(128, 128, 8, 4, 4, 2, 3, x_ahead=True)
    a, b = A8Shape.of(8, 5120, cfg), A8Shape.of(1, 17408, replace(cfg, split_k=16))
    assert a == b and a.pre
    assert a.smem_bytes(128, True) == 3 * 128 * 67


def test_shared_memory_and_what_it_takes():
    """The ring (words 64 bytes a row, scales, zeros) and x's bytes and scales; more than 8 rows, another BLOCK_M or
    too much shared memory go to the bf16 kernel."""
    cfg = SkinnyConfig(128, 128, 8, 4, 4, 2, 3)
    shape = A8Shape.of(8, 5120, cfg)
    assert shape.smem_bytes(128, True) == 3 * 128 * 67 + shape.xg * (8 * 128 + 64)
    assert a8_takes(8, 14336, 5120, cfg, zero=True)
    assert not a8_takes(9, 14336, 5120, cfg)  # x quantized in the programs: 8 rows at most
    assert not a8_takes(8, 14336, 5120, SkinnyConfig(128, 128, 16, 4, 4, 2, 3))
    assert not a8_takes(1, 14336 + 64, 5120, cfg)  # N not a multiple of BLOCK_N
    whole_k = SkinnyConfig(256, 128, 8, 1, 8, 2, 4)  # 8 rows of the 27B down_proj's 136 groups in one program
    assert A8Shape.of(8, 17408, whole_k).smem_bytes(256, True) > SMEM_LIMIT
    assert not a8_takes(8, 5120, 17408, whole_k, zero=True)


def test_many_rows_only_with_x_quantized_ahead():
    """Past 8 rows (speculative verification: lanes x (K + 1)) the kernel takes x quantized ahead only, in MMA column
    blocks of 8, 16 or 32 rows of x a program, up to MAX_M rows a call; a tile quantizing x in its programs stays at
    8 rows and BLOCK_M 8."""
    from hinfer.ops.triton.linear_int4_a8 import MAX_M, a8_rows_fit

    ahead = SkinnyConfig(128, 128, 32, 4, 4, 2, 4, x_ahead=True)
    for m in (1, 9, 24, 32, 33, MAX_M):
        assert a8_rows_fit(m, ahead) and a8_takes(m, 14336, 5120, ahead, zero=True), m
    assert not a8_rows_fit(MAX_M + 1, ahead)
    assert not a8_rows_fit(32, replace(ahead, block_m=64))
    assert a8_rows_fit(32, replace(ahead, block_m=8)) and a8_rows_fit(16, replace(ahead, block_m=16))
    assert not a8_rows_fit(16, replace(ahead, x_ahead=False)) and not a8_rows_fit(8, replace(ahead, x_ahead=False))
    assert a8_rows_fit(8, replace(ahead, x_ahead=False, block_m=8))
    assert A8Shape.of(32, 5120, ahead).smem_bytes(128, True) == 4 * 128 * 67  # the ring only, at any rows
    from hinfer.ops.triton.tiles.linear import _a8_fits

    assert _a8_fits(ahead, 32, 14336, 5120) and _a8_fits(ahead, 17, 14336, 5120)
    assert not _a8_fits(ahead, 16, 14336, 5120)  # 32 rows a program for a bucket of 16: never asked of a table


def test_tiles_default_to_the_bf16_kernels_and_take_over_only_where_swept():
    """Without an int4_a8 entry the bf16 kernel's tile, x quantized in the programs (x_ahead off)."""
    for m, n, k in ((1, 9216, 2048), (8, 5120, 17408), (4, 17408, 3072)):
        assert a8_config(m, n, k, sms=132) == replace(mma_config(m, n, k, sms=132), x_ahead=False)
    assert not a8_swept_faster(1, 14336 + 16, 5120)


def test_packaged_entries_fit_the_kernel():
    """Every int4_a8 entry in tuned.py is a tile the int4 x int8 kernel takes at its bucket's rows."""
    from hinfer.ops.triton.tiles.forms import INT4_A8
    from hinfer.ops.triton.tiles.tuned import TUNED

    entries = [(key, t) for key, t in TUNED.items() if key[0] == INT4_A8]
    assert entries
    for (_, n, k, m), tile in entries:
        assert a8_takes(m, n, k, tile, zero=True) and a8_swept_faster(m, n, k) and a8_config(m, n, k) == tile


def test_tail_rows_checked_before_any_launch():
    """Both int4 kernels take bf16 tail rows only with the whole [M, N + T] output given (linear_int4_mma)."""
    import torch

    from hinfer.ops.triton.mma_common import tail_rows

    tail = torch.zeros(20, 256, dtype=torch.bfloat16)
    assert tail_rows(None, None, 3, 128, 256) == 0
    assert tail_rows(tail, torch.empty(3, 148, dtype=torch.bfloat16), 3, 128, 256) == 20
    for out, t in ((None, tail), (torch.empty(3, 128, dtype=torch.bfloat16), tail),
                   (torch.empty(3, 148, dtype=torch.bfloat16), tail.float()), (torch.empty(3, 148), tail[:, :128])):
        with pytest.raises(ValueError, match="tail"):
            tail_rows(t, out, 3, 128, 256)
