"""Two gloo ranks give one process's greedy tokens and logits (fp32, 1e-4), dense and MoE, through the engine:
4 lanes, chunked prefill (chunks of 16 over prompts up to 70 tokens), the prefix cache on.

The dense run lets rank 0 spawn rank 1 (LLM(..., tensor_parallel=2)); the MoE run starts rank 1 the way torchrun
does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as a second process running the same LLM call.
The dense config has one KV head (replicated on both ranks) and an odd vocabulary (rank 1's block padded); the
MoE config two KV heads (split).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hinfer
from hinfer.engine.protocol import EngineBrokenError
from hinfer.engine.tp.leader import TensorParallelError
from hinfer.errors import CheckpointError
from hinfer.llm import LLM
from hinfer.sampling_params import SamplingParams
from hinfer.weights.synth import write_synthetic_checkpoint

CONFIGS = Path(hinfer.__file__).parent / "configs"
_SMALL = dict(
    vocab_size=1001, hidden_size=64, head_dim=16, num_attention_heads=4, num_key_value_heads=1,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    max_position_embeddings=4096, tie_word_embeddings=False,
)  # fmt: skip
VARIANTS = {
    "dense": ("qwen3.5-0.8b", _SMALL | {"intermediate_size": 96}),
    "moe": ("qwen3.6-35b-a3b", _SMALL | dict(num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                                             moe_intermediate_size=32, shared_expert_intermediate_size=32)),
}  # fmt: skip
ENGINE = dict(device="cpu", max_concurrency=4, prefill_chunk=16, max_context=256, page_size=16)
PROMPT_LENGTHS = (5, 40, 23, 70)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory):
    def get(variant: str) -> Path:
        src, over = VARIANTS[variant]
        return write_synthetic_checkpoint(CONFIGS / src, tmp_path_factory.mktemp(variant), layers=4, seed=3,
                                          dtype=torch.float32, overrides=over, progress=False)  # fmt: skip

    return get


@pytest.fixture(autouse=True)
def one_thread():
    """The one-process reference on one CPU thread, as each of the two ranks runs (tiny GEMMs: threads only spin)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _prompts(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 1001, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def _run(llm: LLM, prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]], torch.Tensor]:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, logprobs=0))
    return [o.token_ids for o in outs], [o.logprobs for o in outs], llm.logits(prompts[-1])


def _check(one, two) -> None:
    (tok1, lp1, lg1), (tok2, lp2, lg2) = one, two
    assert tok2 == tok1
    assert len({t for seq in tok1 for t in seq}) > 8  # the model does not just repeat one token
    torch.testing.assert_close(torch.tensor(lp2), torch.tensor(lp1), rtol=0, atol=1e-4)
    torch.testing.assert_close(lg2, lg1, rtol=0, atol=1e-4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dense_two_ranks_spawned(ckpt, seed):
    path, prompts = ckpt("dense"), _prompts(seed)
    one = _run(LLM(str(path), **ENGINE), prompts)
    with LLM(str(path), tensor_parallel=2, **ENGINE) as llm:
        assert llm.core.runner.state.k_cache.shape[3] == 1  # the one KV head, replicated
        two = _run(llm, prompts)
    _check(one, two)


def test_two_ranks_decode_through_the_same_graph_sets(ckpt, seed, monkeypatch):
    """The decode graph sets' padded static batches (on the CPU uncaptured: the staging a captured graph replays):
    rank 0 has every rank build the same sets, and each decode step's chunks pick the same set and bucket on every
    rank (a rank running another shape would meet the others in an all-reduce of another size). Tokens, logprobs
    and logits as one process's."""
    from hinfer.engine.cuda_graphs import StepGraphs

    replays = []
    run = StepGraphs.run
    monkeypatch.setattr(StepGraphs, "run", lambda self, *a, **k: replays.append(self) or run(self, *a, **k))
    path, prompts = ckpt("dense"), _prompts(seed)
    llm = LLM(str(path), **ENGINE)
    llm.core.runner.capture_graphs(ENGINE["max_concurrency"], ENGINE["max_context"], capture=False)
    one = _run(llm, prompts)
    with LLM(str(path), tensor_parallel=2, **ENGINE) as llm:
        llm.core.runner.capture_graphs(ENGINE["max_concurrency"], ENGINE["max_context"], capture=False)
        before = len(replays)
        two = _run(llm, prompts)
        assert len(replays) - before >= 7  # the decode steps after each prompt's first token went through them
    _check(one, two)



def test_host_tiers_over_two_ranks(ckpt, seed):
    """The prefix cache's host-RAM tiers across ranks: one device checkpoint slot and a small KV pool, so resumed
    turns find their GDN checkpoints and KV pages spilled to host rows; rank 0 picks the rows and every rank copies
    its own shard's (a rank that restored nothing would answer differently). Three turns of six conversations give
    one process's tokens and logprobs without any cache."""
    path = ckpt("dense")
    tiers = dict(prefix_cache_slots=1, host_cache_bytes=1 << 20, host_kv_bytes=1 << 20, kv_capacity=320)
    plain = LLM(str(path), prefix_cache=False, **ENGINE)
    g = torch.Generator().manual_seed(seed)
    convs = [torch.randint(1, 1001, (int(n),), generator=g).tolist() for n in torch.randint(20, 50, (6,), generator=g)]
    params = SamplingParams(temperature=0, max_tokens=6, logprobs=0, ignore_eos=True)
    with LLM(str(path), tensor_parallel=2, **tiers, **ENGINE) as llm:
        for _ in range(3):
            prompts = [c + torch.randint(1, 1001, (5,), generator=g).tolist() for c in convs]
            two, one = llm.generate(prompts, params), plain.generate(prompts, params)
            assert [o.token_ids for o in two] == [o.token_ids for o in one]
            torch.testing.assert_close(torch.tensor([o.logprobs for o in two]),
                                       torch.tensor([o.logprobs for o in one]), rtol=0, atol=1e-4)  # fmt: skip
            convs = [p + o.token_ids for p, o in zip(prompts, one)]
        extra = llm.core.stats().extra
    assert extra["prefix_host_restores"] > 0 and extra["prefix_host_spills"] > 0
    assert extra["prefix_host_kv_spills"] > 0 and extra["prefix_host_kv_restores"] > 0

def test_moe_two_ranks_under_a_launcher(ckpt, seed, monkeypatch):
    path, prompts = ckpt("moe"), _prompts(seed)
    one = _run(LLM(str(path), **ENGINE), prompts)
    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    call = f"from hinfer.llm import LLM; LLM({str(path)!r}, tensor_parallel=2, **{ENGINE!r})"
    rank1 = subprocess.Popen([sys.executable, "-c", call], env=os.environ | env | {"RANK": "1", "LOCAL_RANK": "1"},
                             cwd=Path(hinfer.__file__).resolve().parents[1])  # fmt: skip
    try:
        for k, v in (env | {"RANK": "0", "LOCAL_RANK": "0"}).items():
            monkeypatch.setenv(k, v)
        with LLM(str(path), tensor_parallel=2, **ENGINE) as llm:
            assert llm.core.runner.state.k_cache.shape[3] == 1  # two KV heads, one per rank
            two = _run(llm, prompts)
        assert rank1.wait(timeout=60) == 0  # it served rank 0's steps and left when rank 0 closed
    finally:
        if rank1.poll() is None:
            rank1.kill()
    _check(one, two)



def test_a_rank_gone_leaves_the_engine_broken_not_hanging(ckpt):
    """Rank 1 killed while serving: the next step fails at once (its connection is closed), and from then on the
    engine says it can run no step (stats().broken, EngineBrokenError on every new request: the server's 503 and
    /health) instead of failing each request its own way."""
    with LLM(str(ckpt("dense")), tensor_parallel=2, **ENGINE) as llm:
        params = SamplingParams(temperature=0, max_tokens=4)
        assert len(llm.generate([[1, 2, 3]], params)[0].token_ids) == 4
        rank1 = llm.core.runner.ranks.procs[0]
        rank1.kill()
        rank1.wait(timeout=30)
        with pytest.raises((RuntimeError, TensorParallelError)):  # gloo's own error, or ours from the channel
            llm.generate([[1, 2, 3]], params)
        assert llm.core.stats().broken
        with pytest.raises(EngineBrokenError, match="restart the server"):
            llm.generate([[4, 5]], params)

def test_a_rank_that_cannot_load_stops_them_all(ckpt, tmp_path):
    """A config the checkpoint does not match: every rank refuses its slices, rank 0 raises its own error and
    rank 1 leaves (nobody waits in a collective)."""
    bad = tmp_path / "bad"
    shutil.copytree(ckpt("dense"), bad)
    raw = json.loads((bad / "config.json").read_text())
    raw["text_config"]["intermediate_size"] = 64
    (bad / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="down_proj.weight' has shape \\[64, 96\\], expected 64 along dim 1"):
        LLM(str(bad), tensor_parallel=2, **ENGINE)
