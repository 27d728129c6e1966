"""Each norm in its consumer's launch (ops.norm.add_rms_norm_project / add_rms_norm_linear, the `norm_project` and
`norm_linear` launch fusions): a tiny bf16 model, dense and MoE, through the Triton twins (interpreted here) gives
the decode logits of the unfused launches (to bf16 roundings of the normed rows: the fused projections scale by
the rows' rstd after the product; the bound is the Triton-vs-reference models' of tests/gpu), and the fused
launches are the ones that ran."""

from __future__ import annotations

import pytest
import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import ModelConfig
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.model.state import ModelState, StateShape
from hinfer.ops import dispatch
from hinfer.ops.triton import linear as triton_linear
from hinfer.ops.triton import norm_linear as triton_norm_linear
from tests.model.test_shared_expert_fold import BASE

FUSED = "slot_sum,tail,gate,norm_linear,norm_project"


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


@pytest.mark.parametrize("moe", [False, True])
def test_fused_norms_give_the_unfused_logits(moe, monkeypatch, interpreter):
    cfg = ModelConfig.from_dict(BASE | ({} if moe else {"model_type": "qwen3_5_text"}))
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cpu", with_mtp=False), seed=0).eval()
    monkeypatch.setattr(dispatch, "_backend", "triton")
    calls: list[str] = []
    project, router = triton_linear.norm_skinny, triton_norm_linear.add_rms_norm_linear
    monkeypatch.setattr(triton_linear, "norm_skinny", lambda *a: calls.append("project") or project(*a))
    monkeypatch.setattr(triton_norm_linear, "add_rms_norm_linear", lambda *a: calls.append("router") or router(*a))
    out = {}
    for fuse in ("0", FUSED):
        monkeypatch.setenv("HINFER_FUSE_LAUNCHES", fuse)
        out[fuse] = _decode_logits(model, cfg, calls)
    a, b = out["0"].float(), out[FUSED].float()
    rel = ((a - b).norm() / a.norm()).item()
    print(f"moe={moe}: fused vs unfused decode logits rel-L2 {rel:.2e}")
    assert torch.isfinite(a).all() and rel <= 3e-2
    # per decode step: the mixers' input projections but layer 0's (no residual yet), the dense MLPs' input
    # projections or the MoE routers
    n = cfg.num_hidden_layers
    assert calls.count("project") == 2 * (n - 1 + (0 if moe else n)) and calls.count("router") == 2 * n * moe
