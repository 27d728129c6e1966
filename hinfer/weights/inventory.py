"""The tensors of a Hugging Face Qwen3.5 checkpoint from its config alone, each with its role.

The inventory lists every text-model tensor (names of the multimodal wrapper form, `model.language_model.*`,
`lm_head.weight`, `mtp.*`; vision tensors are not loaded and not listed). Routed experts are one entry per
projection with `count = num_experts` (the checkpoint stores one tensor per expert). Torch-free: the memory plan
and `stored_recipe` read it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from hinfer.config import ModelConfig
from hinfer.sharding import vocab_rows

# Roles: what a tensor is. The first seven are the quantizer's targets (hinfer/quant/recipes.py).
ATTN_QKV, ATTN_O, GDN_IN, GDN_OUT, MLP, SHARED_EXPERT = "attn_qkv", "attn_o", "gdn_in", "gdn_out", "mlp", "shared_expert"
EXPERTS = "experts"  # routed expert projections (every quantized recipe converts them)
GDN_AB = "gdn_ab"  # linear_attn.in_proj_a / in_proj_b: part of gdn_in, kept with keep_gdn_ab
MTP_FC = "mtp_fc"  # mtp.fc: converted only with convert_mtp
EMBED = "embed"
LM_HEAD = "lm_head"
ROUTER = "router"  # mlp.gate, mlp.shared_expert_gate
CONV = "conv"
NORM = "norm"
GDN_PARAM = "gdn_param"  # A_log, dt_bias


@dataclass(frozen=True)
class TensorSpec:
    name: str  # HF name; routed experts contain "{e}" (one tensor per expert)
    shape: tuple[int, ...]
    role: str
    mtp: bool = False  # part of the MTP head (loaded only with --spec mtp)
    count: int = 1  # copies (num_experts for routed experts)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.count

    def names(self) -> Iterator[str]:
        if self.count == 1:
            yield self.name
        else:
            for e in range(self.count):
                yield self.name.format(e=e)


def _attention(p: str, cfg: ModelConfig, mtp: bool) -> list[TensorSpec]:
    h, hd = cfg.hidden_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    return [
        TensorSpec(f"{p}self_attn.q_proj.weight", (2 * q, h), ATTN_QKV, mtp),  # query + output gate
        TensorSpec(f"{p}self_attn.k_proj.weight", (kv, h), ATTN_QKV, mtp),
        TensorSpec(f"{p}self_attn.v_proj.weight", (kv, h), ATTN_QKV, mtp),
        TensorSpec(f"{p}self_attn.o_proj.weight", (h, q), ATTN_O, mtp),
        TensorSpec(f"{p}self_attn.q_norm.weight", (hd,), NORM, mtp),
        TensorSpec(f"{p}self_attn.k_norm.weight", (hd,), NORM, mtp),
    ]


def _gdn(p: str, cfg: ModelConfig) -> list[TensorSpec]:
    h, hv = cfg.hidden_size, cfg.linear_num_value_heads
    conv, vd = cfg.gdn_conv_dim, cfg.gdn_value_dim
    a = f"{p}linear_attn."
    return [
        TensorSpec(f"{a}in_proj_qkv.weight", (conv, h), GDN_IN),
        TensorSpec(f"{a}in_proj_z.weight", (vd, h), GDN_IN),
        TensorSpec(f"{a}in_proj_a.weight", (hv, h), GDN_AB),
        TensorSpec(f"{a}in_proj_b.weight", (hv, h), GDN_AB),
        TensorSpec(f"{a}conv1d.weight", (conv, 1, cfg.linear_conv_kernel_dim), CONV),
        TensorSpec(f"{a}A_log", (hv,), GDN_PARAM),
        TensorSpec(f"{a}dt_bias", (hv,), GDN_PARAM),
        TensorSpec(f"{a}norm.weight", (cfg.linear_value_head_dim,), NORM),
        TensorSpec(f"{a}out_proj.weight", (h, vd), GDN_OUT),
    ]


def _mlp(p: str, cfg: ModelConfig, moe: bool, mtp: bool) -> list[TensorSpec]:
    h = cfg.hidden_size
    m = f"{p}mlp."
    if not moe:
        i = cfg.intermediate_size
        return [
            TensorSpec(f"{m}gate_proj.weight", (i, h), MLP, mtp),
            TensorSpec(f"{m}up_proj.weight", (i, h), MLP, mtp),
            TensorSpec(f"{m}down_proj.weight", (h, i), MLP, mtp),
        ]
    i, e, s = cfg.moe_intermediate_size, cfg.num_experts, cfg.shared_expert_intermediate_size
    out = [
        TensorSpec(f"{m}gate.weight", (e, h), ROUTER, mtp),
        TensorSpec(m + "experts.{e}.gate_proj.weight", (i, h), EXPERTS, mtp, e),
        TensorSpec(m + "experts.{e}.up_proj.weight", (i, h), EXPERTS, mtp, e),
        TensorSpec(m + "experts.{e}.down_proj.weight", (h, i), EXPERTS, mtp, e),
    ]
    if s:
        out += [
            TensorSpec(f"{m}shared_expert.gate_proj.weight", (s, h), SHARED_EXPERT, mtp),
            TensorSpec(f"{m}shared_expert.up_proj.weight", (s, h), SHARED_EXPERT, mtp),
            TensorSpec(f"{m}shared_expert.down_proj.weight", (h, s), SHARED_EXPERT, mtp),
            TensorSpec(f"{m}shared_expert_gate.weight", (1, h), ROUTER, mtp),
        ]
    return out


def _norms(p: str, cfg: ModelConfig, mtp: bool) -> list[TensorSpec]:
    h = cfg.hidden_size
    return [TensorSpec(f"{p}input_layernorm.weight", (h,), NORM, mtp),
            TensorSpec(f"{p}post_attention_layernorm.weight", (h,), NORM, mtp)]


@lru_cache(maxsize=16)
def inventory(cfg: ModelConfig) -> tuple[TensorSpec, ...]:
    """Every text tensor of the HF checkpoint (MTP head included, marked `mtp`); for a rank config
    (sharding.rank_config) the parts one tensor-parallel rank holds, its block of the vocabulary included."""
    h, v = cfg.hidden_size, vocab_rows(cfg.vocab_size, cfg.tensor_parallel)
    lm = "model.language_model."
    out = [TensorSpec(f"{lm}embed_tokens.weight", (v, h), EMBED)]
    for i, kind in enumerate(cfg.layer_types):
        p = f"{lm}layers.{i}."
        mixer = _attention(p, cfg, False) if kind == "full_attention" else _gdn(p, cfg)
        out += mixer + _mlp(p, cfg, cfg.layer_is_moe(i), False) + _norms(p, cfg, False)
    out.append(TensorSpec(f"{lm}norm.weight", (h,), NORM))
    if not cfg.tie_word_embeddings:
        out.append(TensorSpec("lm_head.weight", (v, h), LM_HEAD))
    if cfg.mtp_num_hidden_layers:
        out += [
            TensorSpec("mtp.fc.weight", (h, 2 * h), MTP_FC, True),
            TensorSpec("mtp.pre_fc_norm_embedding.weight", (h,), NORM, True),
            TensorSpec("mtp.pre_fc_norm_hidden.weight", (h,), NORM, True),
            TensorSpec("mtp.norm.weight", (h,), NORM, True),
        ]
        for j in range(cfg.mtp_num_hidden_layers):
            p = f"mtp.layers.{j}."
            out += _attention(p, cfg, True) + _mlp(p, cfg, cfg.is_moe, True) + _norms(p, cfg, True)
    return tuple(out)
