"""Pieces shared by the paged attention kernels: cache addressing, the K/V tile load, one online-softmax step.

Loops over key blocks are `for ... in range(lo, hi)` on the GPU (Triton pipelines those) and a `while` loop
under the interpreter, whose range() cannot take a loaded scalar with numpy >= 2.4.

The KV cache is [num_pages, page_size, n_kv, head_dim] per layer; a sequence's token n lives in page
page_table[b, n // PAGE] at row n % PAGE. `load_tile` is the single place a cache tile is read and converted
to the compute dtype (bf16 / fp8 / int8 codes: exact in bf16), per storage format (hinfer.kv_format):
- int8 has an fp32 scale per token and head, applied either to the [M, N] scores / probabilities after the dot
  (INT8: s = (q . k_codes) * k_scale, acc += (p * v_scale) @ v_codes, the tile goes to the tensor cores as
  loaded) or to the [N, D] tile in registers (INT8_TILE); each kernel picks per K and V what compiles to fewer
  registers on sm_90;
- int4 (INT4: k8v4's V, int4's K and V) has a scale per 64 values of a row, which varies along D, so the tile
  is unpacked and scaled in registers before the dot. int4 keys are stored Hadamard-rotated and the queries
  arrive rotated alike (attention_rope), so they read like any other K.
Neither writes a dequantized copy to memory. Int8 keys have a q8 form (a tile option): the queries rounded to
int8 per row (`quantize_rows_int8`), the scores on int8 tensor cores from the codes as loaded, no conversion.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hinfer.kv_format import INT4_GROUP, CacheFormat
from hinfer.ops.kv_cache import cache_format, kv_scales
from hinfer.ops.triton.common import cast

# How a kernel reads a cache (constexpr K_FMT / V_FMT): PLAIN; INT8 with its per-token scale applied after
# the dot (INT8) or to the tile in registers (INT8_TILE); INT4 (always scaled in the tile: its scales vary
# along D)
PLAIN, INT8, INT4, INT8_TILE = 0, 1, 2, 3
GROUP4: tl.constexpr = tl.constexpr(INT4_GROUP)  # values per int4 scale


def int8_codes(fmt: CacheFormat) -> bool:
    """Whether a cache format stores int8 codes with a scale per token and head (the q8 form's keys)."""
    return fmt.elem_bytes == 1 and fmt.scaled and fmt.pack == 1


def cache_args(cache: torch.Tensor, int8_in_tile: bool = False) -> tuple[torch.Tensor, int, int, int, int]:
    """(scales, page stride, token stride, head stride, read code) kernel arguments of one layer's K or V
    cache; an unscaled cache passes itself as the never-read scale pointer. Where an int8 scale is applied is
    the kernel's choice (by sm_90 register counts, tests/ops/test_attention_aot.py)."""
    fmt, s = cache_format(cache), kv_scales(cache)
    if s is None:
        return cache, 0, 0, 0, PLAIN
    assert s.stride(2 if fmt.pack == 1 else 3) == 1
    code = (INT8_TILE if int8_in_tile else INT8) if fmt.pack == 1 else INT4
    return s, s.stride(0), s.stride(1), s.stride(2), code


@triton.jit
def kv_page_rows(pt_row_ptr, n0, n, mask, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """(page id int64 [BLOCK_N] or scalar, row in page [BLOCK_N]) of tokens n = n0 + arange(BLOCK_N)."""
    if BLOCK_N <= PAGE:
        # n0 is a multiple of BLOCK_N and PAGE % BLOCK_N == 0: the whole block sits in one page
        page = tl.load(pt_row_ptr + n0 // PAGE).to(tl.int64)
        return page, n0 % PAGE + tl.arange(0, BLOCK_N)
    else:
        pages = tl.load(pt_row_ptr + n // PAGE, mask=mask, other=0).to(tl.int64)
        return pages, n % PAGE


@triton.jit
def load_tile(
    ptr, page, row, stride_p, stride_t, head_off, mask, s_ptr, s_p, s_t, s_h, kvh,
    dt: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, EMU: tl.constexpr, FMT: tl.constexpr,
    PAIRS: tl.constexpr = False, WORDS: tl.constexpr = False,
):  # fmt: skip
    """One [BLOCK_N, D] tile of a kv head in the compute dtype `dt` (fp32 under the interpreter, whose dot
    cannot take bf16, and whose int8 -> bf16 conversion is wrong), and the per-token scales the caller applies
    after the dot (INT8; a placeholder otherwise). INT8_TILE and INT4 tiles are scaled here, in registers
    (INT4 unpacked and scaled per group). WORDS (a tile option, GPU only): tiles read a 32-bit word at a time and
    turned two values an instruction: int4 codes by their bits (plain Triton), and in the f16 form int8 tiles and
    fp8 values through inline PTX, values in the tile's row layout, whence the dot reads them by ldmatrix (read
    in the dot's layout, a value tile is gathered from shared memory byte by byte: its dot runs along the keys,
    across rows; fp8 keys convert best in the dot's layout, sm_90 SASS). Fewer instructions, but the unpacked
    tile reaches the dot through another pass of shared memory: measured per format (tiles.forms.DecodeTile).
    PAIRS (the values' tile) with WORDS: bf16 int4 values scaled by their scales rounded to bf16, which the
    values' weighted sum absorbs (keys keep the exact fp32 product: their errors pass through the softmax)."""
    base = page * stride_p + row * stride_t + head_off
    if dt == tl.float16 and FMT != 0:  # integer codes to fp16 without an int -> float conversion
        x, scale = _load_tile_f16(ptr, base, mask, s_ptr, page * s_p + row * s_t + kvh * s_h, D, BLOCK_N, FMT,
                                  WORDS and not EMU)  # fmt: skip
    elif dt == tl.float16 and PAIRS and WORDS and not EMU and ptr.dtype.element_ty == tl.float8e4nv:
        x, scale = _byte_words_f16(ptr, base, mask, D, BLOCK_N, True), 1.0
    elif FMT == 2:
        g = tl.arange(0, D // GROUP4)
        s_off = page * s_p + row * s_t + kvh * s_h
        s = tl.load(s_ptr + s_off[:, None] + g[None, :], mask=mask[:, None], other=0.0)
        if dt == tl.bfloat16 and not EMU and PAIRS and WORDS:  # codes by their bits, scaled in packed bf16 pairs
            x = _int4_words(ptr, base, mask, D, BLOCK_N, tl.bfloat16)
            s = s.to(tl.bfloat16)
        else:
            j = tl.arange(0, D // 2)
            b = tl.load(ptr + base[:, None] + j[None, :], mask=mask[:, None], other=0).to(tl.int32)
            x = tl.reshape(tl.join((b & 15) - 8, (b >> 4) - 8), [BLOCK_N, D]).to(tl.float32)  # element 2j, 2j + 1
        x = tl.reshape(tl.reshape(x, [BLOCK_N, D // GROUP4, GROUP4]) * s[:, :, None], [BLOCK_N, D])
        scale = 1.0
    else:
        d = tl.arange(0, D)
        x = tl.load(ptr + base[:, None] + d[None, :], mask=mask[:, None], other=0.0)
        if FMT == 1:
            scale = tl.load(s_ptr + page * s_p + row * s_t + kvh * s_h, mask=mask, other=0.0)
        elif FMT == 3:
            s = tl.load(s_ptr + page * s_p + row * s_t + kvh * s_h, mask=mask, other=0.0)
            x = x.to(tl.float32) * s[:, None]
            scale = 1.0
        else:
            scale = 1.0
    if EMU:
        return x.to(tl.float32), scale
    return x.to(dt), scale


@triton.jit
def _nibble_pair(w, SHIFT: tl.constexpr, dt: tl.constexpr):
    """Nibbles at bits SHIFT and SHIFT + 16 of each word as two `dt` values, 1024 + code in fp16 (128 + code in
    bf16): the code ORed under the exponent where the format counts in ones, two values per 32-bit op."""
    magic: tl.constexpr = 0x64006400 if dt == tl.float16 else 0x43004300
    t = ((w >> SHIFT) & 0x000F000F) | magic
    return t.to(tl.int16).to(dt, bitcast=True), (t >> 16).to(tl.int16).to(dt, bitcast=True)


@triton.jit
def _int4_words(ptr, base, mask, D: tl.constexpr, BLOCK_N: tl.constexpr, dt: tl.constexpr):
    """An int4 tile [BLOCK_N, D] (byte j: element 2j in its low nibble, 2j + 1 in its high) as code - 8 in `dt`
    (fp16 or bf16, exact in both), read a 32-bit word (8 values) at a time: no int -> float conversion, each
    mask-and-OR makes two values. Rows start 4-byte aligned (D / 2 bytes a row, D % 8 == 0)."""
    tl.static_assert(D % 8 == 0)
    j = tl.arange(0, D // 8)
    w = tl.load(ptr.to(tl.pointer_type(tl.int32)) + (base // 4)[:, None] + j[None, :], mask=mask[:, None], other=0)
    e0, e4 = _nibble_pair(w, 0, dt)
    e1, e5 = _nibble_pair(w, 4, dt)
    e2, e6 = _nibble_pair(w, 8, dt)
    e3, e7 = _nibble_pair(w, 12, dt)
    # join makes the new dim the fastest: [..., a, b, c] = element 4a + 2b + c
    lo = tl.join(tl.join(e0, e4), tl.join(e2, e6))
    hi = tl.join(tl.join(e1, e5), tl.join(e3, e7))
    offset: tl.constexpr = 1032.0 if dt == tl.float16 else 136.0
    return tl.reshape(tl.join(lo, hi), [BLOCK_N, D]) - offset


# A word of four fp8 (e4m3) values to four fp16: two packed conversions (byte 0 -> element 0, ...)
_FP8_WORD_ASM = tl.constexpr("""{
.reg .b16 l, h;
.reg .b32 a, b;
mov.b32 {l, h}, $4;
cvt.rn.f16x2.e4m3x2 a, l;
cvt.rn.f16x2.e4m3x2 b, h;
mov.b32 {$0, $1}, a;
mov.b32 {$2, $3}, b;
}""")
# A word of four int8 codes to four fp16 (c): each byte, sign bit flipped (c + 128), put under 0x64 (1024 + 128 +
# c, exact), then 1152 taken off two at a time
_INT8_WORD_ASM = tl.constexpr("""{
.reg .b32 t, a, b, k;
xor.b32 t, $4, 0x80808080;
prmt.b32 a, t, 0x64646464, 0x4140;
prmt.b32 b, t, 0x64646464, 0x4342;
mov.b32 k, 0x64806480;
sub.rn.f16x2 a, a, k;
sub.rn.f16x2 b, b, k;
mov.b32 {$0, $1}, a;
mov.b32 {$2, $3}, b;
}""")


@triton.jit
def _byte_words_f16(ptr, base, mask, D: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    """A 1-byte tile [BLOCK_N, D] (fp8 e4m3 values, or int8 codes) as fp16, read a 32-bit word at a time and
    converted two values an instruction (GPU only: inline PTX). Rows start 4-byte aligned (D % 4 == 0)."""
    tl.static_assert(D % 4 == 0)
    j = tl.arange(0, D // 4)
    w = tl.load(ptr.to(tl.pointer_type(tl.int32)) + (base // 4)[:, None] + j[None, :], mask=mask[:, None], other=0)
    if FP8:
        e0, e1, e2, e3 = tl.inline_asm_elementwise(_FP8_WORD_ASM, "=h,=h,=h,=h,r", [w], dtype=(tl.float16,) * 4,
                                                   is_pure=True, pack=1)  # fmt: skip
    else:
        e0, e1, e2, e3 = tl.inline_asm_elementwise(_INT8_WORD_ASM, "=h,=h,=h,=h,r", [w], dtype=(tl.float16,) * 4,
                                                   is_pure=True, pack=1)  # fmt: skip
    # join makes the new dim the fastest: [..., a, b] = element 2a + b
    return tl.reshape(tl.join(tl.join(e0, e2), tl.join(e1, e3)), [BLOCK_N, D])


@triton.jit
def _byte_words_check_kernel(ptr, out_ptr, D: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    """Converts rows of fp8 / int8 [BLOCK_N, D] with `_byte_words_f16` into fp16 out [BLOCK_N, D] (GPU tests)."""
    n = tl.arange(0, BLOCK_N)
    x = _byte_words_f16(ptr, n * D, n < BLOCK_N, D, BLOCK_N, FP8)
    tl.store(out_ptr + n[:, None] * D + tl.arange(0, D)[None, :], x)


@triton.jit
def _int4_words_check_kernel(ptr, out_ptr, D: tl.constexpr, BLOCK_N: tl.constexpr, F16: tl.constexpr):
    """Unpacks rows of int4 bytes [BLOCK_N, D / 2] with `_int4_words` into out [BLOCK_N, D] (tests)."""
    n = tl.arange(0, BLOCK_N)
    dt: tl.constexpr = tl.float16 if F16 else tl.bfloat16
    x = _int4_words(ptr, n * (D // 2), n < BLOCK_N, D, BLOCK_N, dt)
    tl.store(out_ptr + n[:, None] * D + tl.arange(0, D)[None, :], x)


@triton.jit
def _load_tile_f16(
    ptr, base, mask, s_ptr, s_off, D: tl.constexpr, BLOCK_N: tl.constexpr, FMT: tl.constexpr, WORDS: tl.constexpr,
):  # fmt: skip
    """load_tile's fp16 form on the GPU: integer codes become fp16 without an int -> float conversion (a
    quarter-rate instruction on sm_90): the code's bits ORed under the exponent of 1024, where fp16 counts in
    ones, then the offset taken off in fp16, exact (int8: 1024 + 128 + c; int4: 1024 + c + 8)."""
    if FMT == 2:
        if WORDS:
            x = _int4_words(ptr, base, mask, D, BLOCK_N, tl.float16)
        else:  # a byte at a time: two nibbles under the exponent of 1024
            j = tl.arange(0, D // 2)
            b = tl.load(ptr + base[:, None] + j[None, :], mask=mask[:, None], other=0).to(tl.int16)
            lo = ((b & 15) | 0x6400).to(tl.float16, bitcast=True)
            hi = ((b >> 4) | 0x6400).to(tl.float16, bitcast=True)
            x = tl.reshape(tl.join(lo, hi), [BLOCK_N, D]) - 1032.0  # element 2j, 2j + 1
        g = tl.arange(0, D // GROUP4)
        s = tl.load(s_ptr + s_off[:, None] + g[None, :], mask=mask[:, None], other=0.0).to(tl.float16)
        x = tl.reshape(tl.reshape(x, [BLOCK_N, D // GROUP4, GROUP4]) * s[:, :, None], [BLOCK_N, D])
        scale = 1.0
    else:
        if WORDS:  # four codes a word (inline PTX: GPU only)
            x = _byte_words_f16(ptr, base, mask, D, BLOCK_N, False)
        else:
            d = tl.arange(0, D)
            x = tl.load(ptr + base[:, None] + d[None, :], mask=mask[:, None], other=0)
            x = ((x.to(tl.int16) + 0x6480).to(tl.float16, bitcast=True)) - 1152.0
        scale = tl.load(s_ptr + s_off, mask=mask, other=0.0)
        if FMT == 3:
            x = x * scale.to(tl.float16)[:, None]
            scale = 1.0
    return x, scale


# LAZY: the running max moves (and the accumulator is rescaled) only once a block's scores pass it by more than
# LAZY_TAU (base 2): probabilities then stay <= 2^LAZY_TAU, far inside bf16 / fp32, and the rows' sums and outputs
# are the same quotients, relative to a stale max
LAZY_TAU: tl.constexpr = tl.constexpr(8.0)
# int8 values scaled after the dot in fp16: p x scale x 2^8 stays normal down to |v| ~ 3e-4 (fp16 overflows only
# past |v| ~ 32,000)
F16_P_SHIFT: tl.constexpr = tl.constexpr(256.0)


@triton.jit
def quantize_rows_int8(x, EMU: tl.constexpr):
    """Rows of x [M, D] (fp32) as int8 codes round(x / scale), scale = max |x| / 127 per row (1 for a zero row),
    and the scales [M]: the queries of int8-key scores (halves round away from zero, as the reference)."""
    scale = tl.max(tl.abs(x), axis=1) / 127.0
    scale = tl.where(scale > 0.0, scale, 1.0)
    y = x / scale[:, None]
    c = tl.where(y >= 0.0, tl.floor(y + 0.5), -tl.floor(0.5 - y))
    if EMU:
        return c, scale
    return c.to(tl.int8), scale


@triton.jit
def softmax_step(
    q, k, v, m_i, l_i, acc, valid, qk_scale, k_scale, v_scale,
    dt: tl.constexpr, EMU: tl.constexpr, MASKED: tl.constexpr, SAFE: tl.constexpr,
    K_SCALED: tl.constexpr, V_SCALED: tl.constexpr, LAZY: tl.constexpr = False, Q8: tl.constexpr = False,
    q_scale=1.0,
):  # fmt: skip
    """One online-softmax update (base 2) of rows q [M, D] with keys k and values v [N, D].

    `valid` [M, N] masks keys when MASKED. SAFE guards rows that have seen no key yet (m == -inf), which
    only happens in split-KV decode where a split can lie past a row's causal limit. K_SCALED / V_SCALED:
    k / v are int8 codes and k_scale / v_scale [N] their per-token scales; Q8: q holds int8 codes too, q_scale
    [M] their per-row scales (int8 tensor cores for the scores). LAZY: the max and the accumulator
    move only when some row's scores pass its max by more than LAZY_TAU (one test for the whole block: the
    rescale is most of the update's instructions on wide accumulators, and after the first blocks it is rarely
    needed).
    """
    # fp32 models get true fp32 dots (Triton would use TF32); bf16/fp16 use the tensor cores as they are
    prec: tl.constexpr = "ieee" if dt == tl.float32 else "tf32"
    if Q8:  # int8 queries (q_scale [M]) on int8 key codes: int8 tensor cores, exact int32 sums
        if EMU:  # k arrives in fp32 (load_tile)
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            s = tl.dot(q, tl.trans(k), out_dtype=tl.int32).to(tl.float32)
        s = s * q_scale[:, None] * (k_scale * qk_scale)[None, :]
    elif K_SCALED:
        s = tl.dot(q, tl.trans(k), input_precision=prec) * (k_scale * qk_scale)[None, :]
    else:
        s = tl.dot(q, tl.trans(k), input_precision=prec) * qk_scale
    if MASKED:
        s = tl.where(valid, s, float("-inf"))
    m_blk = tl.max(s, axis=1)
    if LAZY:
        move = tl.max(tl.where(m_blk > m_i + LAZY_TAU, 1, 0), axis=0) > 0
    else:
        move = True
    m_new = m_i
    if move:
        m_new = tl.maximum(m_i, m_blk)
        alpha = tl.exp2(m_i - _finite_max(m_new, SAFE))
        acc = acc * alpha[:, None]
        l_i = l_i * alpha
    p = tl.exp2(s - _finite_max(m_new, SAFE)[:, None])
    if V_SCALED and dt == tl.float16:
        # p times a small row's scale sinks into fp16's subnormals (|v| ~ 1e-3: scales ~ 1e-5): p and the row
        # sums carry F16_P_SHIFT, exact, which the output's division takes off (and split partials' log-sum-exp
        # all gain log2 of it, which their combine cancels)
        l_i = l_i + tl.sum(p, axis=1) * F16_P_SHIFT
        p = p * (v_scale * F16_P_SHIFT)[None, :]
    else:
        l_i = l_i + tl.sum(p, axis=1)
        if V_SCALED:
            p = p * v_scale[None, :]
    p_in = cast(p, dt, EMU)
    if EMU:
        p_in = p_in.to(tl.float32)
    acc = tl.dot(p_in, v, acc, input_precision=prec)
    return m_new, l_i, acc


@triton.jit
def _finite_max(m, SAFE: tl.constexpr):
    """The max the scores are taken off: 0 where a row has seen no key yet (SAFE), so that exp2 gives 0, not NaN."""
    if SAFE:
        return tl.where(m == float("-inf"), 0.0, m)
    return m


@triton.jit
def attend_block(
    n0, q, qpos, m_i, l_i, acc, pt_row, kv_end,
    k_ptr, v_ptr, skp, skt, k_head, svp, svt, v_head, qk_scale,
    ks_ptr, ksp, kst, ksh, vs_ptr, vsp, vst, vsh, kvh,
    dt: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, EMU: tl.constexpr,
    MASKED: tl.constexpr, SAFE: tl.constexpr, K_FMT: tl.constexpr, V_FMT: tl.constexpr, LAZY: tl.constexpr = False,
    WORDS: tl.constexpr = False, Q8: tl.constexpr = False, q_scale=1.0,
):  # fmt: skip
    """Keys n0 .. n0 + BLOCK_N of one sequence (those < kv_end; causal against qpos when MASKED). Scaled
    formats: kv head kvh's scales of a token are at ks_ptr + page * ksp + row * kst + kvh * ksh (V alike).
    LAZY: softmax_step's lazy rescale; WORDS: load_tile's."""
    n = n0 + tl.arange(0, BLOCK_N)
    kv_ok = n < kv_end
    page, row = kv_page_rows(pt_row, n0, n, kv_ok, PAGE, BLOCK_N)
    # Q8: the int8 key codes as stored (the tile's type int8), their per-token scales after the dot
    k, k_scale = load_tile(k_ptr, page, row, skp, skt, k_head, kv_ok, ks_ptr, ksp, kst, ksh, kvh,
                           tl.int8 if Q8 else dt, D, BLOCK_N, EMU, K_FMT, False, WORDS)  # fmt: skip
    v, v_scale = load_tile(v_ptr, page, row, svp, svt, v_head, kv_ok, vs_ptr, vsp, vst, vsh, kvh,
                           dt, D, BLOCK_N, EMU, V_FMT, True, WORDS)  # fmt: skip
    valid = (n[None, :] <= qpos[:, None]) & kv_ok[None, :]
    return softmax_step(q, k, v, m_i, l_i, acc, valid, qk_scale, k_scale, v_scale, dt, EMU, MASKED, SAFE,
                        K_FMT == 1, V_FMT == 1, LAZY, Q8, q_scale)  # fmt: skip
