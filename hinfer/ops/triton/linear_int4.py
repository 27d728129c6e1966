"""INT4 unpacking shared by the linear kernels, and the one-time check of its fast inline-PTX variant.

Packed layout (hinfer.quant.int4): int32 words [N, K/8]; word c of a row holds elements 8c..8c+7 as unsigned
nibbles u in [0, 15], element 8c + e at bits 4 * POS[e], POS = (0, 4, 1, 5, 2, 6, 3, 7): the low 16 bits hold
the even elements, the high 16 bits the odd ones, so one `lop3` with mask 0x000f000f yields the consecutive
pair (e, e + 1) in one bf16x2 register, already in the order the tensor cores want. The value is
(u - 8) * scale (symmetric) or (u - zero) * scale (asymmetric), per row and group of 128 along K.

Both variants return the exact integers (u - 8) as bf16 [BLOCK_N, BLOCK_K] in natural K order:
- asm (CUDA): Marlin's bf16 trick: 0x4300 | u is bf16 128 + u, so per word 3 shifts, 4 lop3 and 4
  fma.bf16x2 (x * 1 - 136) give 8 values: ~1.4 instructions per element. Used only after `fast_int4_ok()` has
  compared it with the portable variant on the GPU (a PTX or Triton change then costs speed, not correctness).
- portable: shifts and masks, then the fp32 magic number ((u | 0x4B000000) as fp32 is 2^23 + u) instead of
  int->float conversions (16/clk/SM), then a packed fp32->bf16 conversion: ~3.5 instructions per element.
Both build the tile with nested `tl.join`s (new dims stay in-thread), never a shared-memory reshuffle.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# outputs $0..$7 = elements 0..7 of the word in $8: after shifting by 4j, lop3 takes nibble positions j
# (bits 4j, element 2j) and j + 4 (bits 16 + 4j, element 2j + 1) into one bf16x2 register.
_INT4_ASM = tl.constexpr("""
{
.reg .b32 t0, t1, t2, t3, sh, msk, mag, one, off;
mov.b32 msk, 0x000f000f;
mov.b32 mag, 0x43004300;
mov.b32 one, 0x3f803f80;
mov.b32 off, 0xc308c308;
lop3.b32 t0, $8, msk, mag, 0xea;
shr.u32 sh, $8, 4;
lop3.b32 t1, sh, msk, mag, 0xea;
shr.u32 sh, $8, 8;
lop3.b32 t2, sh, msk, mag, 0xea;
shr.u32 sh, $8, 12;
lop3.b32 t3, sh, msk, mag, 0xea;
fma.rn.bf16x2 t0, t0, one, off;
fma.rn.bf16x2 t1, t1, one, off;
fma.rn.bf16x2 t2, t2, one, off;
fma.rn.bf16x2 t3, t3, one, off;
mov.b32 {$0, $1}, t0;
mov.b32 {$2, $3}, t1;
mov.b32 {$4, $5}, t2;
mov.b32 {$6, $7}, t3;
}
""")


@triton.jit
def _nibble(words, SHIFT: tl.constexpr):
    u = (words >> SHIFT) & 0xF
    return ((u | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0).to(tl.bfloat16)  # (2^23+u)-(2^23+8)


@triton.jit
def int4_minus8(words, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr):
    """words int32 [BLOCK_N, BLOCK_K // 8] -> bf16 [BLOCK_N, BLOCK_K] holding u - 8, natural K order."""
    if FAST:
        e0, e1, e2, e3, e4, e5, e6, e7 = tl.inline_asm_elementwise(
            _INT4_ASM, "=h,=h,=h,=h,=h,=h,=h,=h,r", [words],
            dtype=(tl.bfloat16,) * 8, is_pure=True, pack=1,
        )  # fmt: skip
    else:
        e0, e1, e2, e3 = _nibble(words, 0), _nibble(words, 16), _nibble(words, 4), _nibble(words, 20)
        e4, e5, e6, e7 = _nibble(words, 8), _nibble(words, 24), _nibble(words, 12), _nibble(words, 28)
    # join makes the new dim the fastest: [..., a, b, c] = element 4a + 2b + c, pairs (2j, 2j+1) adjacent
    lo = tl.join(tl.join(e0, e4), tl.join(e2, e6))
    hi = tl.join(tl.join(e1, e5), tl.join(e3, e7))
    return tl.reshape(tl.join(lo, hi), [BLOCK_N, BLOCK_K])


@triton.jit
def _unpack_check_kernel(w_ptr, out_ptr, n_words, FAST: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    cols = tl.arange(0, BLOCK // 8)
    words = tl.load(w_ptr + rows[:, None] * (BLOCK // 8) + cols[None, :])
    v = int4_minus8(words, 16, BLOCK, FAST)
    tl.store(out_ptr + rows[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], v)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def fast_int4_ok(device_index: int) -> bool:
    """Whether the inline-PTX unpack compiles and matches the portable one on this GPU (checked once; call
    outside CUDA-graph capture: the first int4 matmul on a device does). HINFER_INT4_ASM=0 disables it."""
    if interpreting() or os.environ.get("HINFER_INT4_ASM", "1") == "0" or not torch.cuda.is_available():
        return False
    dev = torch.device("cuda", device_index)
    gen = torch.Generator(device=dev).manual_seed(0)
    words = torch.randint(-(2**31), 2**31 - 1, (64, 16), dtype=torch.int32, device=dev, generator=gen)
    outs = []
    try:
        for fast in (False, True):
            out = torch.empty(64, 128, dtype=torch.bfloat16, device=dev)
            _unpack_check_kernel[(4,)](words, out, words.numel(), FAST=fast, BLOCK=128)
            outs.append(out)
        ok = torch.equal(outs[0], outs[1])
    except Exception:  # noqa: BLE001 - any compile/launch failure means: use the portable unpack
        ok = False
    if not ok:
        import warnings

        warnings.warn(
            "hinfer: inline-PTX int4 unpack unavailable or wrong here; using the portable one", stacklevel=2
        )
    return ok
