"""INT4 W4A16 GEMV (one row of x) on CUDA cores, without putting the weight back in K order.

A 4-bit weight streams at 2 elements per byte, so at copy bandwidth an H200 SM has ~4 instructions per element
for everything. The tensor-core path spends them on unpacking into bf16 in K order and moving the tile into
the MMA operand layout; here nothing moves. Word c of a row holds elements 8c + e (layout in
hinfer.quant.int4); each of its 8 nibbles meets the x element it belongs to, loaded in that same order ("plane"
e of the K-tile: x[8c + e] for every word column c), so the product needs no shuffle of the weight at all.

Nibble to fp32 in one `lop3`: OR-ing exponent bits above a nibble sitting at bits 12..15 gives the float
2048 + u, at bits 16..19 the float 128 + u (exactly). Shifting the word by 8 or rotating it by 16 brings every
nibble to one of those two places: 3 shifts and 8 lop3 per 8 weights, then one FMA each. The constant offsets
(2048 or 128 per plane) and the zero point fold into one per-word start value of the fp32 dot product:
    sum_e (u_e - z) x_e = sum_e (M_e + u_e) x_e - sum_e M_e x_e - z sum_e x_e
whose last two terms depend on x alone (per word column) and on z per row. The cancellation costs ~11 of
fp32's 24 bits at most (2048 x against |u - z| x), far below the bf16 output's rounding.

One program owns BLOCK_N rows and streams GROUPS quantization groups (128 weights, 16 words per row) per step,
keeping an fp32 [BLOCK_N, GROUPS, 16] accumulator to which each group's scale is applied; the split-K epilogue
is shared with the other skinny kernels.
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from hinfer.ops.triton.linear_int4 import interpreting
from hinfer.ops.triton.linear_splitk import store_tile

# element e of a word sits at nibble position POS[e] = (0, 4, 1, 5, 2, 6, 3, 7); after the shifts below:
#   word:        positions 3, 4 -> elements 6, 1      word << 8: positions 1, 2 -> elements 2, 4
#   word >> 8:   positions 5, 6 -> elements 3, 5      rotate 16: positions 7, 0 -> elements 7, 0
# (the nibble landing at bits 12..15 first, at bits 16..19 second). The inline PTX keeps mask and exponent in
# registers so each nibble is one lop3 (Triton's and + or takes two: lop3 has room for one immediate).
_PAIR_ASM = """{
.reg .b32 t, m12, m16, e12, e16;
mov.b32 m12, 0x0000f000;
mov.b32 m16, 0x000f0000;
mov.b32 e12, 0x45000000;
mov.b32 e16, 0x43000000;
SHIFT
lop3.b32 $0, t, m12, e12, 0xea;
lop3.b32 $1, t, m16, e16, 0xea;
}"""
# the word as is, << 8, >> 8, rotated by 16 (module constants: a jit function can only read constexpr globals)
_PAIR0, _PAIR1, _PAIR2, _PAIR3 = (
    tl.constexpr(_PAIR_ASM.replace("SHIFT", sh))
    for sh in ("mov.b32 t, $2;", "shl.b32 t, $2, 8;", "shr.u32 t, $2, 8;", "shf.l.wrap.b32 t, $2, $2, 16;")
)


@triton.jit
def _load_in_place(ptrs, FAST: tl.constexpr, BYTE: tl.constexpr):
    """tl.load as fp32, except that on the GPU an inline-PTX load keeps the layout of `ptrs`: the compiler would
    give a plain load of these broadcast addresses its own layout and re-lay the accumulator out every step."""
    if not FAST:
        v = tl.load(ptrs).to(tl.float32)
    elif BYTE:
        v = tl.inline_asm_elementwise("ld.global.nc.u8 $0, [$1];", "=r,l", [ptrs], dtype=tl.int32,
                                      is_pure=True, pack=1).to(tl.float32)  # fmt: skip
    else:
        v = tl.inline_asm_elementwise("ld.global.nc.b16 $0, [$1];", "=h,l", [ptrs], dtype=tl.bfloat16,
                                      is_pure=True, pack=1).to(tl.float32)  # fmt: skip
    return v


@triton.jit
def _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g0, g_hi, n_ok, col, rg, K, HAS_ZERO: tl.constexpr,
                FAST: tl.constexpr, EVEN: tl.constexpr, TMA: tl.constexpr):  # fmt: skip
    """Everything one step reads, issued together so a prefetched step has nothing left to wait for: packed
    words, scales, zero points (scales again when symmetric) and x as int32 pairs of bf16 (word j of column c
    holds x[8c + 2j] in its low half, x[8c + 2j + 1] in its high half). With TMA the words come from the
    tensor-memory ring instead (the first return is then a placeholder)."""
    xp = x_base + g0 * 64
    if EVEN:
        if TMA:
            words = xp
        else:
            words = tl.load(w_base + g0 * 16)
        s = _load_in_place(s_ptr + s_base + g0, FAST, False)
        z = s
        if HAS_ZERO:
            z = _load_in_place(z_ptr + s_base + g0, FAST, True)
        xa = tl.load(xp + 0)
        xb = tl.load(xp + 1)
        xc = tl.load(xp + 2)
        xd = tl.load(xp + 3)
    else:
        k_ok = ((g0 + rg) < g_hi)[:, None] & ((g0 * 16 + col) < K // 8)
        ok = n_ok[:, None, None] & k_ok[None, :, :]
        if TMA:
            words = xp
        else:
            words = tl.load(w_base + g0 * 16, mask=ok, other=0)
        s = tl.load(s_ptr + s_base + g0, mask=ok, other=0.0).to(tl.float32)
        z = s
        if HAS_ZERO:
            z = tl.load(z_ptr + s_base + g0, mask=ok, other=8).to(tl.float32)
        xa = tl.load(xp + 0, mask=k_ok, other=0)
        xb = tl.load(xp + 1, mask=k_ok, other=0)
        xc = tl.load(xp + 2, mask=k_ok, other=0)
        xd = tl.load(xp + 3, mask=k_ok, other=0)
    return words, s, z, xa, xb, xc, xd


@triton.jit
def _lo(pair):
    return (pair << 16).to(tl.float32, bitcast=True)  # bf16 in the low half -> fp32


@triton.jit
def _hi(pair):
    return (pair & -65536).to(tl.float32, bitcast=True)  # bf16 in the high half -> fp32


@triton.jit
def _at12(bits):
    return ((bits & 0xF000) | 0x45000000).to(tl.float32, bitcast=True)  # 2048 + u


@triton.jit
def _at16(bits):
    return ((bits & 0xF0000) | 0x43000000).to(tl.float32, bitcast=True)  # 128 + u


@triton.jit
def int4_plane_pair(words, PAIR: tl.constexpr, FAST: tl.constexpr):
    """Two of the 8 fp32 planes M_e + u_e of each word: PAIR 0 -> elements (6, 1), 1 -> (2, 4), 2 -> (3, 5),
    3 -> (7, 0); M = 2048 for the first of each pair, 128 for the second. One pair at a time keeps 2 values
    per word live instead of 8."""
    if FAST:
        if PAIR == 0:
            asm: tl.constexpr = _PAIR0
        elif PAIR == 1:
            asm: tl.constexpr = _PAIR1
        elif PAIR == 2:
            asm: tl.constexpr = _PAIR2
        else:
            asm: tl.constexpr = _PAIR3
        hi, lo = tl.inline_asm_elementwise(asm, "=r,=r,r", [words], dtype=(tl.float32,) * 2, is_pure=True, pack=1)
    else:
        u = words.to(tl.uint32, bitcast=True)
        if PAIR == 1:
            u = u << 8
        elif PAIR == 2:
            u = u >> 8
        elif PAIR == 3:
            u = (u << 16) | (u >> 16)
        hi, lo = _at12(u), _at16(u)
    return hi, lo


@triton.jit
def int4_gemv_kernel(
    x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, part_ptr, cnt_ptr,
    N, K, stride_wn, stride_sn,
    HAS_ZERO: tl.constexpr, FAST: tl.constexpr, EVEN: tl.constexpr, BLOCK_N: tl.constexpr,
    GROUPS: tl.constexpr, SPLIT_K: tl.constexpr, PREFETCH: tl.constexpr, TMA: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    n_groups = tl.cdiv(K, 128)
    per_split = tl.cdiv(tl.cdiv(n_groups, GROUPS), SPLIT_K) * GROUPS
    g_lo = pid_k * per_split
    g_hi = tl.minimum(g_lo + per_split, n_groups)
    rg = tl.arange(0, GROUPS)
    rc = tl.arange(0, 16)
    col = rg[:, None] * 16 + rc[None, :]  # word column inside the step, [GROUPS, 16]
    if TMA:  # w_ptr is a tensor descriptor [N, K/8] with blocks [BLOCK_N, 16 * GROUPS]: the copy engine fills a
        # shared-memory ring num_stages deep, so the bytes in flight cost no registers
        w_base = w_ptr
    else:
        w_base = w_ptr + rn.to(tl.int64)[:, None, None] * stride_wn + col[None, :, :]
    # scale / zero offsets broadcast over the 16 word columns: loaded straight into the accumulator's layout
    # (repeated addresses in one thread are one load); a [BLOCK_N, GROUPS] load would be re-laid out each step
    s_base = (rn[:, None] * stride_sn + rg[None, :])[:, :, None] + 0 * rc[None, None, :]
    x_base = x_ptr.to(tl.pointer_type(tl.int32)) + col * 4  # 16 bytes of x per word column
    acc = tl.zeros([BLOCK_N, GROUPS, 16], dtype=tl.float32)
    # PREFETCH steps ahead are loaded into registers while this one computes: more bytes in flight per SM
    last = g_hi - GROUPS  # EVEN: look-ahead past the end re-reads the last step (unmasked, never used)
    if PREFETCH >= 1:
        n1 = _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g_lo, g_hi, n_ok, col, rg, K, HAS_ZERO, FAST,
                         EVEN, TMA)  # fmt: skip
    if PREFETCH >= 2:
        g_nx = g_lo + GROUPS
        if EVEN:
            g_nx = tl.minimum(g_nx, last)
        n2 = _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g_nx, g_hi, n_ok, col, rg, K, HAS_ZERO, FAST,
                         EVEN, TMA)  # fmt: skip
    for g0 in tl.range(g_lo, g_hi, GROUPS, num_stages=STAGES):
        g_nx = g0 + PREFETCH * GROUPS
        if EVEN:
            g_nx = tl.minimum(g_nx, last)
        if PREFETCH == 0:
            cur = _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g0, g_hi, n_ok, col, rg, K, HAS_ZERO, FAST,
                              EVEN, TMA)  # fmt: skip
            cur_w, cur_s, cur_z, xa, xb, xc, xd = cur
        elif PREFETCH == 1:
            cur_w, cur_s, cur_z, xa, xb, xc, xd = n1
            n1 = _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g_nx, g_hi, n_ok, col, rg, K, HAS_ZERO, FAST,
                             EVEN, TMA)  # fmt: skip
        else:
            cur_w, cur_s, cur_z, xa, xb, xc, xd = n1
            n1 = n2
            n2 = _tile_loads(w_base, s_base, x_base, s_ptr, z_ptr, g_nx, g_hi, n_ok, col, rg, K, HAS_ZERO, FAST,
                             EVEN, TMA)  # fmt: skip
        if TMA:
            cur_w = tl.reshape(w_ptr.load([pid_n * BLOCK_N, g0 * 16]), [BLOCK_N, GROUPS, 16])
        x0, x1, x2, x3 = _lo(xa), _hi(xa), _lo(xb), _hi(xb)
        x4, x5, x6, x7 = _lo(xc), _hi(xc), _lo(xd), _hi(xd)
        xs = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
        offset = 2048.0 * ((x2 + x3) + (x6 + x7)) + 128.0 * ((x0 + x1) + (x4 + x5))
        if HAS_ZERO:
            p = -(offset[None, :, :] + cur_z * xs[None, :, :])
        else:
            p = tl.zeros([BLOCK_N, GROUPS, 16], dtype=tl.float32) - (offset + 8.0 * xs)[None, :, :]
        v6, v1 = int4_plane_pair(cur_w, 0, FAST)
        p += v6 * x6[None, :, :]
        p += v1 * x1[None, :, :]
        v2, v4 = int4_plane_pair(cur_w, 1, FAST)
        p += v2 * x2[None, :, :]
        p += v4 * x4[None, :, :]
        v3, v5 = int4_plane_pair(cur_w, 2, FAST)
        p += v3 * x3[None, :, :]
        p += v5 * x5[None, :, :]
        v7, v0 = int4_plane_pair(cur_w, 3, FAST)
        p += v7 * x7[None, :, :]
        p += v0 * x0[None, :, :]
        acc += cur_s * p
    total = tl.sum(tl.sum(acc, axis=2), axis=1)
    rm = tl.arange(0, 1)
    store_tile(total[:, None], rn, rm, n_ok, rm < 1, y_ptr, 0, part_ptr, cnt_ptr, 1, N, pid_k,
               pid_n, SPLIT_K, BLOCK_N, 1)  # fmt: skip


_DESCRIPTORS: dict[tuple, TensorDescriptor] = {}


def use_tma(w: torch.Tensor) -> bool:
    """Tensor-memory loads for the packed words: Hopper or newer (and the interpreter), rows 16-byte aligned.
    HINFER_INT4_TMA=0 falls back to register look-ahead."""
    if os.environ.get("HINFER_INT4_TMA", "1") == "0" or w.stride(-1) != 1 or (w.stride(0) * 4) % 16:
        return False
    if not w.is_cuda:
        return interpreting()
    return torch.cuda.get_device_capability(w.device)[0] >= 9 and w.data_ptr() % 16 == 0


def words_descriptor(w: torch.Tensor, block_n: int, block_words: int) -> TensorDescriptor:
    """The host-side TMA descriptor of packed words [N, K/8] (cached: it encodes only address, shape, strides
    and block, so a reused address with the same shape gets an equally valid one)."""
    key = (w.data_ptr(), tuple(w.shape), w.stride(0), w.device, block_n, block_words)
    d = _DESCRIPTORS.get(key)
    if d is None:
        if len(_DESCRIPTORS) > 4096:
            _DESCRIPTORS.clear()
        d = _DESCRIPTORS[key] = TensorDescriptor.from_tensor(w, [block_n, block_words])
    return d


@functools.cache
def fast_gemv_ok(device_index: int) -> bool:
    """Whether the inline-PTX variant (nibble planes, in-place scale loads) compiles here and gives exactly the
    portable variant's result (same fp32 operations in the same order). Checked once per device, outside
    CUDA-graph capture: the first int4 GEMV on a device does it. HINFER_INT4_ASM=0 disables it."""
    if interpreting() or os.environ.get("HINFER_INT4_ASM", "1") == "0" or not torch.cuda.is_available():
        return False
    dev = torch.device("cuda", device_index)
    gen = torch.Generator(device=dev).manual_seed(0)
    n, k = 256, 512
    words = torch.randint(-(2**31), 2**31 - 1, (n, k // 8), dtype=torch.int32, device=dev, generator=gen)
    s = torch.rand(n, k // 128, device=dev, generator=gen).bfloat16()
    z = torch.randint(0, 16, (n, k // 128), dtype=torch.uint8, device=dev, generator=gen)
    x = torch.randn(1, k, device=dev, generator=gen).bfloat16()
    try:
        ok = True
        for zero in (None, z):
            outs = []
            for fast in (False, True):
                y = torch.empty(1, n, dtype=torch.bfloat16, device=dev)
                int4_gemv_kernel[(n // 64, 1)](
                    x, words, s, zero if zero is not None else s, y, y, y, n, k, words.stride(0), s.stride(0),
                    HAS_ZERO=zero is not None, FAST=fast, EVEN=True, BLOCK_N=64, GROUPS=1, SPLIT_K=1,
                    PREFETCH=1, TMA=False, STAGES=1, num_warps=4,
                )  # fmt: skip
                outs.append(y)
            ok = ok and torch.equal(outs[0], outs[1])
    except Exception:  # noqa: BLE001 - any compile/launch failure means: use the portable variant
        ok = False
    if not ok:
        warnings.warn("hinfer: inline-PTX int4 GEMV unavailable or wrong here; using the portable one", stacklevel=2)
    return ok
