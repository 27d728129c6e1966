"""The MoE router in the norm's launch (ops.norm.add_rms_norm_linear, the `norm_linear` launch fusion): a tiny bf16
MoE model through the Triton twins (interpreted here) gives the same decode logits with the fusions on as off, bit
for bit, and the fused launches are the ones that ran."""

from __future__ import annotations

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import ModelConfig
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.model.state import ModelState, StateShape
from hinfer.ops import dispatch
from hinfer.ops.triton import norm_linear as triton_norm_linear
from tests.model.test_shared_expert_fold import BASE

FUSED = "slot_sum,tail,gate,norm_linear"


def _decode_logits(model, cfg, calls: list[str]) -> torch.Tensor:
    """Two decode steps after a 5-token prompt; `calls` keeps the fused launches of the decode steps only."""
    st = ModelState(cfg, StateShape(6, 16, 3, torch.bfloat16, torch.bfloat16), "cpu")
    ids = list(range(5, 25))
    with torch.no_grad():
        model(build_forward_batch([SeqChunk(ids[:5], 0, [1, 2], 1)], 16, "cpu"), st)
        calls.clear()
        rows = []
        for j in range(2):
            b = build_forward_batch([SeqChunk([ids[5 + j]], 5 + j, [1, 2], 1)], 16, "cpu")
            rows.append(model.compute_logits(model(b, st)[b.logits_indices]))
    return torch.cat(rows)


def test_router_in_the_norm_launch_gives_the_unfused_logits(monkeypatch, interpreter):
    cfg = ModelConfig.from_dict(BASE)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cpu", with_mtp=False), seed=0).eval()
    monkeypatch.setattr(dispatch, "_backend", "triton")
    calls: list[str] = []
    router = triton_norm_linear.add_rms_norm_linear
    monkeypatch.setattr(triton_norm_linear, "add_rms_norm_linear", lambda *a: calls.append("router") or router(*a))
    out = {}
    for fuse in ("0", FUSED):
        monkeypatch.setenv("HINFER_FUSE_LAUNCHES", fuse)
        out[fuse] = _decode_logits(model, cfg, calls)
    assert torch.isfinite(out["0"]).all() and torch.equal(out["0"], out[FUSED])
    assert calls.count("router") == 2 * cfg.num_hidden_layers  # each MoE layer's router, per decode step
