"""Tensor parallelism on two GPUs (NCCL): decode through captured CUDA graphs holding the all-reduces
(HINFER_TP_GRAPHS=1) equals the split engine's eager decode token for token, 64 greedy steps on four lanes, one
lane crossing into the wider page-table graphs; int4 weights the same. Skipped below two GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hinfer
from hinfer.fixtures import fixed_test_seed
from hinfer.llm import LLM
from hinfer.sampling_params import SamplingParams
from hinfer.weights.synth import write_synthetic_checkpoint

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")]

SMALL = dict(
    vocab_size=4096, hidden_size=512, intermediate_size=1024, num_attention_heads=4, num_key_value_heads=2,
    head_dim=256, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
    linear_value_head_dim=128, max_position_embeddings=8192, tie_word_embeddings=False,
)  # fmt: skip
ENGINE = dict(device="cuda", dtype="bf16", max_context=8192, max_concurrency=4, tensor_parallel=2)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    src = Path(hinfer.__file__).parent / "configs" / "qwen3.5-0.8b"
    return write_synthetic_checkpoint(src, tmp_path_factory.mktemp("tp"), layers=4, seed=3, overrides=SMALL,
                                      progress=False)  # fmt: skip


@pytest.mark.parametrize("weights", ["bf16", "int4"])
def test_graph_decode_over_two_ranks_equals_eager(ckpt, weights, monkeypatch):
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 333, 4070)]
    params = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    outs = []
    for graphs in ("1", "0"):
        monkeypatch.setenv("HINFER_TP_GRAPHS", graphs)
        with LLM(str(ckpt), weights=weights, **ENGINE) as llm:
            assert bool(llm.core.runner.graphs) == (graphs == "1")
            outs.append([o.token_ids for o in llm.generate(prompts, params)])
    assert outs[0] == outs[1]
