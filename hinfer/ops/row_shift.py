"""Move decode rows on by counts that live on the device: one token per lane, staged for position p, moved to
p + shift[i] (the drafter's steps after a round whose accepted counts the host has not read yet). The position and
the cached length follow, and the KV slot is looked up again in the lane's page-table row."""

from __future__ import annotations

import torch

from hinfer.ops.dispatch import use_triton


def shift_rows_ref(positions: torch.Tensor, cached_lens: torch.Tensor, slot_mapping: torch.Tensor,
                   page_table: torch.Tensor, shift: torch.Tensor, page_size: int) -> None:  # fmt: skip
    """In place, for the m = len(shift) lanes: positions [m] int64, cached_lens [m] int32, slot_mapping [m] int64,
    page_table [m, width] int32 (the rows must cover the moved positions)."""
    m = len(shift)
    positions[:m].add_(shift)
    lens = cached_lens[:m]
    lens.add_(shift.to(lens.dtype))
    p = lens.long()
    page = page_table[:m].gather(1, (p // page_size)[:, None])[:, 0]
    slot_mapping[:m].copy_(page.long() * page_size + p % page_size)


def shift_rows(positions: torch.Tensor, cached_lens: torch.Tensor, slot_mapping: torch.Tensor,
               page_table: torch.Tensor, shift: torch.Tensor, page_size: int) -> None:  # fmt: skip
    """shift_rows_ref in one launch on CUDA (nine small ones in torch)."""
    if use_triton(shift):
        from hinfer.ops.triton.row_shift import shift_rows as shift_rows_triton

        return shift_rows_triton(positions, cached_lens, slot_mapping, page_table, shift, page_size)
    return shift_rows_ref(positions, cached_lens, slot_mapping, page_table, shift, page_size)
