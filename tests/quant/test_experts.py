"""int4 MoE routed experts (hinfer.quant.experts): the weight object, `moe_experts` on it (reference body and the
grouped Triton kernels), a tiny MoE model quantized with int4-default, and the memory plan's bytes for it.

Random inputs every run (the seed is printed on failure). Triton runs in its CPU interpreter without a GPU
(tests/quant/conftest.py), at tiny shapes: E=8 experts, top 2, H=256 (two 128-groups), N_I=32.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
import torch
from test_apply import _logits, _model  # tests/quant/test_apply.py: the same tiny random models

from hinfer.ops import moe as moe_ops
from hinfer.quant import (
    Int4ExpertsWeight,
    Int4Weight,
    get_recipe,
    quantize_experts,
    quantize_int4,
    quantize_model,
)
from hinfer.quant.apply import quantized_nbytes
from hinfer.quant.experts import quantize_experts_int4

DEV = "cuda" if torch.cuda.is_available() else "cpu"
E, K_TOP, H, N_I = 8, 2, 256, 32


@pytest.fixture
def seed() -> int:
    s = random.SystemRandom().randrange(2**31)
    torch.manual_seed(s)
    return s


def _experts(e: int = E, h: int = H, i: int = N_I, dtype=torch.float32, device="cpu"):
    gu = torch.randn(e, 2 * i, h, device=device) / h**0.5
    dn = torch.randn(e, h, i, device=device) / i**0.5
    return gu.to(dtype), dn.to(dtype)


def _routing(t: int, device="cpu"):
    return moe_ops.moe_route_ref(torch.randn(t, E, device=device), K_TOP)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


# ------------------------------------------------------------------------------------------- the weight object
@pytest.mark.parametrize("zero_point", [True, False])
def test_round_trip_is_the_per_expert_quantizer_exactly(seed, zero_point):
    w = torch.randn(3, 40, 200).bfloat16()  # K = 200: a partial last group
    q = quantize_experts_int4(w, zero_point=zero_point)
    assert isinstance(q, Int4ExpertsWeight) and q.shape == (3, 40, 200) and q.dtype == torch.bfloat16
    assert q.qweight.shape == (3, 40, 25) and q.scales.shape == (3, 40, 2)
    assert (q.zeros is not None) == zero_point
    deq = q.dequantize(torch.float32)
    for e in range(3):
        ref = quantize_int4(w[e], zero_point=zero_point)  # the linear layers' quantizer, expert by expert
        assert torch.equal(q.qweight[e], ref.qweight) and torch.equal(q.scales[e], ref.scales), seed
        assert zero_point is False or torch.equal(q.zeros[e], ref.zeros)
        assert torch.equal(deq[e], ref.dequantize(torch.float32)), seed
        assert isinstance(q.expert(e), Int4Weight) and torch.equal(q.expert(e).dequantize(torch.float32), deq[e])
    assert 0.05 < _rel(deq, w) < 0.2, seed  # int4 round to nearest (docs/quantization.md: ~0.1 on Gaussians)
    assert q.nbytes() == 3 * 40 * (100 + 2 * (2 + int(zero_point)))


def test_same_layout_as_the_kernels_quantizer(seed):
    mi = pytest.importorskip("hinfer.ops.triton.moe_int4")
    w = torch.randn(E, 2 * N_I, H).bfloat16()
    ours, theirs = quantize_experts_int4(w), mi.quantize_experts_int4(w)
    for a, b in ((ours.qweight, theirs.qweight), (ours.scales, theirs.scales), (ours.zeros, theirs.zeros)):
        assert torch.equal(a, b), seed


def test_buffers_travel_with_to_and_state_dict(seed):
    q = quantize_experts(torch.randn(4, 16, 128), get_recipe("int4-default"))
    assert {n for n, _ in q.named_buffers()} == {"qweight", "scales", "zeros"}
    assert set(q.state_dict()) == {"qweight", "scales", "zeros"}
    q2 = q.to(torch.float64)  # floating buffers only: the scales
    assert q2.scales.dtype == torch.float64 and q2.qweight.dtype == torch.int32 and q2.zeros.dtype == torch.uint8
    sym = quantize_experts(torch.randn(4, 16, 128), get_recipe("int4-sym"))
    assert set(sym.state_dict()) == {"qweight", "scales"}
    with pytest.raises(NotImplementedError, match="int4"):
        quantize_experts(torch.randn(4, 16, 128), get_recipe("fp8"))


# ------------------------------------------------------------------------------------------------ moe_experts
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_body_equals_dequantized_experts(seed, monkeypatch, dtype):
    """CPU: moe_experts on quantized experts = the bf16-expert reference body on the fp32-dequantized experts,
    computed in fp32 and rounded once; never dequantizing the whole [E, N, K] tensor."""
    gu, dn = _experts()
    qgu, qdn = quantize_experts_int4(gu.bfloat16()), quantize_experts_int4(dn.bfloat16(), zero_point=False)
    dgu, ddn = qgu.dequantize(torch.float32), qdn.dequantize(torch.float32)
    x = torch.randn(9, H).to(dtype)
    top_w, top_i = _routing(9)
    top_w = top_w.to(dtype)
    monkeypatch.setenv("HINFER_TRITON", "0")

    def whole(*a, **k):
        raise AssertionError("the reference dequantized every expert at once")

    monkeypatch.setattr(Int4ExpertsWeight, "dequantize", whole)
    out = moe_ops.moe_experts(x, qgu, qdn, top_w, top_i)
    want = moe_ops.moe_experts_ref(x.float(), dgu, ddn, top_w.float(), top_i).to(dtype)
    assert out.dtype == dtype and torch.equal(out, want), f"max err {(out - want).abs().max()}, seed {seed}"
    if dtype == torch.float32:  # the kernels' own reference (moe_int4) agrees up to summation order
        mi = pytest.importorskip("hinfer.ops.triton.moe_int4")
        kq = mi.Int4Experts(qgu.qweight, qgu.scales, qgu.zeros, H), mi.Int4Experts(qdn.qweight, qdn.scales, None, N_I)
        monkeypatch.undo()
        torch.testing.assert_close(mi.moe_experts_int4_ref(x, *kq, top_w, top_i), out, rtol=1e-5, atol=1e-5)


def _triton_moe():
    """The Triton MoE module, or a skip where its kernels can neither compile (no GPU) nor be interpreted."""
    pytest.importorskip("triton")
    from hinfer.ops.triton import moe as tm
    from hinfer.ops.triton.moe_common import interpreted
    from hinfer.ops.triton.moe_gemm import _gate_up_kernel

    if DEV == "cpu" and not interpreted(_gate_up_kernel):
        pytest.skip("Triton MoE kernels were imported without TRITON_INTERPRET (run tests/quant alone)")
    return tm


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("t", [1, 6])
def test_triton_path_matches_the_reference(seed, monkeypatch, zero_point, t):
    """bf16 activations: moe_experts hands the quantized experts to the grouped int4 kernels (T = 1: the direct
    path; T = 6: aligned 16-row blocks) and matches the reference body to bf16 rounding of act and y."""
    tm = _triton_moe()
    gu, dn = _experts(device=DEV)
    qgu, qdn = quantize_experts_int4(gu.bfloat16(), zero_point=zero_point), quantize_experts_int4(dn.bfloat16())
    x = torch.randn(t, H, device=DEV).bfloat16()
    top_w, top_i = _routing(t, DEV)
    top_w = top_w.bfloat16()
    calls = []
    real = tm.moe_experts
    monkeypatch.setattr(tm, "moe_experts", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setenv("HINFER_TRITON", "1")
    out = moe_ops.moe_experts(x, qgu, qdn, top_w, top_i)
    assert len(calls) == 1 and type(calls[0]).__name__ == "Int4Experts"
    want = moe_ops.moe_experts_ref(x, qgu, qdn, top_w, top_i)
    assert torch.isfinite(out).all() and out.dtype == torch.bfloat16
    assert _rel(out, want) < 1e-2, f"rel {_rel(out, want):.3g}, seed {seed}"
    moe_ops.moe_experts(x.float(), qgu, qdn, top_w.float(), top_i)  # fp32 activations: reference body, no kernel
    assert len(calls) == 1


# --------------------------------------------------------------------------------------------- a tiny MoE model
def test_int4_default_quantizes_the_routed_experts(seed):
    model = _model(True)
    prompts = [torch.randint(1, model.cfg.vocab_size, (12,)).tolist() for _ in range(3)]
    refs = [_logits(model, ids) for ids in prompts]
    q = copy.deepcopy(model)
    quantize_model(q, "int4-default")
    for layer in q.layers:
        mlp = layer.mlp
        assert isinstance(mlp.experts_gate_up, Int4ExpertsWeight) and isinstance(mlp.experts_down, Int4ExpertsWeight)
        assert mlp.experts_gate_up.shape == tuple(model.layers[layer.layer_idx].mlp.experts_gate_up.shape)
        assert isinstance(mlp.router, torch.nn.Parameter) and isinstance(mlp.shared_expert_gate, torch.nn.Parameter)
    assert isinstance(q.mtp.layers[0].mlp.experts_gate_up, torch.nn.Parameter)  # the MTP head: only convert_mtp
    # median over prompts (a routing flip can move one prompt; over 40 draws: mean 0.14, max 0.20)
    err = sorted(_rel(_logits(q, ids), ref) for ids, ref in zip(prompts, refs))[1]
    assert err < 0.45, f"logits rel err {err:.3f}, seed {seed}"
    m = copy.deepcopy(model)
    quantize_model(m, replace(get_recipe("int4-sym"), convert_mtp=True))
    assert isinstance(m.mtp.layers[0].mlp.experts_down, Int4ExpertsWeight) and m.mtp.layers[0].mlp.experts_down.zeros is None
    f = copy.deepcopy(model)
    quantize_model(f, "fp8-default")  # no fp8 expert kernel: the experts stay in the model dtype
    assert isinstance(f.layers[0].mlp.experts_gate_up, torch.nn.Parameter)
    with pytest.raises(NotImplementedError, match="int4 only"):
        quantize_model(f, replace(get_recipe("fp8-default"), targets=get_recipe("int4").targets))


@pytest.mark.parametrize(("name", "mtp"), [("int4-default", False), ("int4-sym", True)])
def test_weight_bytes_match_the_quantized_model(name, mtp):
    """The memory plan's bytes (hinfer.engine.weight_bytes, from the config alone) = the quantized model's."""
    from hinfer.engine.weight_bytes import weight_bytes

    model = _model(True)  # fp32 on the CPU: kept tensors and int4 scales at 4 bytes
    cfg, recipe = model.cfg, replace(get_recipe(name), convert_mtp=mtp)
    base = quantized_nbytes(model)
    quantize_model(model, recipe)
    plan, plan_bf16 = weight_bytes(cfg, recipe, 4, True), weight_bytes(cfg, "bf16", 4, True)
    assert quantized_nbytes(model) - base == plan.total - plan_bf16.total
    expert_bytes = sum(m.nbytes() for m in model.modules() if isinstance(m, Int4ExpertsWeight))
    mtp_kept = 0 if mtp else 4 * (4 * 3 * 64 * 128)  # the MTP layer's 4 experts x 3 projections, fp32
    assert plan.by_role["experts"] == expert_bytes + mtp_kept
