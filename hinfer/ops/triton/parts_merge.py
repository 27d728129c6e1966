"""One pass merging an attention part into the running sum of the parts before it (the cuDNN prefill's parts):
`merge_part`, the Triton twin of `merge_part_ref`, where torch takes four passes over the [H, n, D] rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_R = 16  # rows of a head per program


@triton.jit
def _merge_kernel(
    acc_ptr, lacc_ptr, o_ptr, lse_ptr, n, s_ah, s_ar, s_lah, s_oh, s_or, s_lh,
    D: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    h = tl.program_id(1).to(tl.int64)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = r < n
    d = tl.arange(0, D)
    la = tl.load(lacc_ptr + h * s_lah + r, mask=ok, other=0.0)
    lb = tl.load(lse_ptr + h * s_lh + r, mask=ok, other=0.0)
    m = tl.maximum(la, lb)
    a, b = tl.exp(la - m), tl.exp(lb - m)
    s = a + b
    acc = tl.load(acc_ptr + h * s_ah + r[:, None] * s_ar + d[None, :], mask=ok[:, None], other=0.0)
    o = tl.load(o_ptr + h * s_oh + r[:, None] * s_or + d[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    acc = acc * (a / s)[:, None] + o * (b / s)[:, None]
    tl.store(acc_ptr + h * s_ah + r[:, None] * s_ar + d[None, :], acc, mask=ok[:, None])
    tl.store(lacc_ptr + h * s_lah + r, m + tl.log(s), mask=ok)


def merge_part(o_acc: torch.Tensor, lse_acc: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> None:
    """o_acc [H, n, D] fp32 and lse_acc [H, n] fp32 (unit last strides) merged in place with the part o [H, n, D]
    (any float dtype, rows strided) and its lse [H, n]."""
    n_heads, n, d = o_acc.shape
    assert o_acc.stride(-1) == 1 and o.stride(-1) == 1 and lse_acc.stride(-1) == 1 and lse.stride(-1) == 1
    grid = (triton.cdiv(n, BLOCK_R), n_heads)
    _merge_kernel[grid](
        o_acc, lse_acc, o, lse, n, o_acc.stride(0), o_acc.stride(1), lse_acc.stride(0), o.stride(0), o.stride(1),
        lse.stride(0), D=d, BLOCK_R=BLOCK_R, num_warps=4,
    )  # fmt: skip


def merge_part_ref(o_acc: torch.Tensor, lse_acc: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> None:
    """o_acc [H, n, D] fp32 and lse_acc [H, n] (the parts so far) merged in place with part (o, lse): the weights
    exp(lse - max) of each side over their sum, the log-sum-exp of both."""
    m = torch.maximum(lse_acc, lse)
    a, b = torch.exp(lse_acc - m), torch.exp(lse - m)
    s = a + b
    o_acc.mul_((a / s)[..., None]).add_(o * (b / s)[..., None])
    lse_acc.copy_(m + torch.log(s))
