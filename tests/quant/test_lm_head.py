"""--lm-head fp8 | int4 (hinfer.quant.apply.quantize_head): the logits projection alone converted, untied or tied
(a quantized copy beside the embedding table), its bytes as the memory plan counts them, the drafter sharing it,
and the flags that cannot go with it."""

from __future__ import annotations

import copy

import pytest
import torch
from test_apply import _BASE, _logits, _rel

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.weight_bytes import lm_head_delta
from hinfer.errors import ConfigError
from hinfer.fixtures import fixed_test_seed
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.quant import Fp8Weight, Int4Weight, quantize_model
from hinfer.quant.apply import quantize_head, quantized_nbytes

# logits relative error of the head alone converted, over 30 seeds x tied / untied of this config: fp8 mean 0.024,
# max 0.026; int4 (g128, asymmetric) mean 0.093, max 0.103
BOUND = {"fp8": 0.04, "int4": 0.15}


def _model(tied: bool) -> Qwen35ForCausalLM:
    cfg = ModelConfig.from_dict(_BASE | {"tie_word_embeddings": tied})
    return random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=fixed_test_seed()).eval()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("fmt", ["fp8", "int4"])
def test_the_head_alone_is_converted_and_the_logits_stay_close(fmt, tied):
    model = _model(tied)
    table = model.embed_tokens.clone()
    body = {n: p.clone() for n, p in model.named_parameters() if n not in ("lm_head", "embed_tokens")}
    ids = torch.randint(1, model.cfg.vocab_size, (12,), generator=torch.Generator().manual_seed(fixed_test_seed()))
    ref = _logits(model, ids.tolist())
    size = quantized_nbytes(model)
    quantize_head(model, fmt)
    assert isinstance(model.lm_head, {"fp8": Fp8Weight, "int4": Int4Weight}[fmt])
    assert "lm_head" not in dict(model.named_parameters())
    assert torch.equal(model.embed_tokens, table)  # the lookups keep the table as it was
    assert all(torch.equal(p, body[n]) for n, p in model.named_parameters() if n != "embed_tokens")
    assert quantized_nbytes(model) - size == lm_head_delta(model.cfg, fmt, dtype_bytes=4)
    err = _rel(_logits(model, ids.tolist()), ref)
    assert err < BOUND[fmt], (fmt, tied, err)
    quantize_head(model, fmt)  # idempotent
    assert quantized_nbytes(model) - size == lm_head_delta(model.cfg, fmt, dtype_bytes=4)


def test_fp8_head_is_closer_than_int4():
    model = _model(False)
    ids = list(range(3, 15))
    ref = _logits(model, ids)
    errs = {}
    for fmt in ("fp8", "int4"):
        q = copy.deepcopy(model)
        quantize_head(q, fmt)
        errs[fmt] = _rel(_logits(q, ids), ref)
    assert errs["fp8"] < 0.5 * errs["int4"], errs


def test_the_drafter_shares_a_quantized_head():
    from hinfer.engine.spec import draft_head

    model = _model(False)
    quantize_model(model, "int4")
    assert isinstance(draft_head(model), Int4Weight)  # the body's format alone: the drafter's own int4 copy
    quantize_head(model, "int4")
    assert draft_head(model) is None  # the model's head is quantized already: drafts read it


def test_flags_that_do_not_go_with_it():
    with pytest.raises(ConfigError, match="--lm-head"):
        EngineConfig(lm_head="fp16").validate()
    with pytest.raises(ConfigError, match="--spec-draft-vocab"):
        EngineConfig(lm_head="int4", spec="mtp", spec_draft_vocab=4096).validate()
    with pytest.raises(ConfigError, match="--lm-head"):
        EngineConfig(lm_head="fp8", tensor_parallel=2).validate()
    EngineConfig(lm_head="int4", spec="mtp").validate()


def test_the_engine_decodes_through_a_quantized_head(tiny_model, tokenizer):
    """make_core converts the head (`--lm-head int4`); greedy tokens are the argmax of the converted model's own
    logits, step after step, and the session's shared model is left as it was."""
    from hinfer.engine.factory import make_core, resolve_engine_config
    from hinfer.engine.protocol import GenerationRequest
    from hinfer.model.prompt_logits import prompt_logits
    from hinfer.sampling_params import SamplingParams

    cfg, shared = tiny_model
    model = copy.deepcopy(shared)
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=256, page_size=16, lm_head="int4"))
    core = make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))
    assert isinstance(model.lm_head, Int4Weight) and isinstance(shared.lm_head, torch.Tensor)
    prompt = [5, 17, 301, 42, 9]
    core.add(GenerationRequest("r", prompt, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)))
    got, done = [], False
    while not done:
        for ev in core.step():
            got += ev.token_ids
            done = done or ev.finish_reason is not None
    assert len(got) == 6
    for i, tok in enumerate(got):  # each token the argmax of the converted model over the text so far
        assert tok == int(prompt_logits(model, prompt + got[:i])[-1].argmax()), i
