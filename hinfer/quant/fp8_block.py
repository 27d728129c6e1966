"""Block-scaled FP8 (e4m3) weights in the layout of the official Qwen FP8 checkpoints.

A weight W [..., out, in] is stored as `weight` float8_e4m3fn plus `weight_scale_inv` float32
[..., ceil(out/b0), ceil(in/b1)]: W[r, c] ~= weight[r, c] * scale_inv[r // b0, c // b1]. Edge blocks are
partial (the scale grid is rounded up, not the weight padded). Leading dims (fused experts [E, ...]) are
treated as a batch.
"""

from __future__ import annotations

import math

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn value
DEFAULT_BLOCK = (128, 128)


def scale_shape(shape: tuple[int, ...] | torch.Size, block: tuple[int, int] = DEFAULT_BLOCK) -> tuple[int, ...]:
    """Shape of `weight_scale_inv` for a weight of `shape` ([..., out, in])."""
    *lead, rows, cols = shape
    return (*lead, math.ceil(rows / block[0]), math.ceil(cols / block[1]))


def _blocked(w: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """fp32 copy of a [rows, cols] matrix as [nb0, b0, nb1, b1] blocks (zero-padded at the edges)."""
    rows, cols = w.shape
    nb0, nb1 = math.ceil(rows / block[0]), math.ceil(cols / block[1])
    if rows % block[0] == 0 and cols % block[1] == 0:
        return w.float().reshape(nb0, block[0], nb1, block[1])
    padded = torch.zeros(nb0 * block[0], nb1 * block[1], dtype=torch.float32, device=w.device)
    padded[:rows, :cols] = w.float()
    return padded.view(nb0, block[0], nb1, block[1])


def _unblocked(b: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    nb0, b0, nb1, b1 = b.shape
    return b.reshape(nb0 * b0, nb1 * b1)[:rows, :cols]


def _check(w_shape: torch.Size, s_shape: torch.Size, block: tuple[int, int]) -> None:
    want = scale_shape(w_shape, block)
    if tuple(s_shape) != want:
        raise ValueError(f"scale_inv shape {tuple(s_shape)} does not match weight {tuple(w_shape)} "
                         f"with block {tuple(block)} (expected {want})")


def _dequantize_2d(w: torch.Tensor, s: torch.Tensor, block: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    rows, cols = w.shape
    return _unblocked(_blocked(w, block) * s.float()[:, None, :, None], rows, cols).to(dtype)


def dequantize_fp8_block(
    w_fp8: torch.Tensor,
    scale_inv: torch.Tensor,
    block: tuple[int, int] = DEFAULT_BLOCK,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """weight * its block's scale_inv, computed in float32, rounded once to `dtype`."""
    _check(w_fp8.shape, scale_inv.shape, block)
    if w_fp8.dim() == 2:
        return _dequantize_2d(w_fp8, scale_inv, block, dtype)
    # Batched (fused experts): one matrix at a time so the fp32 temporary stays one matrix.
    rows, cols = w_fp8.shape[-2:]
    out = torch.empty(w_fp8.shape, dtype=dtype, device=w_fp8.device)
    flat_w = w_fp8.reshape(-1, rows, cols)
    flat_s = scale_inv.reshape(-1, *scale_inv.shape[-2:])
    flat_o = out.view(-1, rows, cols)
    for i in range(flat_w.shape[0]):
        flat_o[i] = _dequantize_2d(flat_w[i], flat_s[i], block, dtype)
    return out


def _quantize_2d(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = w.shape
    b = _blocked(w, block)
    amax = b.abs().amax(dim=(1, 3))
    # scale = amax / 448 like the official conversion; an all-zero block gets 1 (any value dequantizes to 0).
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (b / scale[:, None, :, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return _unblocked(q, rows, cols).contiguous(), scale


def quantize_fp8_block(
    w: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_fp8, scale_inv float32): per block scale_inv = amax / 448, w_fp8 = w / scale_inv."""
    if w.dim() < 2:
        raise ValueError(f"quantize_fp8_block needs a [..., out, in] weight, got shape {tuple(w.shape)}")
    if w.dim() == 2:
        return _quantize_2d(w, block)
    rows, cols = w.shape[-2:]
    q = torch.empty(w.shape, dtype=FP8_DTYPE, device=w.device)
    s = torch.empty(scale_shape(w.shape, block), dtype=torch.float32, device=w.device)
    fq, fs, fw = q.view(-1, rows, cols), s.view(-1, *s.shape[-2:]), w.reshape(-1, rows, cols)
    for i in range(fw.shape[0]):
        fq[i], fs[i] = _quantize_2d(fw[i], block)
    return q, s


class Fp8BlockTensor:
    """One stored block-scaled fp8 weight as read from a checkpoint: `weight` e4m3 [..., out, in] and its fp32
    `weight_scale_inv`, kept as they are until the loader decides (an `Fp8Weight` as is, or dequantized)."""

    def __init__(self, weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int] = DEFAULT_BLOCK):
        _check(weight.shape, scale_inv.shape, block)
        self.weight, self.scale_inv, self.block = weight, scale_inv, tuple(block)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.weight.shape)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() + self.scale_inv.numel() * self.scale_inv.element_size()

    def to(self, device: torch.device | str) -> Fp8BlockTensor:
        return Fp8BlockTensor(self.weight.to(device), self.scale_inv.to(device), self.block)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return dequantize_fp8_block(self.weight, self.scale_inv, self.block, dtype)

    def __repr__(self) -> str:
        return f"Fp8BlockTensor({list(self.shape)}, block {list(self.block)})"
