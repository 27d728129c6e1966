"""The Qwen3.5 hybrid network: Gated DeltaNet and gated full attention layers, dense or MoE MLPs, MTP head.

Reads like the model's math; every op comes from hinfer.ops (reference torch body or Triton twin). Parameters
are fused per projection group (one GEMM each) and loaded from Hugging Face names by model/loader.py. No module
holds per-sequence state: KV pages and GDN slots live in ModelState and are passed in with the ForwardBatch.

Split over tensor-parallel ranks (docs/tensor-parallel.md), each rank builds this same network from its rank
config (hinfer/sharding.py: its share of the heads and intermediate rows): every block's output projection then
holds a partial sum, which the block all-reduces, and the embedding and lm_head hold a block of the vocabulary.
"""

from __future__ import annotations

import torch
from torch import nn

from hinfer.batch import ForwardBatch
from hinfer.config import ModelConfig
from hinfer.errors import ConfigError
from hinfer.model.state import ModelState
from hinfer.model.vision import VisionEncoder
from hinfer.model.vision_grid import Grid
from hinfer.ops.attention import paged_attention, qk_norm_rope_write
from hinfer.ops.dispatch import set_backend
from hinfer.ops.gdn import gated_delta_net
from hinfer.ops.linear import linear, silu_mul_linear
from hinfer.ops.moe import moe_experts, moe_route, moe_route_experts
from hinfer.ops.norm import add_rms_norm, add_rms_norm_into_linear, add_rms_norm_linear, rms_norm
from hinfer.ops.parallel import SINGLE, TensorParallel
from hinfer.ops.rope import model_rope, mrope_freq_axes
from hinfer.sharding import vocab_rows


def _param(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class Fused(nn.Module):
    """A projection whose rows are several checkpoint tensors stacked: `parts` maps a source name to its rows."""

    def __init__(self, parts: dict[str, int], in_features: int, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.parts: dict[str, tuple[int, int]] = {}
        start = 0
        for name, rows in parts.items():
            self.parts[name] = (start, rows)
            start += rows
        self.weight = _param(start, in_features, dtype=dtype, device=device)

    def split(self, y: torch.Tensor) -> list[torch.Tensor]:
        return list(y.split([rows for _, rows in self.parts.values()], dim=-1))


class Attention(nn.Module):
    """Gated full attention: q and its gate interleaved per head in q_proj; q/k RMSNorm; partial RoPE; GQA."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        h, d = cfg.hidden_size, cfg.head_dim
        self.qkv_proj = Fused(
            {"q_proj": self.n_heads * d * 2, "k_proj": self.n_kv * d, "v_proj": self.n_kv * d}, h, dtype, device
        )
        self.o_proj = _param(h, self.n_heads * d, dtype=dtype, device=device)
        self.q_norm = _param(d, dtype=dtype, device=device)
        self.k_norm = _param(d, dtype=dtype, device=device)
        inv_freq, self.attn_factor = model_rope(cfg, device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mrope_section = cfg.mrope_section

    def forward(self, x: torch.Tensor, batch: ForwardBatch, k_cache: torch.Tensor, v_cache: torch.Tensor):
        t, d = x.shape[0], self.head_dim
        q_gate, k, v = self.qkv_proj.split(linear(x, self.qkv_proj.weight))
        q, gate = q_gate.view(t, self.n_heads, 2 * d).chunk(2, dim=-1)
        k, v = k.view(t, self.n_kv, d), v.view(t, self.n_kv, d)
        positions, axes = batch.positions, None
        if batch.axis_positions is not None:  # image tokens: each frequency follows its (t, h, w) stream
            positions = batch.axis_positions
            axes = mrope_freq_axes(self.inv_freq.shape[0], self.mrope_section).to(x.device)
        q = qk_norm_rope_write(
            q, k, v, self.q_norm, self.k_norm, self.eps, positions, self.inv_freq,
            k_cache, v_cache, batch.slot_mapping, self.attn_factor, axes,
        )  # fmt: skip
        o = paged_attention(q, k_cache, v_cache, batch, d**-0.5, gate=gate)  # attention(q, k, v) * sigmoid(gate)
        return linear(o.reshape(t, -1), self.o_proj)


class GatedDeltaNet(nn.Module):
    """Linear attention: conv1d+SiLU over [q|k|v], gated delta rule on fp32 state, gated RMSNorm with silu(z)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.hk, self.hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.eps = cfg.rms_norm_eps
        kd, vd = cfg.gdn_key_dim, cfg.gdn_value_dim
        self.in_proj = Fused(
            {"in_proj_qkv": 2 * kd + vd, "in_proj_z": vd, "in_proj_b": self.hv, "in_proj_a": self.hv},
            cfg.hidden_size, dtype, device,
        )  # fmt: skip
        self.conv_weight = _param(cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim, dtype=dtype, device=device)
        self.A_log = _param(self.hv, dtype=dtype, device=device)
        self.dt_bias = _param(self.hv, dtype=dtype, device=device)
        self.norm = _param(self.dv, dtype=dtype, device=device)
        self.out_proj = _param(cfg.hidden_size, vd, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, conv_state: torch.Tensor, ssm_state: torch.Tensor):
        t = x.shape[0]
        qkv, z, b, a = self.in_proj.split(linear(x, self.in_proj.weight))
        # q, k, v = silu(causal_conv1d(qkv)); g, beta = gating(a, b); o = gated delta rule;
        # o = gated_rms_norm(o, z) (ops/gdn.py: one op, one kernel at decode)
        o = gated_delta_net(qkv, a, b, z.view(t, self.hv, self.dv), self.A_log, self.dt_bias, self.conv_weight,
                            self.norm, self.eps, conv_state, ssm_state, batch, (self.hk, self.dk, self.hv, self.dv))  # fmt: skip
        return linear(o.reshape(t, -1), self.out_proj)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        self.gate_up = Fused({"gate_proj": inter, "up_proj": inter}, hidden, dtype, device)
        self.down_proj = _param(hidden, inter, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(linear(x, self.gate_up.weight))

    def down(self, gate_up: torch.Tensor) -> torch.Tensor:
        return silu_mul_linear(gate_up, self.down_proj)


class SparseMoE(nn.Module):
    """Softmax top-k router (renormalised) over fused experts, plus sigmoid-gated shared expert. Folded
    (hinfer.model.shared_expert_fold, when the model is placed for serving), the shared expert is expert E of the
    fused experts and its gate row E of the router: one route and one experts call per layer."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        h, e, i = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
        self.top_k = cfg.num_experts_per_tok
        self.router = _param(e, h, dtype=dtype, device=device)
        # quantize_model may swap these two for hinfer.quant.experts.Int4ExpertsWeight or Fp8ExpertsWeight;
        # moe_experts takes any of them
        self.experts_gate_up = _param(e, 2 * i, h, dtype=dtype, device=device)
        self.experts_down = _param(e, h, i, dtype=dtype, device=device)
        self.shared_expert = MLP(h, cfg.shared_expert_intermediate_size, dtype, device)
        self.shared_expert_gate = _param(1, h, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor | None = None, slots: bool = False
                ) -> torch.Tensor:  # fmt: skip
        """`router_logits`: linear(x, router), when the caller has them already (out of the norm's launch).
        `slots`: the output may be the experts' weighted rows [T, k, H] unsummed, which the next add + norm sums."""
        if router_logits is None:
            router_logits = linear(x, self.router)
        if self.shared_expert is None:  # folded: slot k is the shared expert, weighted by sigmoid(its gate)
            return moe_route_experts(x, router_logits, self.experts_gate_up, self.experts_down, self.top_k,
                                     shared=True, slots=slots)  # fmt: skip
        shared = self.shared_expert(x) * torch.sigmoid(linear(x, self.shared_expert_gate))
        top_w, top_i = moe_route(router_logits, self.top_k)
        return moe_experts(x, self.experts_gate_up, self.experts_down, top_w, top_i) + shared


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int, kind: str, moe: bool, dtype, device,
                 tp: TensorParallel = SINGLE):  # fmt: skip
        super().__init__()
        self.layer_idx, self.kind, self.tp = layer_idx, kind, tp
        self.eps = cfg.rms_norm_eps
        self.input_layernorm = _param(cfg.hidden_size, dtype=dtype, device=device)
        self.post_attention_layernorm = _param(cfg.hidden_size, dtype=dtype, device=device)
        if kind == "full_attention":
            self.self_attn = Attention(cfg, dtype, device)
        else:
            self.linear_attn = GatedDeltaNet(cfg, dtype, device)
        self.mlp = SparseMoE(cfg, dtype, device) if moe else MLP(cfg.hidden_size, cfg.intermediate_size, dtype, device)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch, state: ModelState, kv_row: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x is the previous block's output (the embedding for layer 0; a MoE's may be its experts' rows
        unsummed, [T, k, H], which the add + norm sums); returns (mlp output, residual)."""
        if residual is None:
            h, residual = rms_norm(x, self.input_layernorm, self.eps), x
        else:
            h, residual = add_rms_norm(x, residual, self.input_layernorm, self.eps)
        if self.kind == "full_attention":
            h = self.self_attn(h, batch, state.k_cache[kv_row], state.v_cache[kv_row])
        else:
            g = state.gdn_index[self.layer_idx]
            h = self.linear_attn(h, batch, state.conv_state[g], state.ssm_state[g])
        h = self.tp.all_reduce(h)  # split heads: each rank's output projection gave a partial sum
        if isinstance(self.mlp, SparseMoE):  # the router's logits come with the norm (one launch at decode)
            h, residual, logits = add_rms_norm_linear(h, residual, self.post_attention_layernorm, self.mlp.router,
                                                      self.eps)  # fmt: skip
            # one rank's experts may hand back their rows unsummed: the next layer's add + norm sums them
            return self.tp.all_reduce(self.mlp(h, logits, slots=self.tp.size == 1)), residual  # ranks: partial sums
        # the gate_up projection may take the add + norm into its launch (normed rows not kept)
        gate_up, residual = add_rms_norm_into_linear(h, residual, self.post_attention_layernorm,
                                                     self.mlp.gate_up.weight, self.eps)  # fmt: skip
        return self.tp.all_reduce(self.mlp.down(gate_up)), residual  # split intermediate rows: partial sums again


class MTPHead(nn.Module):
    """Multi-token prediction: fc(cat[norm_e(embed(next_token)), norm_h(hidden)]) -> one attention layer -> norm.

    `hidden` is the target model's final-normed hidden state at position p, paired with the token at p+1; the
    layer runs at position p (RoPE) with its own KV rows in ModelState. The shared lm_head gives the logits.
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str,
                 tp: TensorParallel = SINGLE):  # fmt: skip
        super().__init__()
        h = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        self.pre_fc_norm_embedding = _param(h, dtype=dtype, device=device)
        self.pre_fc_norm_hidden = _param(h, dtype=dtype, device=device)
        self.fc = _param(h, 2 * h, dtype=dtype, device=device)
        self.layers = nn.ModuleList(
            [DecoderLayer(cfg, -1, "full_attention", cfg.is_moe, dtype, device, tp)
             for _ in range(cfg.mtp_num_hidden_layers)]
        )
        self.norm = _param(h, dtype=dtype, device=device)

    def forward(
        self, embeds: torch.Tensor, hidden: torch.Tensor, batch: ForwardBatch, state: ModelState
    ) -> torch.Tensor:
        e = rms_norm(embeds, self.pre_fc_norm_embedding, self.eps)
        hn = rms_norm(hidden, self.pre_fc_norm_hidden, self.eps)
        x = linear(torch.cat([e, hn], dim=-1), self.fc)
        residual = None
        for i, layer in enumerate(self.layers):
            x, residual = layer(x, residual, batch, state, state.mtp_kv_index(i))
        return add_rms_norm(x, residual, self.norm, self.eps)[0]


class Qwen35ForCausalLM(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str = "cpu",
        with_mtp: bool = True,  # False: skip the MTP head (its weights are ignored when loading)
        with_vision: bool = False,  # True: build the vision tower too (when the config has one)
        tp: TensorParallel = SINGLE,  # this process's rank; `cfg` is then its rank config (sharding.rank_config)
    ):
        super().__init__()
        if cfg.tensor_parallel != tp.size:
            raise ValueError(f"a config split over {cfg.tensor_parallel} ranks, a model over {tp.size}")
        self.cfg, self.dtype, self.tp = cfg, dtype, tp
        self.backend = set_backend()  # every op's Triton-or-reference choice, made once here (ops/dispatch.py)
        h, rows = cfg.hidden_size, vocab_rows(cfg.vocab_size, tp.size)
        self.vocab_start = tp.rank * rows  # this rank's first token id (rows: its block of the vocabulary)
        self.embed_tokens = _param(rows, h, dtype=dtype, device=device)
        self.layers = nn.ModuleList(
            [DecoderLayer(cfg, i, kind, cfg.layer_is_moe(i), dtype, device, tp) for i, kind in enumerate(cfg.layer_types)]
        )
        self.norm = _param(h, dtype=dtype, device=device)
        self.lm_head = None if cfg.tie_word_embeddings else _param(rows, h, dtype=dtype, device=device)
        self.mtp = MTPHead(cfg, dtype, device, tp) if with_mtp and cfg.mtp_num_hidden_layers > 0 else None
        self.visual = None
        if with_vision and cfg.vision is not None:
            if cfg.vision.out_hidden_size != h:  # checked here: a text-only run may shrink the text model alone
                raise ConfigError(f"vision_config.out_hidden_size {cfg.vision.out_hidden_size} != hidden_size {h}")
            self.visual = VisionEncoder(cfg.vision, dtype, device)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return self.embed_tokens[input_ids]
        # vocab-split: each rank embeds the ids of its block, zeros elsewhere; the sum has one term per token
        local = input_ids - self.vocab_start
        mine = (local >= 0) & (local < self.embed_tokens.shape[0])
        x = self.embed_tokens[local.clamp(0, self.embed_tokens.shape[0] - 1)]
        return self.tp.all_reduce(torch.where(mine[:, None], x, torch.zeros_like(x)))

    def encode_images(self, pixels: torch.Tensor, grids: list[Grid]) -> torch.Tensor:
        """Preprocessed images (rows concatenated) -> their placeholder tokens' embeddings [tokens, H]."""
        assert self.visual is not None, "this model was built without its vision tower"
        return self.visual(pixels, grids)

    def forward(self, batch: ForwardBatch, state: ModelState) -> torch.Tensor:
        """-> final-normed hidden states [T, H] of every token of the batch."""
        x, residual = self.embed(batch.input_ids), None
        if batch.image_rows is not None:  # image placeholders take the vision tower's embeddings
            x = x.index_copy(0, batch.image_rows, batch.image_embeds.to(x.dtype))
        for layer in self.layers:
            x, residual = layer(x, residual, batch, state, state.kv_index.get(layer.layer_idx, -1))
        return add_rms_norm(x, residual, self.norm, self.cfg.rms_norm_eps)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits [N, V] over the whole vocabulary (split over ranks: every rank gathers every block)."""
        w = self.embed_tokens if self.lm_head is None else self.lm_head
        logits = linear(hidden, w)
        if self.tp.size > 1:
            logits = self.tp.gather_last(logits)[:, : self.cfg.vocab_size]
        return logits.float()

    def mtp_forward(
        self, next_ids: torch.Tensor, hidden: torch.Tensor, batch: ForwardBatch, state: ModelState
    ) -> torch.Tensor:
        """MTP hidden [T, H] for (token p+1, target hidden p) pairs laid out like `batch` (positions p)."""
        assert self.mtp is not None, "this checkpoint has no MTP head"
        return self.mtp(self.embed(next_ids), hidden, batch, state)
