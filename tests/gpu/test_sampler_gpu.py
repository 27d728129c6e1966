"""The sampler on the GPU at the real vocabulary: the candidate path in one Triton launch (HINFER_SAMPLER_KERNEL=1)
samples the torch body's tokens, eight rows over 64 steps of Qwen3.5-sized logits."""

from __future__ import annotations

import pytest
import torch

from hinfer.engine.sampler import RowState, Sampler
from hinfer.fixtures import fixed_test_seed
from hinfer.sampling_params import SamplingParams as SP

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

VOCAB = 248320


def _tokens(monkeypatch, kernel: str) -> list[list[int]]:
    monkeypatch.setenv("HINFER_SAMPLER_KERNEL", kernel)
    g = torch.Generator(device="cuda").manual_seed(fixed_test_seed())
    params = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=0.6, top_k=20, top_p=0.95, min_p=0.01),
              SP(temperature=0.7, top_k=256, top_p=0.8)] * 3  # fmt: skip
    sampler = Sampler(VOCAB, torch.device("cuda"), max_rows=len(params), num_real_tokens=248077)
    rows = [RowState(p, seed=11 + i, slot=i) for i, p in enumerate(params)]
    for r in rows:
        sampler.add_row(r)
    out = []
    for _ in range(64):
        z = torch.randn(len(rows), VOCAB, generator=g, device="cuda") * 4
        ids = sampler.sample(z, rows).token_ids
        sampler.advance(rows, ids)
        out.append(ids.tolist())
    return out


def test_candidate_kernel_samples_the_torch_bodys_tokens(monkeypatch) -> None:
    assert _tokens(monkeypatch, "1") == _tokens(monkeypatch, "0")
