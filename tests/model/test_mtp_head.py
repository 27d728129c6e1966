"""The MTP head against a direct transcription of its formula (transformers has no MTP module), and loading
of its `mtp.*` weights from a synthetic checkpoint.

Formula, per position p of one sequence (hidden = the target's final-normed hidden state at p, paired with
the token at p+1):
    x = fc(cat[rmsnorm_e(embed(token_{p+1})), rmsnorm_h(hidden_p)])
    x = decoder layer (gated full attention with its own KV, causal over positions 0..p at RoPE position p;
        then the layer's dense MLP or MoE)
    logits = lm_head(rmsnorm(x))          (lm_head shared with the target; tied -> embed_tokens)
with zero-centred RMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w). The reference below reads the checkpoint
tensors by their Hugging Face names, so it also checks that the loader put each one in the right place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import hf_helpers as H
import pytest
import torch
import torch.nn.functional as F

import hinfer
from hinfer.config import ModelConfig, load_model_config
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.synth import write_synthetic_checkpoint

CONFIGS = Path(hinfer.__file__).parent / "configs"
MTP_ATOL = 1e-4  # fp32, same weights, two transcriptions of one formula (we see ~1e-6)

# Tiny shapes over the real configs (which keep their names, MTP flags, tying and rope fields).
_SMALL = dict(
    vocab_size=512, hidden_size=64, head_dim=16, num_attention_heads=4, num_key_value_heads=2,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    rope_parameters={"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.25,
                     "mrope_interleaved": True, "mrope_section": [1, 1, 0]},
)  # fmt: skip
VARIANTS: dict[str, tuple[str, dict]] = {
    "dense": ("qwen3.5-0.8b", _SMALL | {"intermediate_size": 96}),  # tied embeddings, as released
    "moe": ("qwen3.6-35b-a3b", _SMALL | dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                             shared_expert_intermediate_size=48)),
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _threads() -> Iterator[None]:
    with H.one_thread():
        yield


@pytest.fixture(scope="module")
def synth_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """(variant, dtype, fused_experts) -> a synthetic checkpoint directory with an MTP head, built once."""
    cache: dict[tuple, Path] = {}

    def get(variant: str, dtype: torch.dtype = torch.float32, fused_experts: bool = False) -> Path:
        key = (variant, dtype, fused_experts)
        if key not in cache:
            src, over = VARIANTS[variant]
            out = tmp_path_factory.mktemp(f"synth-{variant}")
            cache[key] = write_synthetic_checkpoint(
                CONFIGS / src, out, layers=4, seed=1, dtype=dtype, fused_experts=fused_experts,
                overrides=over, progress=False,
            )  # fmt: skip
        return cache[key]

    return get


# ---- the formula, in plain torch ---------------------------------------------------------------------
def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())).to(x.dtype)


def _rope(x: torch.Tensor, pos: torch.Tensor, rot: int, theta: float) -> torch.Tensor:
    """NeoX rotate-half on the first `rot` dims of each head; x [T, heads, D]."""
    inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    ang = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]
    xr, xp = x[..., :rot], x[..., rot:]
    half = torch.cat([-xr[..., rot // 2 :], xr[..., : rot // 2]], -1)
    return torch.cat([xr * cos + half * sin, xp], -1)


def _attention(x: torch.Tensor, w: dict[str, torch.Tensor], p: str, cfg: ModelConfig) -> torch.Tensor:
    """Gated attention over one whole sequence (positions 0..T-1), causal, GQA."""
    t, nh, nkv, d = x.shape[0], cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    qg = (x @ w[f"{p}.q_proj.weight"].T).view(t, nh, 2 * d)
    q, gate = qg[..., :d], qg[..., d:]  # query and its output gate, interleaved per head
    k = (x @ w[f"{p}.k_proj.weight"].T).view(t, nkv, d)
    v = (x @ w[f"{p}.v_proj.weight"].T).view(t, nkv, d)
    eps, pos = cfg.rms_norm_eps, torch.arange(t)
    q = _rope(_rms(q, w[f"{p}.q_norm.weight"], eps), pos, cfg.rotary_dim, cfg.rope_theta)
    k = _rope(_rms(k, w[f"{p}.k_norm.weight"], eps), pos, cfg.rotary_dim, cfg.rope_theta)
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    o = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True
    )
    o = o.transpose(0, 1).reshape(t, nh * d) * torch.sigmoid(gate.reshape(t, nh * d))
    return o @ w[f"{p}.o_proj.weight"].T


def _swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T


def _expert(w: dict[str, torch.Tensor], p: str, e: int, cfg: ModelConfig) -> tuple[torch.Tensor, ...]:
    """(gate, up, down) of expert e, from either checkpoint layout."""
    if f"{p}.experts.gate_up_proj" in w:
        gu, i = w[f"{p}.experts.gate_up_proj"][e], cfg.moe_intermediate_size
        return gu[:i], gu[i:], w[f"{p}.experts.down_proj"][e]
    return tuple(w[f"{p}.experts.{e}.{n}_proj.weight"] for n in ("gate", "up", "down"))


def _mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str, cfg: ModelConfig) -> torch.Tensor:
    if not cfg.is_moe:
        return _swiglu(x, w[f"{p}.gate_proj.weight"], w[f"{p}.up_proj.weight"], w[f"{p}.down_proj.weight"])
    probs = torch.softmax((x @ w[f"{p}.gate.weight"].T).float(), -1)
    top_w, top_i = probs.topk(cfg.num_experts_per_tok, -1)
    top_w = top_w / top_w.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):  # token by token: nothing shared with the fused-GEMM path
        for j in range(cfg.num_experts_per_tok):
            out[t] += top_w[t, j] * _swiglu(x[t : t + 1], *_expert(w, p, int(top_i[t, j]), cfg))[0]
    shared = _swiglu(x, *(w[f"{p}.shared_expert.{n}_proj.weight"] for n in ("gate", "up", "down")))
    return out + torch.sigmoid(x @ w[f"{p}.shared_expert_gate.weight"].T) * shared


def mtp_reference(
    w: dict[str, torch.Tensor], cfg: ModelConfig, next_ids: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """Logits [T, V] of the MTP head over one sequence, straight from the formula."""
    eps = cfg.rms_norm_eps
    e = _rms(w["embed_tokens.weight"][next_ids], w["mtp.pre_fc_norm_embedding.weight"], eps)
    h = _rms(hidden, w["mtp.pre_fc_norm_hidden.weight"], eps)
    x = torch.cat([e, h], -1) @ w["mtp.fc.weight"].T
    for j in range(cfg.mtp_num_hidden_layers):
        p = f"mtp.layers.{j}"
        x = x + _attention(_rms(x, w[f"{p}.input_layernorm.weight"], eps), w, f"{p}.self_attn", cfg)
        x = x + _mlp(_rms(x, w[f"{p}.post_attention_layernorm.weight"], eps), w, f"{p}.mlp", cfg)
    head = w["embed_tokens.weight"] if cfg.tie_word_embeddings else w["lm_head.weight"]
    return (_rms(x, w["mtp.norm.weight"], eps) @ head.T).float()


# ---- tests -------------------------------------------------------------------------------------------
def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return dict(HFCheckpoint(path).iter_tensors(progress=False))


def _target_hidden(s: H.Session, ids: list[int]) -> torch.Tensor:
    sid = s.new_seq()
    return s.forward([(sid, ids)])[0][0]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_mtp_matches_formula(synth_ckpt: Callable[..., Path], variant: str) -> None:
    """The whole sequence in one MTP pass, then the same pairs fed as a prefill plus single steps."""
    path = synth_ckpt(variant)
    model, w = H.load_ours(path), _tensors(path)
    cfg = model.cfg
    assert model.mtp is not None and cfg.mtp_num_hidden_layers == 1
    ids = H.prompt(41, vocab=cfg.vocab_size, seed=5)
    hidden = _target_hidden(H.Session(model, max_tokens=64), ids[:-1])  # target hidden at p = 0..39
    next_ids = ids[1:]  # paired with the token at p + 1
    ref = mtp_reference(w, cfg, torch.tensor(next_ids), hidden)
    assert ref.abs().max() > 1.0  # the head is not a near-zero map (a wrong formula would show)

    s = H.Session(model, max_tokens=64)
    got_full = s.forward([(s.new_seq(), next_ids)], mtp_hidden=[hidden])[1][0]
    err = (got_full - ref).abs().max().item()
    print(f"[mtp] {variant} full max abs {err:.3g}")
    assert err <= MTP_ATOL

    s = H.Session(model, max_tokens=64)
    sid, n = s.new_seq(), 25
    steps = s.forward([(sid, next_ids[:n])], mtp_hidden=[hidden[:n]])[1]
    for p in range(n, len(next_ids)):  # its own KV carries the earlier positions
        steps += s.forward([(sid, next_ids[p : p + 1])], mtp_hidden=[hidden[p : p + 1]])[1]
    err = (torch.cat(steps) - ref).abs().max().item()
    print(f"[mtp] {variant} prefill+steps max abs {err:.3g}")
    assert err <= MTP_ATOL


def test_mtp_kv_separate_from_target(synth_ckpt: Callable[..., Path]) -> None:
    """The MTP layer writes its own KV row: running it leaves the target's KV untouched."""
    model = H.load_ours(synth_ckpt("dense"))
    s = H.Session(model, max_tokens=64)
    ids = H.prompt(20, vocab=model.cfg.vocab_size, seed=9)
    sid = s.new_seq()
    hidden = s.forward([(sid, ids)])[0][0]
    target_k = s.state.k_cache[: len(model.cfg.attn_layers)].clone()
    s.forward([(s.new_seq(), ids[1:] + [3])], mtp_hidden=[hidden])
    assert torch.equal(s.state.k_cache[: len(model.cfg.attn_layers)], target_k)
    assert s.state.k_cache[s.state.mtp_kv_index(0)].abs().sum() > 0


@pytest.mark.parametrize("variant,fused", [("dense", False), ("moe", False), ("moe", True)])
def test_mtp_weights_load_from_synth(synth_ckpt: Callable[..., Path], variant: str, fused: bool) -> None:
    """Every MTP parameter is written from the checkpoint's `mtp.*` tensors (bf16, as synth writes them)."""
    from hinfer.model.loader import load_weights
    from hinfer.model.qwen3_5 import Qwen35ForCausalLM

    path = synth_ckpt(variant, torch.bfloat16, fused)
    w = _tensors(path)
    assert any(n.startswith("mtp.layers.0.") for n in w)
    model = Qwen35ForCausalLM(load_model_config(path), dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(math.nan)  # anything the loader does not write stays NaN
    load_weights(model, HFCheckpoint(path).iter_tensors(progress=False), source=str(path))
    mtp = model.mtp
    assert mtp is not None
    for name, p in mtp.named_parameters():
        assert not p.isnan().any(), f"mtp.{name} not (fully) written"

    cfg, layer = model.cfg, mtp.layers[0]
    assert torch.equal(mtp.fc, w["mtp.fc.weight"])
    assert torch.equal(mtp.pre_fc_norm_embedding, w["mtp.pre_fc_norm_embedding.weight"])
    assert torch.equal(mtp.pre_fc_norm_hidden, w["mtp.pre_fc_norm_hidden.weight"])
    assert torch.equal(mtp.norm, w["mtp.norm.weight"])
    q_rows = 2 * cfg.num_attention_heads * cfg.head_dim
    kv_rows = cfg.num_key_value_heads * cfg.head_dim
    qkv = layer.self_attn.qkv_proj.weight
    assert torch.equal(qkv[:q_rows], w["mtp.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(qkv[q_rows + kv_rows :], w["mtp.layers.0.self_attn.v_proj.weight"])
    assert torch.equal(layer.self_attn.k_norm, w["mtp.layers.0.self_attn.k_norm.weight"])
    if cfg.is_moe:
        gate, up, down = _expert(w, "mtp.layers.0.mlp", 5, cfg)
        i = cfg.moe_intermediate_size
        assert torch.equal(layer.mlp.experts_gate_up[5, :i], gate)
        assert torch.equal(layer.mlp.experts_gate_up[5, i:], up)
        assert torch.equal(layer.mlp.experts_down[5], down)
        assert torch.equal(layer.mlp.router, w["mtp.layers.0.mlp.gate.weight"])
    else:
        assert torch.equal(
            layer.mlp.gate_up.weight[cfg.intermediate_size :], w["mtp.layers.0.mlp.up_proj.weight"]
        )
