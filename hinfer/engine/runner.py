"""ModelRunner: turn scheduled chunks into one ForwardBatch, run the model, sample the lanes that need a token.

Owns the model, the ModelState and the sampler. The only host sync of a step is reading the sampled ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hinfer.engine.forward_batch import SeqChunk, build_forward_batch
from hinfer.engine.scheduler import ScheduledChunk
from hinfer.engine.state import ModelState
from hinfer.model.qwen3_5 import Qwen35ForCausalLM


@dataclass
class StepResult:
    """Per sampled sequence: the token and, when asked, its logprob and the top-N alternatives."""

    token_ids: list[int]
    logprobs: list[float] | None
    top_ids: list[list[int]] | None
    top_logprobs: list[list[float]] | None


class ModelRunner:
    def __init__(self, model: Qwen35ForCausalLM, state: ModelState, sampler) -> None:
        self.model = model
        self.state = state
        self.sampler = sampler
        self.device = state.k_cache.device

    @torch.inference_mode()
    def step(self, chunks: list[ScheduledChunk]) -> StepResult:
        """Run one step; returns sampled tokens for the chunks with `samples` set, in order."""
        seq_chunks = []
        for c in chunks:
            s = c.seq
            toks = s.pending_tokens()[: c.num_tokens]
            seq_chunks.append(SeqChunk(toks, s.num_cached, s.pages, s.slot, need_logits=c.samples))
        batch = build_forward_batch(seq_chunks, self.state.page_size, self.device)
        hidden = self.model(batch, self.state)
        for c in chunks:
            c.seq.num_cached += c.num_tokens
        sampled = [c.seq for c in chunks if c.samples]
        if not sampled:
            return StepResult([], None, None, None)
        logits = self.model.compute_logits(hidden[batch.logits_indices])
        out = self.sampler.sample(logits, [s.sampler_state for s in sampled])
        token_ids = out.token_ids.tolist()
        want_lp = any(s.params.logprobs is not None for s in sampled)
        if not want_lp or out.logprobs is None:
            return StepResult(token_ids, None, None, None)
        return StepResult(
            token_ids,
            out.logprobs.tolist(),
            out.top_ids.tolist() if out.top_ids is not None else None,
            out.top_logprobs.tolist() if out.top_logprobs is not None else None,
        )
