"""ForwardBatch: every scheduled sequence of one step, flattened (varlen).

Sequences are ordered decode-first (q_len == 1), then extend/prefill chunks. Each layer reads what it needs:
attention the slot mapping, page table and lengths; Gated DeltaNet the state slots and q lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    gdn_saves: list[tuple[int, int, int]] = field(default_factory=list)  # (sequence, j, slot): SeqChunk.gdn_save
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
    return ForwardBatch(
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
        gdn_saves=[(b, *c.gdn_save) for b, c in enumerate(chunks) if c.gdn_save is not None],
        axis_positions=axis_pos,
        image_rows=image_rows,
        image_embeds=image_embeds,
    )


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
