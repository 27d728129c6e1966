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


def _two_lane_logits(model, cfg) -> torch.Tensor:
    """Two 5-token prompts prefilled together, then two decode steps of both lanes (two tokens a step)."""
    st = ModelState(cfg, StateShape(8, 16, 3, torch.bfloat16, torch.bfloat16), "cpu")
    a, b = list(range(5, 12)), list(range(40, 47))
    with torch.no_grad():
        model(build_forward_batch([SeqChunk(a[:5], 0, [1, 2], 1), SeqChunk(b[:5], 0, [3, 4], 2)], 16, "cpu"), st)
        rows = []
        for j in range(2):
            fb = build_forward_batch([SeqChunk([a[5 + j]], 5 + j, [1, 2], 1), SeqChunk([b[5 + j]], 5 + j, [3, 4], 2)],
                                     16, "cpu")  # fmt: skip
            rows.append(model.compute_logits(model(fb, st)[fb.logits_indices]))
    return torch.cat(rows)


def test_expert_rows_summed_by_the_next_norm_give_the_summed_logits(monkeypatch, interpreter):
    """`norm_slots` (a MoE layer's expert rows left unsummed, the next add + norm summing them): a tiny folded bf16
    MoE model through the Triton twins (interpreted) gives the logits of the separate sum launch, within bf16
    rounding (the two sums add the same fp32 values in another order), and the norm took [T, k + 1, H] rows."""
    from hinfer.model.shared_expert_fold import fold_shared_experts
    from hinfer.ops.triton import norm as triton_norm

    cfg = ModelConfig.from_dict(BASE)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cpu", with_mtp=False), seed=0).eval()
    fold_shared_experts(model)
    monkeypatch.setattr(dispatch, "_backend", "triton")
    shapes: list[tuple[int, ...]] = []
    add_norm = triton_norm.add_rms_norm
    monkeypatch.setattr(triton_norm, "add_rms_norm", lambda x, *a: shapes.append(tuple(x.shape)) or add_norm(x, *a))
    out = {}
    for rows in ("0", "64"):
        monkeypatch.setenv("HINFER_FUSION_ROWS", f"norm_slots={rows}")
        shapes.clear()
        out[rows] = _two_lane_logits(model, cfg).float()
        slotted = [s for s in shapes if len(s) == 3]
        assert len(slotted) == (0 if rows == "0" else 3 * cfg.num_hidden_layers), shapes
        assert all(s[1] == cfg.num_experts_per_tok + 1 for s in slotted), slotted
    assert torch.isfinite(out["0"]).all()
    err = (out["64"] - out["0"]).abs().max().item()
    print(f"norm_slots: max logit difference {err:.3g} of {out['0'].abs().max().item():.3g}")
    assert err <= 0.05 * out["0"].abs().max().item(), err
