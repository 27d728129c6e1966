"""Batches for the GDN kernel tests: sequences on distinct random (unordered) slots, verify rows with fresh step
slots, and the step-slot destinations that no sequence owns (safe to poison with NaN)."""

from __future__ import annotations

import random

from hinfer.batch import ForwardBatch, SeqChunk, build_forward_batch


def slot_batch(lens: list[int], verify: list[bool] | None, n_slots: int) -> ForwardBatch:
    """Sequences of the given lengths on distinct random slots; verify rows get one fresh step slot per token."""
    pool = random.sample(range(1, n_slots), n_slots - 1)
    chunks = []
    for i, n in enumerate(lens):
        st = [pool.pop() for _ in range(n)] if verify and verify[i] else None
        chunks.append(SeqChunk(list(range(n)), 0, [0], pool.pop(), gdn_step_slots=st))
    return build_forward_batch(chunks, 4096, "cpu")


def step_targets(batch: ForwardBatch) -> list[int]:
    """Slots written in step mode that are not any sequence's current slot."""
    if batch.gdn_step_slots is None:
        return []
    own = set(batch.gdn_slots.tolist())
    return sorted({s for row in batch.gdn_step_slots.tolist() for s in row} - own)
