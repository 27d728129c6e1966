"""Int4MmaWeight, the fragment-ordered form of Int4Weight: exact round trip, the same values and matmul semantics,
and the swap of a whole model (on the CPU the reference bodies run: logits must not move by a bit)."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.quant.int4 import quantize_int4
from hinfer.quant.int4_mma_layout import permute_words, unpermute_words
from hinfer.quant.int4_mma_weight import (
    Int4MmaWeight,
    fragment_order_fits,
    swap_to_fragment_order,
    use_fragment_order,
)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(fixed_test_seed())


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_round_trip_and_values(zero_point):
    g = _gen()
    q = quantize_int4(torch.randn(192, 384, generator=g).bfloat16(), zero_point=zero_point)
    w = Int4MmaWeight.from_int4(q)
    back = w.to_int4()
    assert torch.equal(back.qweight, q.qweight) and torch.equal(back.scales, q.scales)
    assert (back.zeros is None) == (q.zeros is None) and (q.zeros is None or torch.equal(back.zeros, q.zeros))
    assert w.shape == q.shape and w.in_features == 384 and w.dtype == torch.bfloat16 and w.nbytes() == q.nbytes()
    assert torch.equal(w.dequantize(), q.dequantize())
    x = torch.randn(5, 384, generator=g).bfloat16()
    assert torch.equal(w.matmul(x), q.matmul_ref(x))
    out = torch.full((5, 192), float("nan"), dtype=torch.bfloat16)
    w.matmul(x, out=out)
    assert torch.equal(out, q.matmul_ref(x))


def test_silu_mul_linear_is_the_activation_then_the_projection():
    """ops.linear.silu_mul_linear (the MLP's down projection): a plain weight and an int4 one give exactly
    linear(silu_mul(gate_up), W) (on a GPU the int4 weight may apply the activation while quantizing x; that
    path is tests/gpu/test_int4_a8.py's)."""
    from hinfer.ops.activation import silu_mul
    from hinfer.ops.linear import linear, silu_mul_linear

    g = _gen()
    gu = torch.randn(3, 2, 1024, generator=g).bfloat16()
    q = quantize_int4(torch.randn(192, 512, generator=g).bfloat16())
    w = Int4MmaWeight.from_int4(q)
    dense = torch.randn(192, 512, generator=g).bfloat16()
    for weight in (w, dense):
        got = silu_mul_linear(gu, weight)
        assert got.shape == (3, 2, 192) and torch.equal(got, linear(silu_mul(gu), weight))
    assert w.silu_mul_matmul(gu) is None  # no fused form off the GPU: the composition above ran


def test_add_rms_norm_into_linear_is_add_rms_norm_then_the_projection():
    """ops.norm.add_rms_norm_into_linear (the MLP's gate_up after its norm): a plain weight and an int4 one give
    exactly (linear(add_rms_norm(x, r)[0], W), add_rms_norm(x, r)[1]) (on a GPU the int4 weight may norm x while
    quantizing it; that path is tests/gpu/test_int4_a8.py's)."""
    from hinfer.ops.linear import linear
    from hinfer.ops.norm import add_rms_norm, add_rms_norm_into_linear

    g = _gen()
    x, res = torch.randn(3, 512, generator=g).bfloat16(), torch.randn(3, 512, generator=g).bfloat16()
    nw = (torch.randn(512, generator=g) * 0.1).bfloat16()
    w = Int4MmaWeight.from_int4(quantize_int4(torch.randn(192, 512, generator=g).bfloat16()))
    dense = torch.randn(192, 512, generator=g).bfloat16()
    y, r = add_rms_norm(x, res, nw, 1e-6)
    for weight in (w, dense):
        got, got_r = add_rms_norm_into_linear(x, res, nw, weight, 1e-6)
        assert torch.equal(got, linear(y, weight)) and torch.equal(got_r, r)
    assert w.norm_matmul(x, res, nw, 1e-6) is None  # no fused form off the GPU


def test_chunked_permutation_equals_one_pass():
    q = quantize_int4(torch.randn(96, 256, generator=_gen()).bfloat16())
    whole = permute_words(q.qweight, 256, chunk_rows=96)
    assert torch.equal(permute_words(q.qweight, 256, chunk_rows=32), whole)
    assert torch.equal(unpermute_words(whole, 256), q.qweight)


def test_only_fitting_weights_are_swapped():
    g = _gen()
    assert fragment_order_fits(quantize_int4(torch.randn(128, 256, generator=g).bfloat16()))
    assert not fragment_order_fits(quantize_int4(torch.randn(48, 256, generator=g).bfloat16()))  # N % 64
    assert not fragment_order_fits(quantize_int4(torch.randn(64, 200, generator=g).bfloat16()))  # K % 128
    assert not fragment_order_fits(quantize_int4(torch.randn(64, 256, generator=g).float()))  # fp32 scales
    assert not fragment_order_fits(torch.nn.Linear(256, 64))


def test_cpu_models_keep_the_row_layout():
    q = quantize_int4(torch.randn(128, 256, generator=_gen()).bfloat16())
    assert use_fragment_order(q) is q  # not on a GPU: nothing to gain


def test_swapped_model_gives_the_same_logits():
    from hinfer.config import ModelConfig
    from hinfer.model.prompt_logits import prompt_logits
    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.model.random_init import random_init
    from hinfer.quant import quantize_model

    cfg = ModelConfig.from_dict({
        "model_type": "qwen3_5_text", "vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 2,
        "linear_key_head_dim": 64, "linear_value_head_dim": 64, "max_position_embeddings": 512,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        "tie_word_embeddings": False,
    })  # fmt: skip
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16), seed=fixed_test_seed()).eval()
    quantize_model(model, "int4")
    ids = torch.randint(1, 256, (9,), generator=_gen()).tolist()
    before = prompt_logits(model, ids)
    fitting = sum(fragment_order_fits(m) for m in model.modules())
    assert fitting > 0 and swap_to_fragment_order(model) == fitting
    assert not any(fragment_order_fits(m) for m in model.modules())
    assert sum(isinstance(m, Int4MmaWeight) for m in model.modules()) == fitting
    assert torch.equal(prompt_logits(model, ids), before)
