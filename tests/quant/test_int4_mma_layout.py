"""The fragment-ordered int4 layout: exact round trip, the documented fragment mapping, and the kernel's torch
twin (`emulate_kernel`) against Int4Weight.matmul_ref."""

from __future__ import annotations

import pytest
import torch

from hinfer.quant.int4 import pack_int4, quantize_int4, unpack_int4
from hinfer.quant.int4_mma_layout import (
    emulate_kernel,
    emulate_kernel_a8,
    fragment_coords,
    fragments_to_matrix,
    pair_gate_up_rows,
    permute_words,
    real_k,
    s8_matrix,
    s8_registers,
    stripe_experts,
    stripe_word_offset,
    unpermute_words,
    unstripe_experts,
)
from hinfer.quant.int4_mma_weight import Int4MmaWeight

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


@pytest.mark.parametrize("offset_mma", [True, False])
@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_emulated_kernel_matches_matmul_ref(zero_point, m, offset_mma):
    n, k = 96, 640  # K = 5 groups
    w = _weight(n, k, zero_point, seed=2)
    mw = Int4MmaWeight.from_int4(w)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(3)).bfloat16()
    y = emulate_kernel(mw.words, mw.scales, mw.zeros, x, n, offset_mma)
    ref = w.matmul_ref(x)
    rel = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < REL, rel


@pytest.mark.parametrize("gate_up", [False, True])
def test_experts_by_stripes_move_whole_words_where_the_kernel_reads_them(gate_up):
    """stripe_experts moves the row words only (unstripe_experts undoes it), word c of (paired) row r sits at
    stripe_word_offset, and the experts kernel's stripe-major pointers (expert_words: stripe s, half r3, lane,
    word j at 2 K s + 256 g + 128 r3 + 4 lane + j for group g) read exactly the words its row-layout pointers
    read (row 16 s + 8 r3 + lane // 4, word 16 g + 4 (lane % 4) + j), so they unpack as the row layout's. The
    pairing (gate_up: 8 gate rows and the same columns' 8 up rows a stripe) is the row the experts kernel's ACT
    epilogue names for tile row r: column 8 (r // 16) + r % 8 of the gate (r // 8 even) or the up half."""
    e, n, k = 2, 48, 384
    g = torch.Generator().manual_seed(6)
    q = torch.randint(-(2**31), 2**31 - 1, (e, n, k // 8), dtype=torch.int32, generator=g)
    st = stripe_experts(q, k, gate_up)
    assert st.shape == (e, n // 16, 2 * k) and torch.equal(unstripe_experts(st, k, gate_up), q)
    paired = pair_gate_up_rows(q) if gate_up else q
    r = torch.arange(n)
    named = (8 * (r // 16) + r % 8 + (r // 8 % 2) * (n // 2)) if gate_up else r
    assert torch.equal(paired, q[:, named])
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(k // 8), indexing="ij")
    assert torch.equal(st.view(e, -1)[:, stripe_word_offset(rows, cols, k)], paired)
    s, r3, lane, j, grp = torch.meshgrid(torch.arange(n // 16), torch.arange(2), torch.arange(32), torch.arange(4),
                                         torch.arange(k // 128), indexing="ij")  # fmt: skip
    kernel = st.view(e, -1)[:, s * 2 * k + grp * 256 + r3 * 128 + lane * 4 + j]
    assert torch.equal(kernel, paired[:, s * 16 + r3 * 8 + lane // 4, grp * 16 + (lane % 4) * 4 + j])


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError):
        permute_words(torch.zeros(24, 8, dtype=torch.int32), 64)
    with pytest.raises(ValueError):
        permute_words(torch.zeros(16, 24, dtype=torch.int32), 192)


@pytest.mark.parametrize("block_n,block_m", [(128, 8), (64, 16)])
def test_kernel_tile_algebra_meets_the_layout(block_n, block_m):
    """Replays the Gluon kernel's reshapes / permutes (hinfer/ops/triton/linear_int4_mma.py, A_PERM and B_PERM)
    on index arrays: A[row, k'] must be W[row, K(k')] as permute_words stores it, and B[k', n] must be x[n, K(k')],
    with K = real_k (one group). The compiler proves the rest (convert_layout assert_trivial)."""
    import numpy as np

    from hinfer.ops.triton.linear_int4_mma import A_PERM, B_PERM

    s = block_n // 16
    word = np.arange(s * 2 * 32 * 4).reshape(s, 2, 32, 4, 1)  # [stripe, kc, lane, kq], one group
    t = word * 8 + np.arange(8)  # the unpack's [..., e]: (word, fragment element e) ids
    t = t.reshape(s, 2, 8, 4, 4, 2, 2, 2).transpose(tuple(A_PERM.value)).reshape(block_n, 128)
    w_id, e = t // 8, t % 8
    stripe, kc, lane, kq = w_id // 256, (w_id // 128) % 2, (w_id // 4) % 32, w_id % 4
    r, c = fragment_coords(torch.from_numpy(lane), torch.from_numpy(e))
    rows = torch.arange(block_n)[:, None]
    kp = torch.arange(128)[None, :]
    assert torch.equal(torch.from_numpy(stripe) * 16 + r, rows.expand(block_n, 128))
    got_k = real_k(torch.from_numpy(4 * kc + kq), c)
    assert torch.equal(got_k, real_k(kp // 16, kp % 16).expand(block_n, 128))

    xi = np.arange(block_m * 128).reshape(block_m, 4, 32)  # x[n, 32 t + j] of one group
    b = xi.reshape(block_m, 4, 8, 2, 2).transpose(tuple(B_PERM.value)).reshape(128, block_m)
    want = torch.arange(block_m)[None, :] * 128 + real_k(kp.t() // 16, kp.t() % 16)
    assert torch.equal(torch.from_numpy(b), want)


@pytest.mark.parametrize("block_n", [128, 64])
def test_kernel_tile_algebra_meets_the_row_layout(block_n):
    """The same replay for the kernel's row-layout variant (ROWS, A_PERM_ROWS): thread lane = 4 g + t loads words
    4 t .. 4 t + 3 of the group from rows 16 S + g and 16 S + 8 + g of hinfer.quant.int4's layout, and the unpack's
    element e of a word is its K offset 8 w + e (register j = elements 2 j, 2 j + 1, hinfer.quant.int4.POS)."""
    import numpy as np

    from hinfer.ops.triton.linear_int4_mma import A_PERM_ROWS

    s = block_n // 16
    rng = np.random.default_rng(0)
    u = rng.integers(0, 16, (block_n, 128))  # one group of a [block_n, 128] weight
    words = pack_int4(torch.from_numpy(u)).numpy()  # [block_n, 16] in hinfer.quant.int4's order
    stripe, r3, lane, w = np.meshgrid(np.arange(s), np.arange(2), np.arange(32), np.arange(4), indexing="ij")
    loaded = words[stripe * 16 + r3 * 8 + lane // 4, (lane % 4) * 4 + w]  # [S, r3, lane, w] as the kernel loads
    nib = unpack_int4(torch.from_numpy(loaded.reshape(-1, 1)), 8).numpy().reshape(s, 2, 32, 4, 8)
    t = nib.reshape(s, 2, 8, 4, 4, 2, 2, 2).transpose(tuple(A_PERM_ROWS.value)).reshape(block_n, 128)
    kp = torch.arange(128)
    want = u[:, real_k(kp // 16, kp % 16).numpy()]  # A[row, k'] = W[row, K(k')]
    assert np.array_equal(t, want)


def test_s8_registers_are_int8_fragments_of_the_same_layout():
    """One shift and two lop3 per word give 16 (u - 8) for the eight weights of a word as two int8 x 4
    registers: lo = row g, hi = row g + 8, byte b at fragment column (2t, 2t + 8, 2t + 1, 2t + 9)[b] of the word's
    k16 step (the same words the bf16 unpack reads; no other layout for an int8 MMA)."""
    n, k = 64, 256
    w = _weight(n, k, zero_point=True, seed=3)
    u = unpack_int4(w.qweight, k).to(torch.int32)  # [N, K] stored nibbles 0..15
    words = permute_words(w.qweight, k).view(n // 16, k // 64, 32, 4)  # [stripe, kc, lane, j]
    lo, hi = s8_registers(words)  # [stripe, kc, lane, j, 4] int8
    assert lo.shape == (n // 16, k // 64, 32, 4, 4)
    lane = torch.arange(32)
    g, t = lane // 4, lane % 4
    cols = torch.stack([2 * t, 2 * t + 8, 2 * t + 1, 2 * t + 9], dim=-1)  # [32, 4]
    for stripe in range(n // 16):
        for kc in range(k // 64):
            for j in range(4):
                kk = real_k(torch.full_like(cols, 4 * kc + j), cols)  # [32, 4] K index of each byte
                rows = stripe * 16 + g[:, None].expand_as(cols)
                want_lo = 16 * (u[rows, kk] - 8)
                want_hi = 16 * (u[rows + 8, kk] - 8)
                assert torch.equal(lo[stripe, kc, :, j].to(torch.int32), want_lo)
                assert torch.equal(hi[stripe, kc, :, j].to(torch.int32), want_hi)


@pytest.mark.parametrize("zero_point", [True, False])
def test_s8_matrix_and_the_int8_emulation_meet_the_reference(zero_point):
    """s8_matrix is 16 (u - 8) of the stored nibbles at every (row, K); the int4 x int8 decode's arithmetic
    (emulate_kernel_a8: exact integer group sums, then the scales) matches Int4Weight.matmul_ref_a8 (the same
    quantized x, fp32 sums in another order: within bf16 output rounding)."""
    n, k, m = 48, 384, 3
    w = _weight(n, k, zero_point, seed=5)
    mw = Int4MmaWeight.from_int4(w)
    u = unpack_int4(w.qweight, k).to(torch.int32)
    assert torch.equal(s8_matrix(mw.words, n, k), 16 * (u - 8))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(m, k, generator=g).bfloat16()
    got = emulate_kernel_a8(mw.words, mw.scales, mw.zeros, x, n).float()
    want = w.matmul_ref_a8(x).float()
    assert ((got - want).norm() / want.norm()).item() < REL
