"""Host CPU cost of one engine decode step at 8 lanes, without the model: scheduling, batch metadata, stop
rules, detokenization, event building (EngineCore.step with a runner whose forward is free), and the CUDA-graph
staging of the step's metadata (StepGraphs._stage, measured on CPU tensors). Target: < 0.3 ms per step.

    python bench/scheduler_cost.py
"""

from __future__ import annotations

import statistics
import time

import torch

from hinfer.batch import SeqChunk
from hinfer.config import EngineConfig, ModelConfig, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.cuda_graphs import StepGraphs
from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.runner import ModelRunner, StepResult
from hinfer.fixtures import config_dir, tokenizer_dir
from hinfer.model.state import ModelState, StateShape
from hinfer.sampling_params import SamplingParams
from hinfer.tokenizer import Tokenizer


class FreeRunner(ModelRunner):
    """Everything ModelRunner.step does on the host except the forward and the sampler kernels."""

    def __init__(self, state: ModelState) -> None:
        self.state, self.graphs, self.device = state, None, torch.device("cpu")
        self.sampler = _NoSampler()
        self._tok = 0

    def step(self, chunks) -> StepResult:
        for c in chunks:
            c.seq.num_cached += c.num_tokens
        sampled = [c for c in chunks if c.samples]
        self._tok = (self._tok + 7919) % 200_000
        ids = [(self._tok + i * 31) % 200_000 + 1000 for i in range(len(sampled))]
        return StepResult(ids, [None] * len(ids), [None] * len(ids))


class _NoSampler:
    def add_row(self, row) -> None:
        pass


def main(lanes: int = 8, steps: int = 2000) -> None:
    cfg: ModelConfig = load_model_config(config_dir("qwen3.6-27b"))
    ecfg = EngineConfig(max_concurrency=lanes, max_context=32768, device="cpu", dtype="bf16")
    state = ModelState.__new__(ModelState)  # the pool's bookkeeping only: no tensors needed without a model
    state.cfg, state.page_size = cfg, 64
    state.shape = StateShape(num_pages=lanes * 512 + 1, page_size=64, num_slots=lanes + 1,
                             kv_dtype=torch.bfloat16, dtype=torch.bfloat16)
    state.reset_slots = lambda slots: None
    core = EngineCore(FreeRunner(state), Tokenizer.from_dir(tokenizer_dir()), ecfg, list(cfg.eos_token_ids))
    for i in range(lanes):
        core.add(GenerationRequest(f"r{i}", list(range(1000, 1100)), SamplingParams(max_tokens=10**6, ignore_eos=True,
                                                                                     stop=["</stop>"])))
    for _ in range(20):
        core.step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        core.step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times) * 1e3

    # graph staging: the per-step metadata copy into the static buffers (CPU tensors stand in for the device)
    fake_state = type("S", (), {"k_cache": torch.zeros(1), "page_size": 64})()
    graphs = StepGraphs(None, fake_state, lanes, 32768 // 64)  # type: ignore[arg-type]
    chunks = [SeqChunk([5], 100 + i, list(range(1 + 512 * i, 1 + 512 * (i + 1))), i + 1) for i in range(lanes)]
    st = []
    for _ in range(steps):
        t0 = time.perf_counter()
        graphs._stage(chunks, lanes)
        st.append(time.perf_counter() - t0)
    stage = statistics.median(st) * 1e3
    print(f"lanes {lanes}: EngineCore.step host cost {med:.3f} ms (median of {steps}); "
          f"graph metadata staging {stage:.3f} ms; total {med + stage:.3f} ms")


if __name__ == "__main__":
    main()
