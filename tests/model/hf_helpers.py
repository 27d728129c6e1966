"""Shared helpers for the model tests: tiny transformers Qwen3.5 models, randomised so every path matters,
written with `save_pretrained`, read back by our reader, and run through our model with real paged state.

Why re-randomise: transformers' init (std 0.02 weights, zero norms, dt_bias 1, A_log up to log 16) gives
near-zero logits and a GDN state that forgets almost everything each token, so a parity test would pass
on a model that mishandles carried state. The scales here (those of `hinfer.weights.synth`) give O(1)
logits and a decay exp(g) of roughly 0.15..0.8 per token.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import load_model_config
from hinfer.engine.free_list import FreeList
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import RESERVED_PAGES, RESERVED_SLOTS, ModelState, StateShape
from hinfer.weights.hf_reader import HFCheckpoint


@contextmanager
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread; on a busy CI box more threads spin (20x slower seen)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---- tiny configs ----------------------------------------------------------------------------------
_BASE: dict[str, Any] = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    # theta 1e4 (not 1e7) so the rotary dims actually turn over a few hundred positions
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
_DENSE: dict[str, Any] = dict(intermediate_size=96)
_MOE: dict[str, Any] = dict(
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48
)

# name -> (moe?, overrides). Odd sizes: hidden 96 with 3 query heads (head_dim 32), 1 KV head, GDN 2 key /
# 6 value heads of unequal key and value widths, and the released configs' interleaved-mrope fields (text
# positions make it plain RoPE); yarn: context extension; custom: a layer_types list that is not every-4th.
VARIANTS: dict[str, tuple[bool, dict[str, Any]]] = {
    "dense": (False, {}),
    "dense_tied": (False, {"tie_word_embeddings": True}),
    "moe": (True, {}),
    "moe_tied": (True, {"tie_word_embeddings": True}),
    "odd": (False, dict(hidden_size=96, num_attention_heads=3, num_key_value_heads=1, head_dim=32,
                        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=24,
                        linear_value_head_dim=16, intermediate_size=80,
                        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                                         "mrope_interleaved": True, "mrope_section": [2, 1, 1]})),
    # YaRN as the model cards give it (interleaved mrope fields, partial rotary), on a 64-position original
    # window so 300-token prompts run 4.7x past it; head_dim 64 gives 8 rotary frequencies, some in the blend
    "yarn": (False, dict(head_dim=64, max_position_embeddings=64,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                          "partial_rotary_factor": 0.25, "factor": 8.0,
                                          "original_max_position_embeddings": 64,
                                          "mrope_interleaved": True, "mrope_section": [4, 2, 2]})),
    "custom_layers": (False, dict(num_hidden_layers=5, layer_types=["full_attention", "linear_attention",
                                                                    "linear_attention", "full_attention",
                                                                    "linear_attention"])),
}  # fmt: skip


def hf_config(variant: str) -> Any:
    """The transformers text config of a named tiny variant."""
    from transformers import Qwen3_5MoeTextConfig, Qwen3_5TextConfig

    moe, over = VARIANTS[variant]
    kw = dict(_BASE) | (_MOE if moe else _DENSE) | over
    return (Qwen3_5MoeTextConfig if moe else Qwen3_5TextConfig)(**kw)


def build_hf_model(variant: str, seed: int = 0) -> torch.nn.Module:
    """A randomised transformers model (fp32, eval) of the variant."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM

    cfg = hf_config(variant)
    cls = Qwen3_5MoeForCausalLM if cfg.model_type == "qwen3_5_moe_text" else Qwen3_5ForCausalLM
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    randomize_(model, seed)
    return model


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Refill every parameter at the scales described in the module docstring (tied weights once)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters are listed once
            p.copy_(_value(name, p.shape, gen))


def _value(name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    def normal(mean: float, std: float) -> torch.Tensor:
        return torch.empty(shape).normal_(mean, std, generator=gen)

    if name.endswith("embed_tokens.weight"):
        return normal(0.0, 1.0)
    if name.endswith("linear_attn.norm.weight"):
        return normal(1.0, 0.1)  # plain-weight gated norm
    if name.endswith("norm.weight"):
        return normal(0.0, 0.1)  # zero-centred (1 + w) norms
    if name.endswith("A_log"):
        return torch.empty(shape).uniform_(0.5, 4.0, generator=gen).log()
    if name.endswith("dt_bias"):
        return normal(-1.0, 0.1)
    if name.endswith("conv1d.weight"):
        return normal(0.0, 1.0 / math.sqrt(shape[-1]))
    out_proj = any(k in name for k in ("o_proj", "out_proj", "down_proj"))
    return normal(0.0, (0.5 if out_proj else 1.0) / math.sqrt(shape[-1]))


def save_hf(model: torch.nn.Module, out: Path) -> Path:
    model.save_pretrained(out)  # safetensors; transformers 5 writes MoE experts per expert
    return out


def save_hf_fused_experts(model: torch.nn.Module, out: Path) -> Path:
    """The in-memory (transformers >= 5) layout: `mlp.experts.gate_up_proj` [E, 2I, H] and `down_proj`."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(str(out / "config.json"))
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def load_ours(path: Path, dtype: torch.dtype = torch.float32) -> Qwen35ForCausalLM:
    """Our model from a checkpoint directory, through the real reader and loader."""
    cfg = load_model_config(path)
    model = Qwen35ForCausalLM(cfg, dtype=dtype, device="cpu")
    load_weights(model, HFCheckpoint(path).iter_tensors(dtype=dtype, progress=False), source=str(path))
    return model


@torch.no_grad()
def hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Full-sequence logits [T, V] fp32 of a transformers model."""
    return model(torch.tensor([ids])).logits[0].float()


def prompt(n: int, vocab: int = 512, seed: int = 0) -> list[int]:
    """n random token ids (>= 1: id 0 is not special, but keep clear of it anyway)."""
    rng = random.Random(seed)
    return [rng.randrange(1, vocab) for _ in range(n)]


# ---- running our model with real paged state ---------------------------------------------------------
@dataclass
class _Seq:
    slot: int
    pages: list[int] = field(default_factory=list)
    cached: int = 0


class Session:
    """Our model plus a ModelState; sequences get a GDN slot and pages on demand (shuffled, so page
    tables are not the identity and a paging bug shows)."""

    def __init__(
        self,
        model: Qwen35ForCausalLM,
        *,
        max_tokens: int = 1024,
        page_size: int = 16,
        num_slots: int = 8,
        kv_dtype: torch.dtype | None = None,
        seed: int = 0,
    ) -> None:
        self.model, self.cfg, self.page_size = model, model.cfg, page_size
        mtp_layers = self.cfg.mtp_num_hidden_layers if model.mtp is not None else 0  # their own KV rows
        num_pages = RESERVED_PAGES + (max_tokens + page_size - 1) // page_size + num_slots
        shape = StateShape(num_pages, page_size, num_slots + RESERVED_SLOTS, kv_dtype or model.dtype, model.dtype,
                           mtp_layers=mtp_layers)  # fmt: skip
        self.state = ModelState(self.cfg, shape, "cpu")
        self.pages = FreeList(num_pages, first=RESERVED_PAGES)
        ids = self.pages.alloc(self.pages.capacity)  # hand them back in shuffled order: scattered pages
        random.Random(seed).shuffle(ids)
        self.pages.free(ids)
        self.slots = FreeList(num_slots + RESERVED_SLOTS, first=RESERVED_SLOTS)
        self.seqs: list[_Seq] = []

    def new_seq(self) -> int:
        slot = self.slots.alloc(1)[0]
        self.state.reset_slots([slot])
        self.seqs.append(_Seq(slot))
        return len(self.seqs) - 1

    def _chunk(self, sid: int, tokens: list[int]) -> SeqChunk:
        s = self.seqs[sid]
        need = (s.cached + len(tokens) + self.page_size - 1) // self.page_size
        if need > len(s.pages):
            s.pages += self.pages.alloc(need - len(s.pages))
        return SeqChunk(tokens, s.cached, list(s.pages), s.slot, all_logits=True)

    @torch.no_grad()
    def forward(
        self, work: list[tuple[int, list[int]]], mtp_hidden: list[torch.Tensor] | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One forward batch over (sequence, new tokens) pairs -> (hidden [n, H], logits [n, V] fp32) per
        pair. With mtp_hidden (target hidden rows, one [n, H] per pair), runs the MTP head instead: the
        tokens are then the next tokens, paired with those hidden rows."""
        chunks = [self._chunk(sid, toks) for sid, toks in work]
        batch = build_forward_batch(chunks, self.page_size, "cpu")
        if mtp_hidden is None:
            hidden = self.model(batch, self.state)
        else:
            hidden = self.model.mtp_forward(batch.input_ids, torch.cat(mtp_hidden), batch, self.state)
        logits = self.model.compute_logits(hidden[batch.logits_indices])
        for sid, toks in work:
            self.seqs[sid].cached += len(toks)
        sizes = [len(t) for _, t in work]
        return list(hidden.split(sizes)), list(logits.split(sizes))

    def step(self, work: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """One forward batch over (sequence, new tokens) pairs -> logits [n, V] fp32 per pair."""
        return self.forward(work)[1]

    def run(self, ids: list[int], chunk_sizes: list[int] | None = None) -> torch.Tensor:
        """A new sequence fed in chunks (default: all at once) -> logits [T, V] of every position."""
        sid = self.new_seq()
        sizes = chunk_sizes or [len(ids)]
        assert sum(sizes) == len(ids)
        out, start = [], 0
        for n in sizes:
            out += self.step([(sid, ids[start : start + n])])
            start += n
        return torch.cat(out)


def our_logits(
    model: Qwen35ForCausalLM, ids: list[int], chunk_sizes: list[int] | None = None
) -> torch.Tensor:
    return Session(model, max_tokens=len(ids) + 16).run(ids, chunk_sizes)
