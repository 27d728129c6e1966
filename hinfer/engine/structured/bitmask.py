"""Token bitmasks (xgrammar's layout: int32 words, bit j of word w allows token 32*w + j) applied to logits.

Plain torch, so it runs wherever the logits are: unpack the bits of the constrained rows and fill the rest with
-inf. Rows without a constraint are not touched.
"""

from __future__ import annotations

import math

import torch

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[N, W] int32 -> [N, vocab_size] bool (True: allowed). Tokens past 32*W are disallowed."""
    dev = bitmask.device
    shifts = _SHIFTS.get(dev)
    if shifts is None:
        shifts = _SHIFTS[dev] = torch.arange(32, dtype=torch.int32, device=dev)
    bits = ((bitmask[:, :, None] >> shifts) & 1).bool().flatten(1)  # arithmetic shift: & 1 keeps bit 31 right
    if bits.shape[1] >= vocab_size:
        return bits[:, :vocab_size]
    return torch.nn.functional.pad(bits, (0, vocab_size - bits.shape[1]), value=False)


def apply_token_bitmask(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> None:
    """In place: logits[rows[i], t] = -inf wherever bit t of bitmask[i] is 0."""
    if not rows:
        return
    dev = logits.device
    allowed = unpack_bitmask(bitmask.to(dev, non_blocking=True), logits.shape[1])
    idx = torch.tensor(rows, dtype=torch.int64)
    if dev.type != "cpu":  # a pinned copy is queued; a pageable one would wait for the device
        idx = idx.pin_memory().to(dev, non_blocking=True)
    logits[idx] = logits[idx].masked_fill(~allowed, -math.inf)
