"""Which part of each checkpoint tensor a tensor-parallel rank reads (the splits are hinfer/sharding.py's).

`tensor_slice(name, cfg, n, rank)` takes a prefix-stripped Hugging Face name (`layers.3.self_attn.q_proj.weight`,
`mtp.layers.0.mlp.experts.7.down_proj.weight`, `embed_tokens.weight`, ...) and the whole model's config, and
gives the rows (or columns) of the rank along one dim: several spans where a tensor stacks parts that split
separately (GDN's [q | k | v] projection and conv, fused experts' [gate | up]). None: the tensor is replicated.
`take(t, s)` cuts an in-memory tensor the same way; HFCheckpoint.iter_slices reads only those bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from hinfer.config import ModelConfig
from hinfer.errors import CheckpointError
from hinfer.sharding import Span, kv_heads, split, vocab_rows, vocab_span

_EXPERT = re.compile(r"experts\.\d+\.")


@dataclass(frozen=True)
class TensorSlice:
    dim: int
    spans: tuple[Span, ...]
    whole: int  # the tensor's size along dim for this config (a checkpoint that differs is refused)
    pad_to: int | None = None  # zero rows appended up to this size along dim (the last vocabulary block)

    def check(self, name: str, shape: tuple[int, ...] | list[int], source: str) -> None:
        if len(shape) <= self.dim or shape[self.dim] != self.whole:
            raise CheckpointError(f"{source}: tensor {name!r} has shape {list(shape)}, expected {self.whole} along "
                                  f"dim {self.dim} for this config")


def tensor_slice(name: str, cfg: ModelConfig, n: int, rank: int) -> TensorSlice | None:
    """Rank `rank`'s part of checkpoint tensor `name` when the model is split over n ranks; None: all of it."""
    if n == 1:
        return None
    if name in ("embed_tokens.weight", "lm_head.weight"):
        return TensorSlice(0, (vocab_span(cfg.vocab_size, n, rank),), cfg.vocab_size, vocab_rows(cfg.vocab_size, n))
    if ".mlp." in name:
        return _mlp_slice(_EXPERT.sub("experts.", name.split(".mlp.", 1)[1]), cfg, n, rank)
    module, param = name.rsplit(".", 2)[-2:]
    if ".self_attn." in name:
        return _attention_slice(module, cfg, n, rank)
    if ".linear_attn." in name:
        return _gdn_slice(module if param == "weight" else param, cfg, n, rank)
    return None


def _times(s: Span, k: int, offset: int = 0) -> Span:
    return Span(offset + s.start * k, offset + s.stop * k)


def _attention_slice(module: str, cfg: ModelConfig, n: int, rank: int) -> TensorSlice | None:
    d, nq, q = cfg.head_dim, cfg.num_attention_heads, split(cfg.num_attention_heads, n, rank)
    if module == "q_proj":  # per head: its query rows then its gate rows
        return TensorSlice(0, (_times(q, 2 * d),), nq * 2 * d)
    if module in ("k_proj", "v_proj"):
        return TensorSlice(0, (_times(kv_heads(cfg, n, rank), d),), cfg.num_key_value_heads * d)
    if module == "o_proj":
        return TensorSlice(1, (_times(q, d),), nq * d)
    return None  # q_norm, k_norm


def _gdn_slice(part: str, cfg: ModelConfig, n: int, rank: int) -> TensorSlice | None:
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    hk, hv = split(cfg.linear_num_key_heads, n, rank), split(cfg.linear_num_value_heads, n, rank)
    kd, vd = cfg.gdn_key_dim, cfg.gdn_value_dim
    if part in ("in_proj_qkv", "conv1d"):  # channels [q | k | v], each split by its heads
        return TensorSlice(0, (_times(hk, dk), _times(hk, dk, kd), _times(hv, dv, 2 * kd)), cfg.gdn_conv_dim)
    if part == "in_proj_z":
        return TensorSlice(0, (_times(hv, dv),), vd)
    if part in ("in_proj_a", "in_proj_b", "A_log", "dt_bias"):
        return TensorSlice(0, (hv,), cfg.linear_num_value_heads)
    if part == "out_proj":
        return TensorSlice(1, (_times(hv, dv),), vd)
    return None  # norm


def _mlp_slice(leaf: str, cfg: ModelConfig, n: int, rank: int) -> TensorSlice | None:
    """`leaf` follows `.mlp.`, expert numbers dropped: gate_proj.weight, experts.down_proj, shared_expert..."""
    if leaf.startswith("shared_expert."):
        size, leaf = cfg.shared_expert_intermediate_size, leaf[len("shared_expert.") :]
    elif leaf.startswith("experts."):
        size, leaf = cfg.moe_intermediate_size, leaf[len("experts.") :]
    else:
        size = cfg.intermediate_size  # dense MLP; the router (gate.weight) and shared_expert_gate stay whole
    rows = split(size, n, rank)
    if leaf in ("gate_proj.weight", "up_proj.weight"):
        return TensorSlice(0, (rows,), size)
    if leaf == "down_proj.weight":
        return TensorSlice(1, (rows,), size)
    if leaf == "gate_up_proj":  # fused experts [E, 2I, H]
        return TensorSlice(1, (rows, _times(rows, 1, size)), 2 * size)
    if leaf == "down_proj":  # fused experts [E, H, I]
        return TensorSlice(2, (rows,), size)
    return None


def coarse_slice(s: TensorSlice, dim: int, div: int) -> TensorSlice | None:
    """The same part of a stored tensor whose index i along `dim` holds logical indices [i * div, (i + 1) * div)
    (int4 words, quantization groups, fp8 blocks); None unless every span starts on such a boundary and ends on one
    or at the logical end (then the whole tensor is read and cut)."""
    spans = []
    for p in s.spans:
        if p.start % div or (p.stop % div and p.stop != s.whole):
            return None
        spans.append(Span(p.start // div, -(-p.stop // div)))
    return TensorSlice(dim, tuple(spans), -(-s.whole // div))


def take(t: torch.Tensor, s: TensorSlice | None, name: str = "", source: str = "checkpoint") -> torch.Tensor:
    """The slice of a whole tensor (a copy), zero-padded to s.pad_to."""
    if s is None:
        return t
    s.check(name, tuple(t.shape), source)
    out = torch.cat([t.narrow(s.dim, p.start, p.size) for p in s.spans], dim=s.dim)
    return pad(out, s)


def pad(t: torch.Tensor, s: TensorSlice) -> torch.Tensor:
    short = (s.pad_to or 0) - t.shape[s.dim]
    if short <= 0:
        return t
    shape = list(t.shape)
    shape[s.dim] = short
    return torch.cat([t, t.new_zeros(shape)], dim=s.dim)
