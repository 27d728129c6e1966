"""The serving layout (hinfer/model/serving_layout.py), the one call rank 0 and every follower make: on a CUDA
device the shared experts fold into the routed ones, on the CPU the model stays as loaded; off a GPU the int4
weights keep their row order (fragment order and stripes are the GPU kernels' forms)."""

from __future__ import annotations

from dataclasses import replace

import torch

from hinfer.config import ModelConfig
from hinfer.fixtures import fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM, SparseMoE
from hinfer.model.random_init import random_init
from hinfer.model.serving_layout import lay_out_for_serving
from hinfer.quant.apply import quantize_model
from hinfer.quant.recipes import get_recipe
from tests.model.test_shared_expert_fold import BASE


def _int4_model() -> Qwen35ForCausalLM:
    model = random_init(Qwen35ForCausalLM(ModelConfig.from_dict(BASE), torch.float32), seed=fixed_test_seed())
    quantize_model(model, replace(get_recipe("int4"), convert_mtp=True))
    return model.eval()


def _moes(model) -> list[SparseMoE]:
    return [m for m in model.modules() if isinstance(m, SparseMoE)]


def test_the_cpu_keeps_the_model_as_loaded():
    model = _int4_model()
    lay_out_for_serving(model, torch.device("cpu"))
    assert all(m.shared_expert is not None for m in _moes(model))
    assert all(m.experts_gate_up.words == "rows" for m in _moes(model))


def test_a_cuda_device_folds_the_shared_experts_and_keeps_rows_off_the_gpu():
    model = _int4_model()
    lay_out_for_serving(model, torch.device("cuda"))  # the tensors stay on the CPU: only the fold applies
    moes = _moes(model)
    assert len(moes) == 3 and all(m.shared_expert is None for m in moes)
    assert all(m.experts_gate_up.shape[0] == BASE["num_experts"] + 1 for m in moes)
    assert all(m.experts_gate_up.words == m.experts_down.words == "rows" for m in moes)
