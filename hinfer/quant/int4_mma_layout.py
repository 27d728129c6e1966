"""INT4 weights re-laid out in mma.sync m16n8k16 A-fragment order (swap-AB: rows of W are the MMA's M).

The tensor-core kernel (hinfer/ops/triton/linear_int4_mma.py, CUDA decode of int4_mma_weight.Int4MmaWeight)
loads 16 bytes per thread and unpacks each word with Marlin's bf16 trick straight into the registers of an A
fragment, so no layout conversion sits between the load and the `mma`. This module builds that order on the host
(pure torch, CPU or GPU), inverts it, and emulates the kernel (`emulate_kernel`, the reference twin).

A fragment (PTX ISA, mma.m16n8k16 .bf16, operand A): lane = 4 g + t (g = lane // 4, t = lane % 4) holds 8
values a_0..a_7 of a 16 x 16 tile; a_e sits at row g + 8 * bit1(e), column 2 t + bit0(e) + 8 * bit2(e)
(`fragment_coords`). Register j of the fragment is the bf16 pair (a_2j, a_2j+1).

K order: the MMA's reduction index need not be K itself, only the same for W and x. Within each 128-group the
MMA's k' = 16 kt + 8 k3 + 2 t + k0 (k16 step kt = 0..7, fragment column 2 t + k0 + 8 k3) reads K offset
32 t + 4 kt + 2 k3 + k0 (`real_k`): lane t's share of x for a whole group is 32 contiguous values (four 128-bit
loads of a row of x instead of sixteen 32-bit ones).

Permuted words `words` int32 [N / 16, 2 K] (N % 16 == 0, K % 128 == 0):
- row i: the 16-row stripe 16 i .. 16 i + 15 of W.
- column (kc * 32 + lane) * 4 + j: k64 chunk kc, lane, k16 step j of the chunk (k16 step 4 kc + j, of group
  (4 kc + j) // 8). One thread's four words of a chunk are contiguous (one 128-bit load) and a warp's 32 loads
  are one 512-byte run.
- nibble position p of a word holds a_e with e = 2 (p % 4) + p // 4: `lop3(word >> 4 j, 0x000f000f,
  0x43004300)` puts positions j and j + 4 in the low / high bf16 of one register, i.e. (a_2j, a_2j+1) as
  128 + u; subtracting 128 + z (bf16x2 fma, exact) leaves u - z.
Scales and zeros are transposed to [G, N] (group-major): a warp's rows of one group are contiguous. Value:
(u - z) * s as in hinfer.quant.int4 (symmetric: z = 8).
"""

from __future__ import annotations

import torch

from hinfer.quant.int4 import GROUP, pack_int4, unpack_int4

TILE_N = 16  # rows of a stripe (the MMA's M)
CHUNK_K = 64  # K per 128-bit load: 4 k16 steps
K_ALIGN = 128  # the K remap works within 128-groups
# nibble position p holds fragment element E_OF_POS[p]
E_OF_POS = tuple(2 * (p % 4) + p // 4 for p in range(8))


def fragment_coords(lane: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) in the 16 x 16 A tile of fragment element e held by `lane` (mma.m16n8k16, 16-bit A)."""
    g, t = lane // 4, lane % 4
    return g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)


def real_k(kt: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """K index read by fragment column `col` (0..15) of global k16 step kt (see K order above)."""
    t, k0, k3 = (col % 8) // 2, col % 2, col // 8
    return (kt // 8) * GROUP + 32 * t + 4 * (kt % 8) + 2 * k3 + k0


def _stripe_index(k: int) -> torch.Tensor:
    """For one 16-row stripe: flat index row * K + col of the element at every (word column, nibble position)
    of the permuted stripe, int64 [2 K, 8]."""
    q = torch.arange(2 * k)
    kc, lane, j = q // 128, (q // 4) % 32, q % 4
    e = torch.tensor(E_OF_POS)[None, :]
    row, col = fragment_coords(lane[:, None], e)
    return row * k + real_k((4 * kc + j)[:, None], col)


def _check(n: int, k: int) -> None:
    if n % TILE_N or k % K_ALIGN:
        raise ValueError(f"the mma layout needs N % {TILE_N} == 0 and K % {K_ALIGN} == 0, got {n}x{k}")


def _pack_nibbles(nib: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 8] nibbles at positions 0..7 -> int32 [...] (little-endian: position p in byte p // 2)."""
    b = nib[..., 0::2] | (nib[..., 1::2] << 4)
    return b.contiguous().view(torch.int32).squeeze(-1)


def _unpack_nibbles(words: torch.Tensor) -> torch.Tensor:
    b = words.contiguous().unsqueeze(-1).view(torch.uint8)  # [..., 4] bytes
    return torch.stack([b & 0xF, b >> 4], dim=-1).flatten(-2)


def permute_words(qweight: torch.Tensor, k: int, chunk_rows: int = 16384) -> torch.Tensor:
    """qweight int32 [N, K/8] (hinfer.quant.int4 order) -> fragment-ordered words int32 [N/16, 2 K]; `chunk_rows`
    rows at a time, so the temporaries (2 bytes per element) stay small next to a full model on the GPU."""
    n = qweight.shape[0]
    _check(n, k)
    idx = _stripe_index(k).to(qweight.device).view(-1)
    out = torch.empty((n // TILE_N, 2 * k), dtype=torch.int32, device=qweight.device)
    for r0 in range(0, n, chunk_rows):
        rows = min(chunk_rows, n - r0)
        u = unpack_int4(qweight[r0 : r0 + rows], k).view(rows // TILE_N, TILE_N * k)
        out[r0 // TILE_N : (r0 + rows) // TILE_N] = _pack_nibbles(u[:, idx].view(rows // TILE_N, 2 * k, 8))
    return out


def unpermute_words(words: torch.Tensor, k: int) -> torch.Tensor:
    """Inverse of permute_words: int32 [N/16, 2 K] -> qweight int32 [N, K/8]."""
    stripes = words.shape[0]
    nib = _unpack_nibbles(words).view(stripes, 2 * k * 8)
    u = torch.empty(stripes, TILE_N * k, dtype=torch.uint8, device=words.device)
    u[:, _stripe_index(k).to(words.device).view(-1)] = nib
    return pack_int4(u.view(stripes * TILE_N, k))


def pair_gate_up_rows(qweight: torch.Tensor) -> torch.Tensor:
    """Fused experts' [E, 2I, ...] rows (gate rows, then up rows) -> each 16-row stripe 8 gate rows then the same 8
    columns' up rows (row 16 s + 8 h + j <- row h I + 8 s + j), so that one MMA thread holds a gate and its up."""
    e, n = qweight.shape[:2]
    if n % 16:
        raise ValueError(f"gate_up rows pair in 16-row stripes, got {n} rows")
    return qweight.view(e, 2, n // 16, 8, *qweight.shape[2:]).transpose(1, 2).reshape(qweight.shape)


def unpair_gate_up_rows(qweight: torch.Tensor) -> torch.Tensor:
    """Inverse of pair_gate_up_rows."""
    e, n = qweight.shape[:2]
    return qweight.view(e, n // 16, 2, 8, *qweight.shape[2:]).transpose(1, 2).reshape(qweight.shape)


def stripe_experts(qweight: torch.Tensor, k: int, gate_up: bool = False) -> torch.Tensor:
    """Stacked experts int32 [E, N, K/8] (hinfer.quant.int4 rows) -> the same words stripe by stripe [E, N/16, 2K]:
    each 16-row stripe's 128-groups one after another, a group's 256 words as [r3, g, t, w] = word 4 t + w of the
    group in row 8 r3 + g of the stripe (`gate_up`: its rows paired first, pair_gate_up_rows). Only the words move
    (each keeps its nibbles, so a thread's 16 bytes unpack as the row layout's), and a warp's load of them is one
    512-byte run; the grouped kernels find any word by its row and column (stripe_word_offset). A few experts at a
    time."""
    e, n = qweight.shape[:2]
    _check(n, k)
    out = torch.empty((e, n // TILE_N, 2 * k), dtype=torch.int32, device=qweight.device)
    step = max(1, (1 << 24) // (n * k // 8))  # ~64 MB of words a chunk
    for e0 in range(0, e, step):
        q = qweight[e0 : e0 + step]
        q = pair_gate_up_rows(q) if gate_up else q
        out[e0 : e0 + step] = q.view(-1, n // TILE_N, 2, 8, k // 128, 4, 4).permute(0, 1, 4, 2, 3, 5, 6).reshape(
            -1, n // TILE_N, 2 * k)  # fmt: skip
    return out


def unstripe_experts(words: torch.Tensor, k: int, gate_up: bool = False) -> torch.Tensor:
    """Inverse of stripe_experts: [E, N/16, 2K] -> [E, N, K/8]."""
    e, stripes = words.shape[:2]
    g = k // 128
    q = words.view(e, stripes, g, 2, 8, 4, 4).permute(0, 1, 3, 4, 2, 5, 6).reshape(e, stripes * TILE_N, k // 8)
    return unpair_gate_up_rows(q) if gate_up else q


def stored_as(w, words: str, gate_up: bool):
    """Stacked int4 experts (hinfer.ops.triton.moe_int4.Int4Experts, rows) with their words in the order `words`
    names: `rows` as given or `stripes` (stripe_experts); `gate_up`: [gate | up] rows, paired a stripe."""
    if words == "rows":
        return w
    if words != "stripes":
        raise ValueError(f"int4 experts' words are `rows` or `stripes`, got {words!r}")
    return w._replace(qweight=stripe_experts(w.qweight, w.in_features, gate_up), words=words)


def stripe_word_offset(row: torch.Tensor, col: torch.Tensor, k: int) -> torch.Tensor:
    """Offset, within an expert of stripe_experts' layout, of word `col` of row `row` (of the paired rows)."""
    s, r = row // TILE_N, row % TILE_N
    g, w = col // 16, col % 16
    return s * (2 * k) + g * 256 + (r // 8) * 128 + ((r % 8) * 4 + w // 4) * 4 + w % 4


def _bf16_pair_lop3(words: torch.Tensor, j: int) -> tuple[torch.Tensor, torch.Tensor]:
    """lop3(word >> 4 j, 0x000f000f, 0x43004300) as (low, high) bf16 values (128 + u, exact)."""
    r = ((words.long() & 0xFFFFFFFF) >> (4 * j)) & 0x000F000F | 0x43004300
    lo = (r & 0xFFFF).to(torch.int32) << 16  # bf16 bits -> fp32 bits
    hi = (r >> 16).to(torch.int32) << 16
    return lo.view(torch.float32), hi.view(torch.float32)


def fragments_to_matrix(words: torch.Tensor, zeros: torch.Tensor | None, n: int, k: int) -> torch.Tensor:
    """What the kernel's unpack puts into the A fragments, placed at their (row, K index): fp32 [N, K] of u - z.
    Decodes through the register semantics (lop3 pairs), `fragment_coords` and `real_k`, not permute_words."""
    _check(n, k)
    stripes = n // TILE_N
    w = words.view(stripes, k // CHUNK_K, 32, 4)  # [stripe, kc, lane, j]
    lane = torch.arange(32, device=words.device)
    out = torch.empty(n, k, dtype=torch.float32, device=words.device)
    rows0 = (torch.arange(stripes, device=words.device) * TILE_N)[:, None, None, None]
    kt = (4 * torch.arange(k // CHUNK_K, device=words.device)[:, None] + torch.arange(4, device=words.device))
    for reg in range(4):
        lo, hi = _bf16_pair_lop3(w, reg)
        for h, v in ((0, lo), (1, hi)):
            e = torch.tensor(2 * reg + h, device=words.device)
            r, c = fragment_coords(lane, e)  # [32]
            row = rows0 + r[None, None, :, None]
            col = real_k(kt[None, :, None, :], c[None, None, :, None])
            row, col = torch.broadcast_tensors(row, col)
            out[row.reshape(-1), col.reshape(-1)] = v.reshape(-1)
    z = 8.0 if zeros is None else zeros.float().t().repeat_interleave(GROUP, dim=1)[:, :k]
    return out - 128.0 - z  # the bf16x2 fma subtracting 128 + z is exact


def s8_registers(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The int8 A-fragment registers a word gives with one shift and two lop3, bytes as int8 [..., 4] each:
    lo = ((w << 4) ^ 0x80808080) & 0xf0f0f0f0 holds positions 0, 2, 4, 6 (row g: fragment columns 2t, 2t + 8,
    2t + 1, 2t + 9), hi = (w ^ 0x80808080) & 0xf0f0f0f0 positions 1, 3, 5, 7 (row g + 8, the same columns), each
    byte 16 (u - 8): the nibble's top bit flipped reads it as u - 8 in two's complement, in a byte's high half.
    So the fragment order feeds an int8 x int8 MMA (m16n8k32: registers 0 / 1 = lo / hi of one word, 2 / 3 of
    the next) with no other layout, x's int8 bytes taken in the same column order."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    lo = (((w << 4) & 0xFFFFFFFF) ^ 0x80808080) & 0xF0F0F0F0
    hi = (w ^ 0x80808080) & 0xF0F0F0F0

    def as_bytes(r: torch.Tensor) -> torch.Tensor:
        return r.to(torch.int32).contiguous().unsqueeze(-1).view(torch.int8)

    return as_bytes(lo), as_bytes(hi)


def s8_matrix(words: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """s8_registers' bytes placed at their (row, K index): int32 [N, K] of 16 (u - 8), decoded through the
    register semantics, fragment_coords and real_k (byte b of a word at fragment column (2t, 2t + 8, 2t + 1,
    2t + 9)[b], lo row g, hi row g + 8), not permute_words."""
    _check(n, k)
    stripes = n // TILE_N
    lo, hi = s8_registers(words.view(stripes, k // CHUNK_K, 32, 4))  # [stripe, kc, lane, j, 4]
    lane = torch.arange(32, device=words.device)
    g, t = lane // 4, lane % 4
    cols = torch.stack([2 * t, 2 * t + 8, 2 * t + 1, 2 * t + 9], dim=-1)  # [lane, byte]
    kt = 4 * torch.arange(k // CHUNK_K, device=words.device)[:, None] + torch.arange(4, device=words.device)
    kk = real_k(kt[:, None, :, None], cols[None, :, None, :])  # [kc, lane, j, byte]
    out = torch.empty(n, k, dtype=torch.int32, device=words.device)
    rows0 = (torch.arange(stripes, device=words.device) * TILE_N)[:, None, None, None, None]
    for r3, v in ((0, lo), (8, hi)):
        row = rows0 + (g + r3)[None, None, :, None, None]
        row, col = torch.broadcast_tensors(row, kk[None])
        out[row.reshape(-1), col.reshape(-1)] = v.to(torch.int32).reshape(-1)
    return out


def emulate_kernel_a8(words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, x: torch.Tensor,
                      n: int) -> torch.Tensor:  # fmt: skip
    """The int4 x int8 decode's arithmetic (designed, docs/quantization.md): x quantized per row and 128-group
    (hinfer.quant.int4.quantize_act_int8_ref); per group the exact integer sum S = sum 16 (u - 8) xq (an int8
    MMA's s32) and sum xq; the partial (S / 16 - (z - 8) sum xq) s_w s_x in fp32, summed over groups in fp32,
    rounded once to x.dtype. scales / zeros are the [G, N] tensors."""
    from hinfer.quant.int4 import quantize_act_int8_ref

    m, k = x.shape
    a = s8_matrix(words, n, k).to(torch.int64)  # [N, K]
    xq, sx = quantize_act_int8_ref(x, GROUP)
    xq = xq.to(torch.int64)
    zg = torch.full_like(scales, 8, dtype=torch.float32) if zeros is None else zeros.float()  # [G, N]
    acc = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for gi in range(scales.shape[0]):
        ks = slice(gi * GROUP, (gi + 1) * GROUP)
        s32 = xq[:, ks] @ a[:, ks].t()  # [M, N] exact
        sq = xq[:, ks].sum(1, keepdim=True).float()  # [M, 1]
        part = s32.float() * 0.0625 - (zg[gi][None, :] - 8.0) * sq
        acc += part * (scales[gi].float()[None, :] * sx[:, gi : gi + 1])
    return acc.to(x.dtype)


def emulate_kernel(
    words: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    x: torch.Tensor,
    n: int,
    offset_mma: bool = False,
) -> torch.Tensor:
    """The kernel's arithmetic in torch: per group an fp32 MMA partial [M, N] (bf16 products are exact),
    scaled by the group's fp32 scale and summed over groups in fp32, rounded once to x.dtype. The partial is
    sum (u - z) x from exact integer fragments, or with `offset_mma` sum (128 + u) x - (128 + z) sum x (the
    kernel's default: the raw lop3 values, the offset taken off afterwards). scales / zeros are the [G, N]
    tensors."""
    m, k = x.shape
    a = fragments_to_matrix(words, zeros, n, k)
    zg = torch.full_like(scales, 8, dtype=torch.float32) if zeros is None else zeros.float()  # [G, N]
    xf = x.float()
    acc = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for gi in range(scales.shape[0]):
        ks = slice(gi * GROUP, min(k, (gi + 1) * GROUP))
        if offset_mma:
            off = 128.0 + zg[gi]
            part = xf[:, ks] @ (a[:, ks] + off[:, None]).t() - off[None, :] * xf[:, ks].sum(1, keepdim=True)
        else:
            part = xf[:, ks] @ a[:, ks].t()
        acc += part * scales[gi].float()[None, :]
    return acc.to(x.dtype)
