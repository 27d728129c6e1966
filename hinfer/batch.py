"""ForwardBatch: every scheduled sequence of one step, flattened (varlen).

Sequences are ordered decode-first (q_len == 1), then extend/prefill chunks. Each layer reads what it needs:
attention the slot mapping, page table and lengths; Gated DeltaNet the state slots and q lengths.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import torch


@dataclass
class SeqChunk:
    """One sequence's part of a step, as the scheduler hands it to the runner."""

    token_ids: list[int]  # the new tokens of this step (1 for decode, a chunk for prefill)
    cached_len: int  # tokens of this sequence already in the KV cache / GDN state
    page_ids: list[int]  # its pages, in order; must cover cached_len + len(token_ids)
    gdn_slot: int  # GDN state slot read at the start and written at the end
    need_logits: bool = True  # logits of the last new token wanted (False for a non-final prefill chunk)
    # Speculative verify: the state after new token j is written to gdn_step_slots[j] (len == len(token_ids)).
    gdn_step_slots: list[int] | None = None
    # (j, slot): the GDN state after the first j new tokens (0 < j < len) is also saved into `slot` (a prefix
    # cache checkpoint inside a prompt chunk, so the chunk need not end there)
    gdn_save: tuple[int, int] | None = None
    all_logits: bool = False  # logits for every new token (verification)
    # Images: rotary positions of token j are cached_len + j + rope_delta (images shift the text after them),
    # or, when the chunk holds image tokens, axis_positions [3][n] (t, h, w); image_rows (chunk-relative) are
    # the placeholder tokens whose embeddings image_embeds [len(image_rows), H] replace.
    rope_delta: int = 0
    axis_positions: list[list[int]] | None = None
    image_rows: list[int] | None = None
    image_embeds: torch.Tensor | None = None


@dataclass
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64, absolute position of each token
    q_lens: torch.Tensor  # [B] int32, new tokens per sequence
    cu_q_lens: torch.Tensor  # [B+1] int32
    cached_lens: torch.Tensor  # [B] int32, tokens in cache before this step
    page_table: torch.Tensor  # [B, max_pages] int32 (unused entries 0)
    slot_mapping: torch.Tensor  # [T] int64, flat KV index page*page_size + offset of each new token
    gdn_slots: torch.Tensor  # [B] int64
    logits_indices: torch.Tensor  # [N] int64, rows of the hidden output whose logits are computed
    page_size: int
    # host-side mirrors: the reference ops loop over sequences with these (no device sync)
    q_lens_cpu: list[int]
    cached_lens_cpu: list[int]
    gdn_step_slots: torch.Tensor | None = None  # [B, max_q_len] int64, or None
    gdn_split: GdnSplit | None = None  # chunks with SeqChunk.gdn_save: the two passes the GDN layers run
    # images (None for text-only batches): [3, T] (t, h, w) rotary positions; rows of the batch whose
    # embeddings are replaced [K] int64, and what replaces them [K, H]
    axis_positions: torch.Tensor | None = None
    image_rows: torch.Tensor | None = None
    image_embeds: torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.q_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.q_lens_cpu)

    @property
    def max_q_len(self) -> int:
        return max(self.q_lens_cpu, default=0)

    @property
    def kv_lens_cpu(self) -> list[int]:
        return [c + q for c, q in zip(self.cached_lens_cpu, self.q_lens_cpu)]


@dataclass
class GdnSplit:
    """A batch with GDN state saves as the GDN layers run it: `first` every sequence up to its save (whole where
    it has none), then the saved states copied from `src` slots into `dst`, then `second` the saved sequences'
    rest. The passes are views for the GDN ops (lengths, cached lengths, slots, step slots); `*_rows` pick their
    rows of the batch (a slice where they are contiguous). Built on the host once per step."""

    first: ForwardBatch
    first_rows: slice | torch.Tensor
    second: ForwardBatch
    second_rows: slice | torch.Tensor
    src: torch.Tensor  # [S] int64
    dst: torch.Tensor  # [S] int64


def build_forward_batch(chunks: list[SeqChunk], page_size: int, device: torch.device | str) -> ForwardBatch:
    """Flatten chunks into one batch. All index arithmetic happens on the host, then one copy per tensor."""
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    logit_rows: list[int] = []
    q_lens = [len(c.token_ids) for c in chunks]
    max_pages = max((len(c.page_ids) for c in chunks), default=1) or 1
    table = [c.page_ids + [0] * (max_pages - len(c.page_ids)) for c in chunks]
    row = 0
    for c in chunks:
        n = len(c.token_ids)
        if n == 0:
            raise ValueError("a sequence chunk needs at least one token")
        if (c.cached_len + n + page_size - 1) // page_size > len(c.page_ids):
            raise ValueError(f"chunk needs {c.cached_len + n} tokens of KV but has {len(c.page_ids)} pages")
        ids.extend(c.token_ids)
        for j in range(n):
            p = c.cached_len + j
            pos.append(p + c.rope_delta)
            slots.append(c.page_ids[p // page_size] * page_size + p % page_size)
        if c.gdn_save is not None and not (0 < c.gdn_save[0] < n and c.gdn_step_slots is None):
            raise ValueError(f"gdn_save {c.gdn_save}: a state inside the chunk (0 < j < {n}), not with step slots")
        if c.all_logits:
            logit_rows.extend(range(row, row + n))
        elif c.need_logits:
            logit_rows.append(row + n - 1)
        row += n
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    step_slots = None
    if any(c.gdn_step_slots is not None for c in chunks):
        width = max(q_lens)
        rows = []
        for c in chunks:
            s = c.gdn_step_slots if c.gdn_step_slots is not None else [c.gdn_slot] * len(c.token_ids)
            if len(s) != len(c.token_ids):
                raise ValueError("gdn_step_slots must have one slot per new token")
            rows.append(s + [s[-1]] * (width - len(s)))
        step_slots = torch.tensor(rows, dtype=torch.int64, device=device)

    def t(x: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(x, dtype=dtype, device=device)

    axis_pos, image_rows, image_embeds = _image_inputs(chunks, pos, device)
    batch = ForwardBatch(
        input_ids=t(ids, torch.int64),
        positions=t(pos, torch.int64),
        q_lens=t(q_lens, torch.int32),
        cu_q_lens=t(cu, torch.int32),
        cached_lens=t([c.cached_len for c in chunks], torch.int32),
        page_table=torch.tensor(table, dtype=torch.int32, device=device),
        slot_mapping=t(slots, torch.int64),
        gdn_slots=t([c.gdn_slot for c in chunks], torch.int64),
        logits_indices=t(logit_rows, torch.int64),
        page_size=page_size,
        q_lens_cpu=q_lens,
        cached_lens_cpu=[c.cached_len for c in chunks],
        gdn_step_slots=step_slots,
        axis_positions=axis_pos,
        image_rows=image_rows,
        image_embeds=image_embeds,
    )
    if any(c.gdn_save is not None for c in chunks):
        batch.gdn_split = _gdn_split(batch, chunks, device)
    return batch


@dataclass
class _Span:
    """One sequence's rows in one pass of a GdnSplit."""

    row: int  # its first row in the batch
    n: int
    cached: int
    slot: int
    steps: list[int]  # its step slots (its own slot repeated unless it verifies)


def _gdn_split(batch: ForwardBatch, chunks: list[SeqChunk], device: torch.device | str) -> GdnSplit:
    """The two passes of a batch whose chunks save a GDN state inside them (GdnSplit)."""
    passes: tuple[list[_Span], list[_Span]] = ([], [])
    start = 0
    for c in chunks:
        n = len(c.token_ids)
        j = c.gdn_save[0] if c.gdn_save is not None else n
        steps = c.gdn_step_slots or [c.gdn_slot] * n
        for spans, lo, hi in ((passes[0], 0, j), (passes[1], j, n)):
            if hi > lo:
                spans.append(_Span(start + lo, hi - lo, c.cached_len + lo, c.gdn_slot, steps[lo:hi]))
        start += n

    def t(x: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(x, dtype=dtype, device=device)

    def view(spans: list[_Span]) -> tuple[ForwardBatch, slice | torch.Tensor]:
        lens = [s.n for s in spans]
        cached = [s.cached for s in spans]
        width = max(lens)
        steps = None
        if batch.gdn_step_slots is not None:
            steps = t([s.steps + [s.steps[-1]] * (width - s.n) for s in spans], torch.int64)
        part = replace(batch, q_lens=t(lens, torch.int32), cu_q_lens=t([0, *itertools.accumulate(lens)], torch.int32),
                       cached_lens=t(cached, torch.int32), gdn_slots=t([s.slot for s in spans], torch.int64),
                       q_lens_cpu=lens, cached_lens_cpu=cached, gdn_step_slots=steps, gdn_split=None)  # fmt: skip
        if all(a.row + a.n == b.row for a, b in zip(spans, spans[1:])):
            return part, slice(spans[0].row, spans[-1].row + spans[-1].n)
        return part, t([r for s in spans for r in range(s.row, s.row + s.n)], torch.int64)

    first, first_rows = view(passes[0])
    second, second_rows = view(passes[1])
    saved = [c for c in chunks if c.gdn_save is not None]
    return GdnSplit(first, first_rows, second, second_rows, t([c.gdn_slot for c in saved], torch.int64),
                    t([c.gdn_save[1] for c in saved], torch.int64))


def _image_inputs(
    chunks: list[SeqChunk], pos: list[int], device: torch.device | str
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """The batch's [3, T] positions (when a chunk has image tokens), placeholder rows and their embeddings."""
    axis: list[list[int]] | None = None
    if any(c.axis_positions is not None for c in chunks):
        axis = [[], [], []]
        row = 0
        for c in chunks:
            n = len(c.token_ids)
            own = c.axis_positions or [pos[row : row + n]] * 3  # text: the three streams are equal
            if any(len(a) != n for a in own):
                raise ValueError("axis_positions must give 3 positions per new token")
            for a, src in zip(axis, own):
                a.extend(src)
            row += n
    rows: list[int] = []
    embeds: list[torch.Tensor] = []
    row = 0
    for c in chunks:
        if c.image_rows:
            if c.image_embeds is None or c.image_embeds.shape[0] != len(c.image_rows):
                raise ValueError("image_embeds must hold one row per image_rows entry")
            rows.extend(row + r for r in c.image_rows)
            embeds.append(c.image_embeds)
        row += len(c.token_ids)
    return (
        None if axis is None else torch.tensor(axis, dtype=torch.int64, device=device),
        torch.tensor(rows, dtype=torch.int64, device=device) if rows else None,
        torch.cat(embeds).to(device) if embeds else None,
    )
