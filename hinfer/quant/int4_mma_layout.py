"""INT4 weights re-laid out in mma.sync m16n8k16 A-fragment order (swap-AB: rows of W are the MMA's M).

The tensor-core kernel (hinfer/ops/triton/linear_int4_mma.py, CUDA decode of Int4MmaWeight) loads 16 bytes per
thread and unpacks each word with Marlin's bf16 trick straight into the registers of an A fragment, so no
layout conversion sits between the load and the `mma`. This module builds that order on the host (pure torch,
CPU or GPU), inverts it, and emulates the kernel (`emulate_kernel`, the reference twin).

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

import logging
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from hinfer.ops.dispatch import int4_decode_a8, int4_wgmma_rows, use_triton
from hinfer.quant.fp8 import scaled_mm_rowwise
from hinfer.quant.int4 import (
    GROUP,
    Int4Weight,
    fp8_row_scale,
    matmul_ref_fp8,
    pack_int4,
    prefill_mode,
    unpack_int4,
)

TILE_N = 16  # rows of a stripe (the MMA's M)
CHUNK_K = 64  # K per 128-bit load: 4 k16 steps
K_ALIGN = 128  # the K remap works within 128-groups
log = logging.getLogger("hinfer.quant")
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


class Int4MmaWeight(nn.Module):
    """An Int4Weight in fragment order, the form CUDA decode reads (`use_fragment_order` swaps it in when the
    model is placed on the GPU): words [N/16, 2K], scales [G, N], zeros [G, N] uint8 or None. Same values and
    `matmul` semantics as the Int4Weight it came from; `to_int4()` gives that weight back exactly."""

    group = GROUP

    def __init__(self, words: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, n: int, k: int):
        super().__init__()
        self.register_buffer("words", words)
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.n, self.k = n, k

    @classmethod
    def from_int4(cls, w: Int4Weight) -> Int4MmaWeight:
        if w.group != GROUP:
            raise ValueError(f"the mma layout takes group {GROUP}, got {w.group}")
        n, k = w.shape
        zeros = None if w.zeros is None else w.zeros.t().contiguous()
        return cls(permute_words(w.qweight, k), w.scales.t().contiguous(), zeros, n, k)

    def to_int4(self) -> Int4Weight:
        zeros = None if self.zeros is None else self.zeros.t().contiguous()
        if self.words.is_cuda and use_triton(self.words):  # one pass of the packed bytes (int4_mma_dequant.py)
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_rows

            qweight = int4_mma_rows(self.words, self.n, self.k)
        else:
            qweight = unpermute_words(self.words, self.k)
        return Int4Weight(qweight, self.scales.t().contiguous(), zeros, self.k)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def in_features(self) -> int:
        return self.k

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype

    def extra_repr(self) -> str:
        kind = "asym" if self.zeros is not None else "sym"
        return f"{self.n}x{self.k}, int4 g{GROUP} {kind} fragment order, scales {self.scales.dtype}"

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.words, self.scales, self.zeros) if t is not None)

    def clone(self) -> Int4MmaWeight:
        z = None if self.zeros is None else self.zeros.clone()
        return Int4MmaWeight(self.words.clone(), self.scales.clone(), z, self.n, self.k)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(u - zero) * scale in fp32, rounded once to `dtype` (default: the scale dtype), as Int4Weight does."""
        dtype = dtype or self.dtype
        if self.words.is_cuda and use_triton(self.words) and dtype == torch.bfloat16:
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

            return int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k)
        return self.to_int4().dequantize(dtype)

    def matmul_ref(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.dequantize(torch.float32).t()).to(x.dtype)

    def fp8_row_scale(self) -> torch.Tensor:
        """hinfer.quant.int4.fp8_row_scale of this weight, kept while the scales are unchanged (prefill takes it
        per GEMM; its few small kernels would cost a few percent of a chunk's)."""
        key = (self.scales.data_ptr(), self.scales._version, None if self.zeros is None else self.zeros._version)
        if getattr(self, "_fp8_key", None) != key:
            zeros = None if self.zeros is None else self.zeros.t()
            self._fp8_scale, self._fp8_key = fp8_row_scale(self.scales.t(), zeros), key
        return self._fp8_scale

    def matmul_ref_fp8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the fp8 prefill path (hinfer.quant.int4.matmul_ref_fp8)."""
        return matmul_ref_fp8(x, self.dequantize(torch.float32), self.fp8_row_scale())

    def matmul(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Up to MAX_M rows: the tensor-core kernel on the fragments; more (prefill): as HINFER_INT4_PREFILL says
        (`prefill`)."""
        if not (use_triton(x) and x.dtype == torch.bfloat16):
            y = self.matmul_ref(x)
            return y if out is None else out.copy_(y.reshape(out.shape))
        from hinfer.ops.triton.linear_int4_mma import MAX_M, int4_mma_matmul

        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.k)
        if x2.shape[0] <= MAX_M:
            if self._a8_takes(x2):
                from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

                return int4_a8_matmul(x2, self, out=out).view(*lead, self.n)
            if self._wgmma_takes(x2.shape[0]):
                from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_matmul

                return int4_wgmma_matmul(x2, self, out=out).view(*lead, self.n)
            return int4_mma_matmul(x2, self, out=out).view(*lead, self.n)
        return self.prefill(x2, out, prefill_mode()).view(*lead, self.n)

    def prefill(self, x: torch.Tensor, out: torch.Tensor | None, mode: str) -> torch.Tensor:
        """x bf16 [M, K] on CUDA past the decode rows, through prefill mode `mode` (hinfer.quant.int4): dequant
        into a bf16 scratch and cuBLAS (a few percent of a chunk's GEMM); fp8 into an e4m3 scratch, cuBLAS fp8
        rowwise; w4a8 on cuBLAS fp8 with 1x128 scales where probed to work; otherwise (w4a16, w4a8) the row
        layout's GEMM on a transient row-packed copy (`to_int4`: one pass of the packed bytes)."""
        if mode == "fp8":
            from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

            rs = self.fp8_row_scale()
            y = scaled_mm_rowwise(x, int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k,
                                                         row_scale=rs), rs)  # fmt: skip
        elif mode == "dequant":
            y = F.linear(x, self.dequantize(x.dtype))
        elif mode == "w4a8" and self._group_scaled_mm_ok(x):
            y = self._w4a8_cublas(x)
        else:
            return self.to_int4().matmul(x, out=out)
        return y if out is None else out.copy_(y)

    def _group_scaled_mm_ok(self, x: torch.Tensor) -> bool:
        from hinfer.quant.fp8 import scaled_mm_group_scales_ok

        return x.is_cuda and self.n % 16 == 0 and scaled_mm_group_scales_ok(x.device.index or 0)

    def _w4a8_cublas(self, x: torch.Tensor) -> torch.Tensor:
        """W4A8 (matmul_ref_w4a8's semantics) on cuBLAS fp8: the weight as u - z in e4m3 (exact), x per token and
        128-group, both operands' 1x128 scales applied to each group's partial product."""
        from hinfer.ops.triton import linear_gemm as tg
        from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

        w8 = int4_mma_dequantize(self.words, self.scales, self.zeros, self.n, self.k, unscaled=True)
        q, s = tg.quantize_act_fp8(x, GROUP)
        return torch._scaled_mm(q, w8.t(), scale_a=s.t().contiguous().t(), scale_b=self.scales.float().t(),
                                out_dtype=x.dtype)  # fmt: skip

    def matmul_ref_w4a8(self, x: torch.Tensor) -> torch.Tensor:
        """Reference of the w4a8 prefill path (Int4Weight.matmul_ref_w4a8)."""
        return self.to_int4().matmul_ref_w4a8(x)

    def _a8_takes(self, x: torch.Tensor) -> bool:
        """Whether these rows go through the int4 x int8 kernel (int4_decode_a8 says where)."""
        from hinfer.ops.triton.tiles.linear import a8_swept_faster

        mode = int4_decode_a8()
        if mode == "bf16" or (mode == "tuned" and not a8_swept_faster(x.shape[0], self.n, self.k)):
            return False
        from hinfer.ops.triton.linear_int4_a8 import a8_takes

        return a8_takes(x.shape[0], self.n, self.k, zero=self.zeros is not None)

    def _wgmma_takes(self, m: int) -> bool:
        """Whether the warpgroup-MMA kernel takes these m rows (int4_wgmma_rows says where)."""
        if self.scales.dtype != torch.bfloat16:
            return False
        rows = int4_wgmma_rows()
        if rows is None:
            from hinfer.ops.triton.tiles.linear import wgmma_swept_faster

            return wgmma_swept_faster(m, self.n, self.k)
        return 0 < rows <= m

    def silu_mul_matmul(self, gate_up: torch.Tensor) -> torch.Tensor | None:
        """self.matmul(silu_mul(gate_up)) for gate_up [..., 2 K] (the MLP's down projection) where the int4 x int8
        kernel takes these rows: the SiLU-mul is done where x is quantized (in each program's prologue, or in the
        launch that quantizes x ahead: the tile's x_ahead), one launch fewer, the same numbers. None elsewhere:
        the caller applies the activation and calls matmul (ops.linear.silu_mul_linear)."""
        g2 = gate_up.reshape(-1, gate_up.shape[-1])
        if gate_up.shape[-1] != 2 * self.k or not _decode_rows_on_cuda(g2) or not self._a8_takes(g2[:, : self.k]):
            return None
        from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

        return int4_a8_matmul(g2, self, silu_mul=True).view(*gate_up.shape[:-1], self.n)

    def norm_matmul(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                    ) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
        """(self.matmul(rms_norm(x + residual)), x + residual) for rows [M, K] (the MLP's gate_up after its add +
        RMSNorm) where the int4 x int8 kernel takes these rows with x quantized ahead in its own launch (the tile's
        x_ahead: 2-8 rows on the 27B): the add and the norm are done in that launch, which replaces the norm's;
        the normed rows are not kept. The numbers are add_rms_norm's but for its row sum's order (rstd may differ
        in its last bit). None elsewhere: the caller runs add_rms_norm and matmul
        (ops.norm.add_rms_norm_into_linear)."""
        if (x.dim() != 2 or x.shape[-1] != self.k or residual.shape != x.shape or residual.dtype != x.dtype
                or weight.dtype != x.dtype or not _decode_rows_on_cuda(x) or not self._a8_takes(x)):  # fmt: skip
            return None
        from hinfer.ops.triton.act_int8 import NormIn
        from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul
        from hinfer.ops.triton.tiles.linear import a8_config

        if not a8_config(x.shape[0], self.n, self.k).x_ahead:  # in each program's prologue it measured slower
            return None
        r_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        y = int4_a8_matmul(x, self, norm=NormIn(residual.contiguous(), weight, eps, r_out))
        return y, r_out

    def matmul_tail(self, x: torch.Tensor, tail: torch.Tensor, out: torch.Tensor) -> bool:
        """out [M, N + T] = [x @ self^T, x @ tail^T] in one launch (the tail rows on CUDA cores beside the int4
        tiles) when the tensor-core kernel takes x and the tail is bf16; False (nothing written) otherwise."""
        if tail.dtype != torch.bfloat16 or tail.stride(-1) != 1 or not _decode_rows_on_cuda(x):
            return False
        if self._a8_takes(x):
            from hinfer.ops.triton.linear_int4_a8 import int4_a8_matmul

            int4_a8_matmul(x, self, out=out, tail=tail)
            return True
        from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

        int4_mma_matmul(x, self, out=out, tail=tail)
        return True


def _decode_rows_on_cuda(x: torch.Tensor) -> bool:
    """Whether the tensor-core kernel takes these rows: bf16 on CUDA with Triton, 1 .. MAX_M of them."""
    if not (use_triton(x) and x.is_cuda and x.dtype == torch.bfloat16):
        return False
    from hinfer.ops.triton.linear_int4_mma import MAX_M

    return 0 < x.shape[0] <= MAX_M


def fragment_order_fits(w: nn.Module) -> bool:
    """An Int4Weight the fragment-order kernels take: group 128, bf16 scales, N % 64 and K % 128 == 0."""
    if not isinstance(w, Int4Weight):
        return False
    n, k = w.shape
    return (w.group == GROUP and w.scales.dtype == torch.bfloat16 and n % 64 == 0
            and k % K_ALIGN == 0)  # fmt: skip


def fragment_order_wanted() -> bool:
    """HINFER_INT4_LAYOUT=rows keeps the row-packed kernels (GEMV, skinny); the default `mma` decodes on tensor
    cores from fragment order and prefills as HINFER_INT4_PREFILL says (Int4MmaWeight.matmul)."""
    layout = os.environ.get("HINFER_INT4_LAYOUT", "mma")
    if layout not in ("mma", "rows"):
        raise ValueError(f"HINFER_INT4_LAYOUT={layout!r}; expected mma or rows")
    prefill_mode()  # a bad mode fails here, at load, not at the first prefill
    return layout == "mma"


def swap_to_fragment_order(model: nn.Module) -> int:
    """Swap every fitting Int4Weight below `model` for its fragment-ordered twin, in place and one at a time (the
    peak extra memory is one weight's temporaries), on any device. -> how many were swapped."""
    swapped = 0
    with torch.no_grad():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if fragment_order_fits(child):
                    setattr(parent, name, Int4MmaWeight.from_int4(child))
                    swapped += 1
    return swapped


def use_fragment_order(model: nn.Module) -> nn.Module:
    """The CUDA decode form of a model's int4 weights: swapped when the model sits on a GPU that runs the Triton
    kernels and HINFER_INT4_LAYOUT / HINFER_INT4_PREFILL leave the default. `model` may itself be an Int4Weight
    (then its twin is returned). Idempotent."""
    first = next(model.buffers(), None)
    if first is None or not (first.is_cuda and use_triton(first)) or not fragment_order_wanted():
        return model
    if fragment_order_fits(model):
        return Int4MmaWeight.from_int4(model)
    t0 = time.monotonic()
    n = swap_to_fragment_order(model)
    if n:
        log.info("int4: %d weights re-laid out in mma fragment order for the CUDA kernels in %.1f s", n,
                 time.monotonic() - t0)  # fmt: skip
    return model


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
