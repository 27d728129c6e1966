"""int4 and fp8 MoE routed experts (hinfer.quant.experts): the weight objects, `moe_experts` on them (reference
body and the grouped Triton kernels, FMT 1 and 2), tiny MoE models quantized with int4-default / fp8-default /
fp8-block, and the memory plan's bytes for them.

Random inputs every run (the seed is printed on failure). Triton runs in its CPU interpreter without a GPU
(tests/triton_interpreter.py), at tiny shapes: E=8 experts, top 2, H=256 (two 128-groups / scale blocks),
N_I=32.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from test_apply import _logits, _model  # tests/quant/test_apply.py: the same tiny random models

from hinfer.config import ModelConfig
from hinfer.fixtures import fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.ops import moe as moe_ops
from hinfer.quant import (
    Fp8ExpertsWeight,
    Fp8Weight,
    Int4ExpertsWeight,
    Int4Weight,
    get_recipe,
    quantize_experts,
    quantize_fp8,
    quantize_int4,
    quantize_model,
)
from hinfer.quant.apply import quantized_nbytes
from hinfer.quant.experts import quantize_experts_fp8, quantize_experts_int4

DEV = "cuda" if torch.cuda.is_available() else "cpu"
E, K_TOP, H, N_I = 8, 2, 256, 32


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


def test_buffers_travel_with_to_and_state_dict(seed):
    q = quantize_experts(torch.randn(4, 16, 128), get_recipe("int4-default"))
    assert {n for n, _ in q.named_buffers()} == {"qweight", "scales", "zeros"}
    assert set(q.state_dict()) == {"qweight", "scales", "zeros"}
    q2 = q.to(torch.float64)  # floating buffers only: the scales
    assert q2.scales.dtype == torch.float64 and q2.qweight.dtype == torch.int32 and q2.zeros.dtype == torch.uint8
    sym = quantize_experts(torch.randn(4, 16, 128), get_recipe("int4-sym"))
    assert set(sym.state_dict()) == {"qweight", "scales"}
    for name, block in (("fp8-default", None), ("fp8-block", (128, 128))):
        f = quantize_experts(torch.randn(4, 16, 128), get_recipe(name))
        assert isinstance(f, Fp8ExpertsWeight) and f.block == block
        assert set(f.state_dict()) == {"weight", "scale"} and {n for n, _ in f.named_buffers()} == {"weight", "scale"}
    with pytest.raises(ValueError, match="converts nothing"):
        quantize_experts(torch.randn(4, 16, 128), get_recipe("bf16"))


# ------------------------------------------------------------------------------------------------ moe_experts
def _quantize_both(fmt: str, gu: torch.Tensor, dn: torch.Tensor):
    """(gate_up, down, their class) in `fmt`: int4 (asym gate_up, sym down), fp8-channel or fp8-block."""
    if fmt == "int4":
        return quantize_experts_int4(gu.bfloat16()), quantize_experts_int4(dn.bfloat16(), zero_point=False), Int4ExpertsWeight
    scheme = fmt.split("-")[1]
    return quantize_experts_fp8(gu.bfloat16(), scheme), quantize_experts_fp8(dn.bfloat16(), scheme), Fp8ExpertsWeight


@pytest.mark.parametrize("fmt", ["int4", "fp8-channel", "fp8-block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_body_equals_dequantized_experts(seed, monkeypatch, ops_backend, fmt, dtype):
    """CPU: moe_experts on quantized experts = the bf16-expert reference body on the fp32-dequantized experts,
    computed in fp32 and rounded once; never dequantizing the whole [E, N, K] tensor."""
    gu, dn = _experts()
    qgu, qdn, cls = _quantize_both(fmt, gu, dn)
    dgu, ddn = qgu.dequantize(torch.float32), qdn.dequantize(torch.float32)
    x = torch.randn(9, H).to(dtype)
    top_w, top_i = _routing(9)
    top_w = top_w.to(dtype)
    ops_backend("reference")

    def whole(*a, **k):
        raise AssertionError("the reference dequantized every expert at once")

    monkeypatch.setattr(cls, "dequantize", whole)
    out = moe_ops.moe_experts(x, qgu, qdn, top_w, top_i)
    want = moe_ops.moe_experts_ref(x.float(), dgu, ddn, top_w.float(), top_i).to(dtype)
    assert out.dtype == dtype and torch.equal(out, want), f"max err {(out - want).abs().max()}, seed {seed}"


def _triton_moe():
    """The Triton MoE module: interpreted on the CPU, compiled on a GPU (tests/triton_interpreter.py)."""
    pytest.importorskip("triton")
    from hinfer.ops.triton import moe as tm
    from hinfer.ops.triton.common import interpreted
    from hinfer.ops.triton.moe_gemm import _gate_up_kernel

    assert interpreted(_gate_up_kernel) == (DEV == "cpu")
    return tm


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("t", [1, 6])
def test_triton_path_matches_the_reference(seed, monkeypatch, ops_backend, zero_point, t):
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
    ops_backend("triton")
    out = moe_ops.moe_experts(x, qgu, qdn, top_w, top_i)
    assert len(calls) == 1 and type(calls[0]).__name__ == "Int4Experts"
    want = moe_ops.moe_experts_ref(x, qgu, qdn, top_w, top_i)
    assert torch.isfinite(out).all() and out.dtype == torch.bfloat16
    assert _rel(out, want) < 1e-2, f"rel {_rel(out, want):.3g}, seed {seed}"
    moe_ops.moe_experts(x.float(), qgu, qdn, top_w.float(), top_i)  # fp32 activations: reference body, no kernel
    assert len(calls) == 1


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_int4_experts_by_stripes_keep_their_values(seed, monkeypatch, ops_backend, backend):
    """to_stripes moves the words only: the same logical shape, experts, dequantized values and moe_experts
    outputs bit for bit (the reference body reads the rows back; the grouped kernels find each word in its
    stripe); idempotent; a K that is no whole 128-groups keeps its rows."""
    if backend == "triton":
        _triton_moe()
    gu, dn = _experts(i=128, dtype=torch.bfloat16, device=DEV)
    rows = [quantize_experts_int4(w) for w in (gu, dn)]
    striped = [copy.deepcopy(w).to_stripes(gate_up) for w, gate_up in zip(rows, (True, False))]
    for r, st in zip(rows, striped):
        assert st.words == "stripes" and st.shape == r.shape and st.qweight.shape != r.qweight.shape
        assert torch.equal(st.expert(3).qweight, r.expert(3).qweight)
        assert torch.equal(st.dequantize(torch.float32), r.dequantize(torch.float32))
        assert st.kernel_experts().words == "stripes" and st.to_stripes(True) is st
    x = torch.randn(6, H, device=DEV).bfloat16()
    top_w, top_i = _routing(6, DEV)
    ops_backend(backend)
    want = moe_ops.moe_experts(x, *rows, top_w.bfloat16(), top_i)
    got = moe_ops.moe_experts(x, *striped, top_w.bfloat16(), top_i)
    assert torch.equal(got, want), f"max err {(got.float() - want.float()).abs().max()}, seed {seed}"
    narrow = quantize_experts_int4(_experts()[1])  # K = 32
    assert narrow.to_stripes(False).words == "rows"


def test_experts_words_setting(monkeypatch):
    """HINFER_EXPERTS_WORDS: stripes (the default), gate_up or rows, anything else refused; nothing moves off the
    GPU."""
    from hinfer.model.expert_stripes import experts_words, stripe_int4_experts

    monkeypatch.delenv("HINFER_EXPERTS_WORDS", raising=False)
    assert experts_words() == "stripes"
    for v in ("gate_up", "rows", "stripes"):
        monkeypatch.setenv("HINFER_EXPERTS_WORDS", v)
        assert experts_words() == v
    model = torch.nn.Module()
    model.w = quantize_experts_int4(_experts(i=128)[0])
    assert stripe_int4_experts(model) == 0 and model.w.words == "rows"
    monkeypatch.setenv("HINFER_EXPERTS_WORDS", "fragment")
    with pytest.raises(ValueError, match="HINFER_EXPERTS_WORDS"):
        experts_words()


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


# ------------------------------------------------------------------------------------------------- fp8 experts
def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.mark.parametrize("scheme", ["channel", "block"])
def test_fp8_experts_are_the_per_expert_quantizer_exactly(seed, scheme):
    """Each expert's e4m3 values and scales are quantize_fp8(w[e], scheme)'s, bit for bit (N=200, K=300: partial
    128x128 blocks at both edges); expert(e) is that Fp8Weight (views); dequantize round trips."""
    w = torch.randn(3, 200, 300).bfloat16()
    q = quantize_experts_fp8(w, scheme)
    r = quantize_experts(w, get_recipe("fp8-block" if scheme == "block" else "fp8-default"))
    block = (128, 128) if scheme == "block" else None
    assert isinstance(q, Fp8ExpertsWeight) and q.shape == (3, 200, 300) and q.dtype == torch.float8_e4m3fn
    assert q.block == block and q.scale.dtype == torch.float32
    assert q.scale.shape == ((3, 2, 3) if block else (3, 200))
    assert torch.equal(_bits(q.weight), _bits(r.weight)) and torch.equal(q.scale, r.scale)
    deq = q.dequantize(torch.float32)
    for e in range(3):
        ref = quantize_fp8(w[e], scheme)  # the linear layers' quantizer, expert by expert
        assert torch.equal(_bits(q.weight[e]), _bits(ref.weight)) and torch.equal(q.scale[e], ref.scale), seed
        one = q.expert(e)
        assert isinstance(one, Fp8Weight) and one.block == block
        assert one.weight.data_ptr() == q.weight[e].data_ptr() and one.scale.data_ptr() == q.scale[e].data_ptr()
        assert torch.equal(deq[e], ref.dequantize(torch.float32)), seed
        assert torch.equal(q.dequantize(torch.bfloat16)[e], ref.dequantize(torch.bfloat16)), seed
    assert 0.01 < _rel(deq, w) < 0.05, seed  # e4m3 round to nearest (docs/quantization.md: ~0.026 on Gaussians)
    assert q.nbytes() == 3 * 200 * 300 + 4 * q.scale.numel()
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        Fp8ExpertsWeight(w, q.scale, block)
    with pytest.raises(ValueError, match="scale shape"):
        Fp8ExpertsWeight(q.weight, q.scale[:, :1], block)


@pytest.mark.parametrize("scheme", ["channel", "block"])
@pytest.mark.parametrize(("t", "path"), [(1, "direct"), (6, "swap"), (40, "plain")])
def test_fp8_triton_path_matches_the_reference(seed, monkeypatch, ops_backend, scheme, t, path):
    """bf16 activations: moe_experts hands fp8 experts to the grouped kernels (FMT 2) on the path the default
    config picks - T = 1 DIRECT SWAP tiles, T = 6 aligned 16-row SWAP blocks, T = 40 (10 pairs per expert) the
    plain prefill tile - and matches the reference body to bf16 rounding of act and y (the int4 tolerance)."""
    tm = _triton_moe()
    from hinfer.ops.triton.tiles.moe import FP8, pick_config

    cfg = pick_config(t, K_TOP, E, H, N_I, FP8)
    assert (cfg.direct, cfg.gate_up.swap) == {"direct": (True, True), "swap": (False, True),
                                              "plain": (False, False)}[path]
    gu, dn = _experts(device=DEV)
    qgu, qdn = quantize_experts_fp8(gu.bfloat16(), scheme), quantize_experts_fp8(dn.bfloat16(), scheme)
    x = torch.randn(t, H, device=DEV).bfloat16()
    top_w, top_i = _routing(t, DEV)
    top_w = top_w.bfloat16()
    calls = []
    real = tm.moe_experts
    monkeypatch.setattr(tm, "moe_experts", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    ops_backend("triton")
    out = moe_ops.moe_experts(x, qgu, qdn, top_w, top_i)
    assert len(calls) == 1 and type(calls[0]).__name__ == "Fp8Experts" and calls[0].block == (scheme == "block")
    want = moe_ops.moe_experts_ref(x, qgu, qdn, top_w, top_i)
    assert torch.isfinite(out).all() and out.dtype == torch.bfloat16
    assert _rel(out, want) < 1e-2, f"rel {_rel(out, want):.3g}, seed {seed}"
    moe_ops.moe_experts(x.float(), qgu, qdn, top_w.float(), top_i)  # fp32 activations: reference body, no kernel
    assert len(calls) == 1


def test_fp8_block_scales_straddling_gate_and_up(seed, monkeypatch, ops_backend):
    """I = 96 (not a multiple of 128, as quantize_model may give on small configs): the fused [E, 192, H]
    gate_up's block row 0 holds gate rows 0..95 and up rows 0..31, so the kernel must find each up row's scale by
    its fused row I + n, not by n."""
    _triton_moe()
    i = 96
    gu, dn = _experts(i=i, device=DEV)
    qgu, qdn = quantize_experts_fp8(gu.bfloat16(), "block"), quantize_experts_fp8(dn.bfloat16(), "block")
    x = torch.randn(6, H, device=DEV).bfloat16()
    top_w, top_i = _routing(6, DEV)
    ops_backend("triton")
    out = moe_ops.moe_experts(x, qgu, qdn, top_w.bfloat16(), top_i)
    want = moe_ops.moe_experts_ref(x, qgu, qdn, top_w.bfloat16(), top_i)
    assert _rel(out, want) < 1e-2, f"rel {_rel(out, want):.3g}, seed {seed}"


@pytest.mark.parametrize("name", ["fp8-default", "fp8-block"])
def test_fp8_recipes_quantize_the_routed_experts(seed, name):
    model = _model(True)
    prompts = [torch.randint(1, model.cfg.vocab_size, (12,)).tolist() for _ in range(3)]
    refs = [_logits(model, ids) for ids in prompts]
    q = copy.deepcopy(model)
    quantize_model(q, name)
    block = (128, 128) if name == "fp8-block" else None
    for layer in q.layers:
        mlp = layer.mlp
        for attr in ("experts_gate_up", "experts_down"):
            w = getattr(mlp, attr)
            assert isinstance(w, Fp8ExpertsWeight) and w.block == block
            assert w.shape == tuple(getattr(model.layers[layer.layer_idx].mlp, attr).shape)
        assert isinstance(mlp.router, torch.nn.Parameter) and isinstance(mlp.shared_expert_gate, torch.nn.Parameter)
        assert isinstance(mlp.shared_expert.down_proj, Fp8Weight)
    assert isinstance(q.mtp.layers[0].mlp.experts_gate_up, torch.nn.Parameter)  # the MTP head: only convert_mtp
    # median over prompts (a routing flip can move one prompt), the fp8 bound of tests/quant/test_apply.py
    err = sorted(_rel(_logits(q, ids), ref) for ids, ref in zip(prompts, refs))[1]
    assert err < 0.25, f"logits rel err {err:.3f}, seed {seed}"
    m = copy.deepcopy(model)
    quantize_model(m, replace(get_recipe(name), convert_mtp=True))
    assert isinstance(m.mtp.layers[0].mlp.experts_down, Fp8ExpertsWeight)


def _aligned_moe_model() -> Qwen35ForCausalLM:
    """test_apply's MoE model with every fused part a multiple of 128 rows (k/v 128, I 128), so 128x128 block
    scales count the same fused or per checkpoint tensor (as on the real configs)."""
    from test_apply import _BASE, _MOE

    cfg = ModelConfig.from_dict(_BASE | _MOE | {"num_key_value_heads": 4, "moe_intermediate_size": 128})
    return random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=fixed_test_seed()).eval()


@pytest.mark.parametrize(("name", "mtp"), [("fp8-default", False), ("fp8-block", False), ("fp8-block", True)])
def test_fp8_weight_bytes_match_the_quantized_model(name, mtp):
    """The memory plan's bytes = the fp8-quantized MoE model's, routed experts (per expert scales) included."""
    from hinfer.engine.weight_bytes import weight_bytes

    model = _aligned_moe_model()  # fp32 on the CPU: kept tensors at 4 bytes; fp8 scales are fp32 anyway
    cfg, recipe = model.cfg, replace(get_recipe(name), convert_mtp=mtp)
    base = quantized_nbytes(model)
    quantize_model(model, recipe)
    plan, plan_bf16 = weight_bytes(cfg, recipe, 4, True), weight_bytes(cfg, "bf16", 4, True)
    assert quantized_nbytes(model) - base == plan.total - plan_bf16.total
    expert_bytes = sum(m.nbytes() for m in model.modules() if isinstance(m, Fp8ExpertsWeight))
    e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
    scales = 3 * i if name == "fp8-default" else 3  # per expert: 2I + H rows, or 1 + 1 + 1 blocks of 128x128
    per_layer = e * (3 * i * h + 4 * scales)
    assert expert_bytes == (cfg.num_hidden_layers + mtp) * per_layer
    mtp_kept = 0 if mtp else 4 * (e * 3 * i * h)  # the MTP layer's experts in fp32
    assert plan.by_role["experts"] == expert_bytes + mtp_kept
