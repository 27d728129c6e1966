"""One program moving m decode rows on by device counts (hinfer.ops.row_shift.shift_rows_ref is the body)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _shift_rows_kernel(pos_ptr, lens_ptr, slot_ptr, table_ptr, shift_ptr, m, width, PAGE: tl.constexpr,
                       BLOCK: tl.constexpr):  # fmt: skip
    i = tl.arange(0, BLOCK)
    ok = i < m
    s = tl.load(shift_ptr + i, mask=ok, other=0).to(tl.int64)
    p = tl.load(lens_ptr + i, mask=ok, other=0).to(tl.int64) + s
    tl.store(lens_ptr + i, p.to(tl.int32), mask=ok)
    tl.store(pos_ptr + i, tl.load(pos_ptr + i, mask=ok, other=0) + s, mask=ok)
    page = tl.load(table_ptr + i.to(tl.int64) * width + p // PAGE, mask=ok, other=0).to(tl.int64)
    tl.store(slot_ptr + i, page * PAGE + p % PAGE, mask=ok)


def shift_rows(positions: torch.Tensor, cached_lens: torch.Tensor, slot_mapping: torch.Tensor,
               page_table: torch.Tensor, shift: torch.Tensor, page_size: int) -> None:  # fmt: skip
    m = len(shift)
    assert positions.dtype == slot_mapping.dtype == torch.int64 and cached_lens.dtype == page_table.dtype == torch.int32
    assert page_table.is_contiguous() and page_table.shape[0] >= m
    _shift_rows_kernel[(1,)](positions, cached_lens, slot_mapping, page_table, shift, m, page_table.shape[1],
                             PAGE=page_size, BLOCK=triton.next_power_of_2(max(m, 16)))  # fmt: skip
