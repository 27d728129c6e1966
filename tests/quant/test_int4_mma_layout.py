"""The fragment-ordered int4 layout: exact round trip, the documented fragment mapping, and the kernel's torch
twin (`emulate_kernel`) against Int4Weight.matmul_ref."""

from __future__ import annotations

import pytest
import torch

from hinfer.quant.int4 import quantize_int4
from hinfer.quant.int4_mma_layout import (
    Int4MmaWeight,
    emulate_kernel,
    fragment_coords,
    fragments_to_matrix,
    permute_words,
    real_k,
    unpermute_words,
)

REL = 6e-3


def _weight(n: int, k: int, zero_point: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * k**-0.5).bfloat16()
    return quantize_int4(w, zero_point=zero_point)


def test_fragment_coords_match_the_ptx_table():
    # lane 5: g = 1, t = 1 (PTX ISA, mma.m16n8k16 A fragment for .bf16)
    expected = [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    got = [tuple(int(v) for v in fragment_coords(torch.tensor(5), torch.tensor(e))) for e in range(8)]
    assert got == expected
    lane, e = torch.meshgrid(torch.arange(32), torch.arange(8), indexing="ij")
    r, c = fragment_coords(lane, e)
    assert len(set(zip((r * 16 + c).flatten().tolist()))) == 256  # every element of the tile once


def test_real_k_is_a_permutation_of_each_group_with_contiguous_lane_shares():
    kt, col = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")  # two groups
    k = real_k(kt, col)
    assert sorted(k.flatten().tolist()) == list(range(256))
    t = (col % 8) // 2
    for g in range(2):
        for lane_t in range(4):
            mine = k[(kt // 8 == g) & (t == lane_t)]
            assert sorted(mine.tolist()) == list(range(128 * g + 32 * lane_t, 128 * g + 32 * lane_t + 32))


@pytest.mark.parametrize("n,k", [(16, 128), (48, 384), (32, 640)])
def test_permute_round_trip_is_exact(n, k):
    g = torch.Generator().manual_seed(1)
    q = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32, generator=g)
    p = permute_words(q, k)
    assert p.shape == (n // 16, 2 * k) and p.dtype == torch.int32
    assert torch.equal(unpermute_words(p, k), q)
    # the words really move (not the identity order)
    assert not torch.equal(p.view(-1), q.view(-1))


@pytest.mark.parametrize("zero_point", [True, False])
def test_fragments_dequantize_to_the_same_matrix(zero_point):
    n, k = 64, 384
    w = _weight(n, k, zero_point)
    mw = Int4MmaWeight.from_int4(w)
    a = fragments_to_matrix(mw.words, mw.zeros, n, k)  # u - z through the register semantics
    s = mw.scales.float().t().repeat_interleave(128, dim=1)[:, :k]
    assert torch.equal((a * s).bfloat16(), w.dequantize(torch.bfloat16))
    back = mw.to_int4()
    assert torch.equal(back.qweight, w.qweight) and torch.equal(back.scales, w.scales)
    assert (back.zeros is None) == (w.zeros is None) and (w.zeros is None or torch.equal(back.zeros, w.zeros))


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_emulated_kernel_matches_matmul_ref(zero_point, m):
    n, k = 96, 640  # K = 5 groups
    w = _weight(n, k, zero_point, seed=2)
    mw = Int4MmaWeight.from_int4(w)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(3)).bfloat16()
    y = emulate_kernel(mw.words, mw.scales, mw.zeros, x, n)
    ref = w.matmul_ref(x)
    rel = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < REL, rel


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError):
        permute_words(torch.zeros(24, 8, dtype=torch.int32), 64)
    with pytest.raises(ValueError):
        permute_words(torch.zeros(16, 24, dtype=torch.int32), 192)
