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


def _picks(monkeypatch, kernel: str) -> list:
    """engine/spec/picks.py over four lanes x 4 verified rows of Qwen3.5-sized logits, 32 rounds."""
    from hinfer.engine.sampler import vocab_gamma
    from hinfer.engine.spec.dist import Position
    from hinfer.engine.spec.picks import sampled_picks

    monkeypatch.setenv("HINFER_SPEC_PICKS_KERNEL", kernel)
    g = torch.Generator(device="cuda").manual_seed(fixed_test_seed())
    params = [SP(temperature=1.0, top_k=20, top_p=0.95), SP(temperature=0.6, top_k=20, top_p=0.95, min_p=0.01),
              SP(temperature=0.7, top_k=256, top_p=0.8), SP(temperature=1.0, top_k=5)]  # fmt: skip
    sampler = Sampler(VOCAB, torch.device("cuda"), max_rows=len(params), num_real_tokens=248077)
    rows = [RowState(p, seed=5 + i, slot=i) for i, p in enumerate(params)]
    gamma, t, out = vocab_gamma(VOCAB, torch.device("cuda")), 4, []
    for rnd in range(32):
        z = torch.randn(len(rows) * t, VOCAB, generator=g, device="cuda") * 4
        top2 = torch.topk(z, 2, dim=-1).indices
        drafts = torch.where(torch.arange(len(rows) * t, device="cuda") % 2 == rnd % 2, top2[:, 0], top2[:, 1])
        drafts.view(len(rows), t)[:, -1] = -1
        for r in rows:
            r.num_generated = 4 * rnd
        pick, ok = sampled_picks(sampler, z, [Position(r) for r in rows], drafts, t, gamma)
        out.append((pick.tolist(), ok.tolist()))
    return out


def test_spec_picks_kernel_judges_as_the_torch_body(monkeypatch) -> None:
    """Sampled lanes' verified rows judged on the device (engine/spec/picks.py) in one launch after the top-k
    (HINFER_SPEC_PICKS_KERNEL=1): the torch body's picks and acceptance, 512 rows (its race is over the filtered
    logits, the torch body's over their log-softmax: at most a rounding tie could differ; none may here)."""
    got, want = _picks(monkeypatch, "1"), _picks(monkeypatch, "0")
    assert got == want
    assert 0 < sum(sum(ok) for _, ok in want) < 32 * 16
