"""The shared expert folded into the routed experts (hinfer/model/shared_expert_fold.py): every MoE layer gives
the same output as before the fold, plain, int4 (asymmetric and symmetric) and fp8 experts, through the torch
reference and the Triton twins (interpreted here); the route's extra slot equals the sigmoid gate; a shared
expert of another size or format is left alone; the floors count the same routed-expert bytes."""

from __future__ import annotations

import copy

import pytest
import torch

from hinfer.config import ModelConfig
from hinfer.fixtures import fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM, SparseMoE
from hinfer.model.random_init import random_init
from hinfer.model.shared_expert_fold import fold_shared_experts
from hinfer.ops.moe import moe_route_ref

BASE = dict(
    model_type="qwen3_5_moe_text", vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
    linear_value_head_dim=32, linear_conv_kernel_dim=4, intermediate_size=256, rms_norm_eps=1e-6,
    tie_word_embeddings=False, mtp_num_hidden_layers=1, num_experts=8, num_experts_per_tok=2,
    moe_intermediate_size=128, shared_expert_intermediate_size=128,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
)  # fmt: skip
TOL = 2e-5  # fp32 (dequantized weights): only the order of the final sum differs


def _model(**over) -> Qwen35ForCausalLM:
    cfg = ModelConfig.from_dict(BASE | over)
    return random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=fixed_test_seed()).eval()


def _moes(model) -> list[SparseMoE]:
    return [m for m in model.modules() if isinstance(m, SparseMoE)]


def _quantized(recipe: str | None):
    from dataclasses import replace

    from hinfer.quant.apply import quantize_model
    from hinfer.quant.recipes import get_recipe

    model = _model()
    if recipe:
        quantize_model(model, replace(get_recipe(recipe), convert_mtp=True))
    return model


@pytest.mark.parametrize("recipe", [None, "int4", "int4-sym", "fp8-default"])
def test_folded_layers_give_the_same_output(recipe):
    model = _quantized(recipe)
    folded = copy.deepcopy(model)
    assert fold_shared_experts(folded) == 3  # two decoder layers and the MTP head's
    g = torch.Generator().manual_seed(fixed_test_seed())
    x = torch.randn(5, BASE["hidden_size"], generator=g)
    for a, b in zip(_moes(model), _moes(folded)):
        assert b.shared_expert is None and b.experts_gate_up.shape[0] == BASE["num_experts"] + 1
        with torch.no_grad():
            want, got = a(x), b(x)
        assert (got - want).abs().max().item() < TOL * want.abs().max().item()


def test_the_route_adds_the_gate_as_one_more_slot():
    g = torch.Generator().manual_seed(fixed_test_seed())
    logits = torch.randn(6, 9, generator=g)
    w, i = moe_route_ref(logits, 2, shared=True)
    w0, i0 = moe_route_ref(logits[:, :8], 2)
    assert torch.equal(w[:, :2], w0) and torch.equal(i[:, :2], i0)
    assert torch.equal(i[:, 2], torch.full((6,), 8)) and torch.allclose(w[:, 2], torch.sigmoid(logits[:, 8]))


def test_the_triton_route_and_experts_take_the_folded_layer(interpreter):
    from hinfer.ops.triton.moe import moe_experts, moe_route

    model = _model()
    fold_shared_experts(model)
    moe = _moes(model)[0]
    g = torch.Generator().manual_seed(fixed_test_seed())
    x = torch.randn(3, BASE["hidden_size"], generator=g)
    logits = torch.randn(3, BASE["num_experts"] + 1, generator=g)
    w, i = moe_route(logits, 2, shared=True)
    w_ref, i_ref = moe_route_ref(logits, 2, shared=True)
    assert torch.equal(i, i_ref) and torch.allclose(w, w_ref, atol=1e-6)
    from hinfer.ops.moe import moe_experts_ref

    y = moe_experts(x, moe.experts_gate_up.data, moe.experts_down.data, w, i)
    y_ref = moe_experts_ref(x, moe.experts_gate_up.data, moe.experts_down.data, w_ref, i_ref)
    assert (y - y_ref).abs().max().item() < 1e-4 * y_ref.abs().max().item()


def test_other_shapes_and_formats_stay_unfolded():
    assert fold_shared_experts(_model(shared_expert_intermediate_size=256)) == 0
    from hinfer.quant.int4 import quantize_int4

    model = _model()
    moe = _moes(model)[0]
    down = moe.shared_expert.down_proj.data
    del moe.shared_expert.down_proj
    moe.shared_expert.down_proj = quantize_int4(down)  # an int4 shared expert beside plain experts
    assert fold_shared_experts(model) == 2 and moe.shared_expert is not None


def test_floors_count_the_same_routed_bytes():
    from hinfer.bench.floors import expert_bytes, weight_bytes_per_step

    model = _quantized("int4")
    before = (expert_bytes(model), expert_bytes(model, mtp=True), weight_bytes_per_step(model))
    fold_shared_experts(model)
    after = (expert_bytes(model), expert_bytes(model, mtp=True), weight_bytes_per_step(model))
    assert before == after
