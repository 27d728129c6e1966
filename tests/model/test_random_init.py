"""Random weights for benchmarks: random_quantized builds the same structure quantize_model(random_init(...))
gives, one layer at a time, with nothing left on the meta device and finite logits."""

from __future__ import annotations

import pytest
import torch

from hinfer.config import ModelConfig
from hinfer.model.prompt_logits import prompt_logits
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init, random_quantized
from hinfer.quant import quantize_model

CFG = dict(
    model_type="qwen3_5_moe_text", vocab_size=512, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4, intermediate_size=256,
    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
    tie_word_embeddings=False, mtp_num_hidden_layers=1,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
)  # fmt: skip


@pytest.mark.parametrize("recipe", ["int4", "fp8"])
def test_random_quantized_matches_the_quantized_structure(recipe):
    cfg = ModelConfig.from_dict(CFG)
    got = random_quantized(cfg, recipe, "cpu", with_mtp=True, seed=3)
    want = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cpu", with_mtp=True), seed=3)
    quantize_model(want, recipe)
    sg, sw = got.state_dict(), want.state_dict()
    assert sg.keys() == sw.keys()
    for k in sw:
        assert sg[k].shape == sw[k].shape and sg[k].dtype == sw[k].dtype, k
        assert sg[k].device.type == "cpu", k
    assert {type(m).__name__ for m in got.modules()} == {type(m).__name__ for m in want.modules()}
    ids = torch.randint(1, cfg.vocab_size, (9,)).tolist()
    logits = prompt_logits(got, ids)
    assert torch.isfinite(logits).all() and logits.std() > 0
