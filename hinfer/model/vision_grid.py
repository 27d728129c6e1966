"""Where each patch of an image sits: the tensors the vision tower derives from the images' grids alone.

A grid is (t, h, w) in patches. Patches arrive in merge-block order (the preprocessor's): the m x m patches
that merge into one language-model token are consecutive, blocks in raster order. Everything here follows it.
"""

from __future__ import annotations

import torch

Grid = tuple[int, int, int]  # (frames / temporal patch, patch rows, patch columns)


def patch_rows_cols(grids: list[Grid], merge: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(row, col) of every patch, [N, 2] int64, in merge-block order, repeated for each frame."""
    out = []
    for t, h, w in grids:
        rows = torch.arange(h, device=device)[:, None].expand(h, w)
        cols = torch.arange(w, device=device)[None, :].expand(h, w)
        block = (h // merge, merge, w // merge, merge)  # (block row, in row, block col, in col)
        rc = torch.stack([g.reshape(block).transpose(1, 2).reshape(-1) for g in (rows, cols)], dim=-1)
        out.append(rc.repeat(t, 1))
    return torch.cat(out)


def frame_cu_seqlens(grids: list[Grid]) -> list[int]:
    """Segment boundaries of attention: each frame of each image attends within itself."""
    cu = [0]
    for t, h, w in grids:
        for _ in range(t):
            cu.append(cu[-1] + h * w)
    return cu


def pos_embed_taps(grids: list[Grid], side: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bilinear (align-corners) resampling of the learned side x side position grid to each image's grid:
    per patch 4 row-major indices into the table and their weights, [N, 4] int64 and fp32."""
    rc = patch_rows_cols(grids, merge)
    sizes = torch.cat([torch.tensor([[h, w]]).expand(t * h * w, 2) for t, h, w in grids])
    # src = index * (side - 1) / (size - 1): the corners map onto the table's corners
    src = rc.float() * (side - 1) / (sizes - 1).clamp(min=1)
    lo = src.floor()
    frac = src - lo
    lo = lo.long()
    hi = (lo + 1).clamp(max=side - 1)
    r0, c0, r1, c1 = lo[:, 0], lo[:, 1], hi[:, 0], hi[:, 1]
    fr, fc = frac[:, 0], frac[:, 1]
    idx = torch.stack([r0 * side + c0, r0 * side + c1, r1 * side + c0, r1 * side + c1], dim=-1)
    wts = torch.stack([(1 - fr) * (1 - fc), (1 - fr) * fc, fr * (1 - fc), fr * fc], dim=-1)
    return idx, wts


def merged_tokens(grid: Grid, merge: int) -> int:
    """Language-model tokens of one image: its patches over the merge block."""
    t, h, w = grid
    return t * h * w // merge**2
