"""Ceilings measured in the same run, and the floors they give (METHOD: floors first, ratios after)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from hinfer.config import ModelConfig
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.ops.kv_cache import cache_format


def _median_ms(fn, iters: int = 20, warmup: int = 3, device: torch.device = torch.device("cuda")) -> float:
    for _ in range(warmup):
        fn()
    if device.type != "cuda":  # the CPU smoke run: wall clock
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[len(times) // 2]
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def copy_bandwidth(device: torch.device = torch.device("cuda"), gib: float | None = None) -> float:
    """Bytes/s of a device-to-device copy, counting bytes read plus bytes written (2 GiB on a GPU)."""
    gib = gib or (2.0 if device.type == "cuda" else 0.125)
    n = int(gib * 2**30) // 2
    src = torch.randn(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src), device=device)

    return 2 * n * 2 / (ms / 1e3)


def matmul_flops(device: torch.device = torch.device("cuda"), n: int | None = None) -> float:
    """FLOP/s of an n^3 GEMM on random data: bf16 cuBLAS at n = 8192 on a GPU, fp32 at n = 512 on the CPU."""
    n = n or (8192 if device.type == "cuda" else 512)
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, dtype=dt, device=device)
    b = torch.randn(n, n, dtype=dt, device=device)
    ms = _median_ms(lambda: a @ b, iters=10, device=device)
    return 2 * n**3 / (ms / 1e3)


def tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    return int(getattr(x, "nbytes", 0))


def weight_bytes_per_step(model: Qwen35ForCausalLM) -> int:
    """Weights a decode step reads: every parameter and weight buffer (quantized weights keep their packed
    values, scales and zeros as buffers) but the embedding table (C rows of it are noise), the MTP head and the
    RoPE frequencies; plus the tied table once when it doubles as lm_head."""
    total = 0
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name.startswith("mtp") or name == "embed_tokens" or name.endswith("inv_freq"):
            continue
        total += tensor_bytes(t)
    if model.lm_head is None:
        total += tensor_bytes(model.embed_tokens)
    return total


def expert_bytes(model: Qwen35ForCausalLM, mtp: bool = False) -> int:
    """Bytes of the MoE routed experts (plain or quantized) of the decoder layers, or of the MTP head; a shared
    expert folded in as expert E (model/shared_expert_fold.py) is read every step and not counted here."""
    total = 0.0
    for name, mod in model.named_modules():
        if name.startswith("mtp") != mtp or not hasattr(mod, "experts_gate_up"):
            continue
        b = sum(tensor_bytes(t) for w in (mod.experts_gate_up, mod.experts_down)
                for t in ([w] if isinstance(w, torch.Tensor) else w.buffers()))  # fmt: skip
        if mod.shared_expert is None:  # folded: E + 1 experts, the last one the shared expert
            e = mod.experts_gate_up.shape[0]
            b *= (e - 1) / e
        total += b
    return round(total)


def expert_fraction(cfg: ModelConfig, tokens: int) -> float:
    """Expected share of a layer's routed experts that `tokens` tokens select, each top-k of E (uniform routing,
    as random weights route): 1 - (1 - k/E)^tokens. Trained routers are skewed, select fewer, and move fewer
    bytes, so on real checkpoints this floor is conservative."""
    if not cfg.num_experts:
        return 1.0
    return 1.0 - (1.0 - cfg.num_experts_per_tok / cfg.num_experts) ** tokens


@dataclass
class StepBytes:
    weights: int
    kv: int
    gdn: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.gdn


def decode_step_bytes(
    cfg: ModelConfig, weights: int, lanes: int, depth: int, kv_itemsize: float, act_itemsize: int,
    experts: int = 0, tokens: int | None = None,
) -> StepBytes:
    """One decode step of `lanes` lanes at `depth`: weights (of which `experts` routed-expert bytes, read only
    for the experts the step's `tokens` (default: lanes) select), KV, GDN state read and written."""
    weights = weights - experts + round(experts * expert_fraction(cfg, tokens or lanes))
    # kv_itemsize: bytes per cached element, scales included (int8: 1 + 4 / head_dim; kv_element_bytes)
    per_token = 2 * cfg.num_key_value_heads * cfg.head_dim * kv_itemsize
    kv = round(lanes * len(cfg.attn_layers) * depth * per_token)
    ssm = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    conv = cfg.gdn_conv_dim * (cfg.linear_conv_kernel_dim - 1) * act_itemsize
    gdn = lanes * len(cfg.gdn_layers) * 2 * (ssm + conv)  # read and write
    return StepBytes(weights, kv, gdn)


def kv_element_bytes(k_cache: torch.Tensor, v_cache: torch.Tensor) -> float:
    """Bytes attention reads per cached element of K and V on average, in their formats (scales included)."""
    kf, vf = cache_format(k_cache), cache_format(v_cache)
    n_kv, head_dim = k_cache.shape[-2], k_cache.shape[-1] * kf.pack
    return (kf.token_bytes(n_kv, head_dim) + vf.token_bytes(n_kv, head_dim)) / (2 * n_kv * head_dim)


def prefill_flops(cfg: ModelConfig, active_params: int, tokens: int) -> float:
    """2 x active params x tokens (GEMMs) + causal attention (QK^T and PV over half the square)."""
    attn = len(cfg.attn_layers) * 2 * 2 * cfg.num_attention_heads * cfg.head_dim * tokens * tokens / 2
    return 2.0 * active_params * tokens + attn


def mtp_bytes_per_draft(model: Qwen35ForCausalLM, draft_head=None, lanes: int = 1) -> int:
    """Weights one MTP draft step of `lanes` lanes reads: the head (fc, its layer, norms; an MoE layer's routed
    experts only as far as the lanes select them) and the lm_head it uses (its own quantized copy when it has
    one)."""
    head = sum(tensor_bytes(t) for n, t in list(model.named_parameters()) + list(model.named_buffers())
               if n.startswith("mtp"))  # fmt: skip
    routed = expert_bytes(model, mtp=True)
    head += round(routed * expert_fraction(model.cfg, lanes)) - routed
    if isinstance(draft_head, torch.Tensor):  # rows of the model's own lm_head (--spec-draft-vocab)
        return head + tensor_bytes(draft_head)
    if draft_head is not None:
        return head + sum(tensor_bytes(b) for b in draft_head.buffers())
    return head + tensor_bytes(model.lm_head if model.lm_head is not None else model.embed_tokens)


def spec_round_bytes(
    cfg: ModelConfig, weights: int, mtp_draft: int, lanes: int, depth: int, k: int, kv_itemsize: float,
    act_itemsize: int, experts: int = 0,
) -> StepBytes:
    """A speculative round: the target's weights and KV once (verify reads them once for K + 1 rows; routed
    experts as far as those lanes x (K + 1) tokens select them), the GDN state read once and written after each of
    the K + 1 positions, and K draft steps of the MTP head (`mtp_draft` bytes each, its own KV at that depth too)."""
    base = decode_step_bytes(cfg, weights, lanes, depth, kv_itemsize, act_itemsize, experts, lanes * (k + 1))
    gdn = base.gdn // 2 * (1 + (k + 1))
    per_token = 2 * cfg.num_key_value_heads * cfg.head_dim * kv_itemsize
    mtp_kv = round(lanes * cfg.mtp_num_hidden_layers * depth * per_token)
    return StepBytes(base.weights + k * mtp_draft, base.kv + k * mtp_kv, gdn)
