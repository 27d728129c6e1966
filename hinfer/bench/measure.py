"""Decode and prefill measurements on the engine's own path (ModelRunner: CUDA graphs + sampler; eager prefill).

Decode at depth D does not prefill D tokens first: each lane's KV pages and GDN state hold random values and its
cached length is set to D, so every step reads exactly what a real step at that depth reads (the attention
kernels read lengths from device tensors). Prefill runs the real chunked forward from an empty state.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from hinfer.engine.core import EngineCore
from hinfer.engine.runner import ModelRunner
from hinfer.engine.sampler import RowState
from hinfer.engine.sequence import ScheduledChunk, Sequence, Status
from hinfer.model.state import RESERVED_PAGES, RESERVED_SLOTS
from hinfer.sampling_params import SamplingParams

log = logging.getLogger("hinfer.bench")
PROGRESS_S = 30.0  # seconds between progress lines of a long prefill


@dataclass
class Timing:
    tok_s: float
    ms_per_step: float
    steps: int


# `hinfer bench --sampling`: the sampler's paths (engine/sampler.py). qwen: the Qwen3.5 / 3.6 checkpoints'
# generation_config (the server's default for fields a request leaves out): 20 candidates; top-p: the whole
# vocabulary sorted; full: the race over the whole vocabulary, no filter
SAMPLING = {
    "greedy": SamplingParams(temperature=0.0),
    "qwen": SamplingParams(temperature=1.0, top_k=20, top_p=0.95),
    "top-p": SamplingParams(temperature=0.7, top_p=0.95),
    "full": SamplingParams(temperature=1.0),
}


def _lanes(runner: ModelRunner, lanes: int, depth: int, steps: int, draft_slots: int = 0,
           sampling: str = "greedy") -> list[Sequence]:  # fmt: skip
    ps = runner.state.page_size
    per = -(-(depth + steps + 1) // ps)
    if RESERVED_SLOTS + lanes * (1 + draft_slots) > runner.state.shape.num_slots:
        raise ValueError(f"GDN state pool too small for {lanes} lanes with {draft_slots} draft slots")
    if RESERVED_PAGES + lanes * per > runner.state.shape.num_pages:
        raise ValueError(f"KV pool too small for {lanes} lanes at depth {depth}")
    seqs = []
    for i in range(lanes):
        params = replace(SAMPLING[sampling], max_tokens=steps + 1, ignore_eos=True)
        s = Sequence(f"bench{i}", [1] * depth, params, seed=i)
        s.num_cached = depth
        s.output_ids = [100 + i]
        s.pages = list(range(RESERVED_PAGES + i * per, RESERVED_PAGES + (i + 1) * per))
        s.slot = RESERVED_SLOTS + i
        first = RESERVED_SLOTS + lanes + i * draft_slots
        s.draft_slots = list(range(first, first + draft_slots))
        s.status = Status.RUNNING
        s.lane = i
        s.sampler_state = RowState(params, i, slot=i, prompt_ids=[])
        runner.sampler.add_row(s.sampler_state)
        seqs.append(s)
    return seqs


@contextmanager
def no_gc() -> Iterator[None]:
    """Python's cyclic collector held off over a timed window (it runs after it): a collection of the engine's
    heap inside a short window is a pause the steady state does not have, and one of the causes of spread
    between runs."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode(runner: ModelRunner, lanes: int, depth: int, steps: int = 64, warmup: int = 4, ahead: bool = True,
           sampling: str = "greedy") -> Timing:  # fmt: skip
    """Plain decode steps as the engine runs them: a step ahead (each queued before the previous one's tokens are
    read, EngineCore's --decode-ahead) where the runner can, else each step read before the next; every lane
    sampling as SAMPLING[sampling] says."""
    seqs = _lanes(runner, lanes, depth, steps + warmup, sampling=sampling)
    chunks = [ScheduledChunk(s, 1, True) for s in seqs]
    ahead = ahead and runner.runs_ahead and runner.can_run_ahead(chunks)
    inflight = None

    def one_step() -> None:
        nonlocal inflight
        if ahead:
            nxt = runner.launch(chunks, inflight)
            if inflight is not None:
                for s, t in zip(seqs, inflight.read()[0]):
                    s.output_ids.append(t)
            inflight = nxt
            return
        res = runner.step(chunks)
        for s, t in zip(seqs, res.token_ids):
            s.output_ids.append(t)

    for _ in range(warmup):
        one_step()
    sync(runner.device)
    with no_gc():
        t0 = time.perf_counter()
        for _ in range(steps):
            one_step()
        sync(runner.device)
        dt = time.perf_counter() - t0
    return Timing(lanes * steps / dt, dt / steps * 1e3, steps)


@dataclass
class SpecTiming:
    ms_per_round: float  # the median round (start to start; the last one to the final sync)
    rounds: int
    tokens_per_round: float  # measured; with random weights the drafts are almost never accepted
    drafted_per_round: float
    chained: float  # share of rounds drafted before the acceptance read (MTPDrafter._chain)
    ms_mean: float = 0.0  # the window's mean round
    ms_p10: float = 0.0  # the 10th and 90th percentile rounds: the spread inside the window
    ms_p90: float = 0.0


def spec_rounds(core: EngineCore, lanes: int, depth: int, rounds: int = 32, warmup: int = 4,
                sampling: str = "greedy") -> SpecTiming:  # fmt: skip
    """Speculative rounds at `lanes` lanes and context `depth` on the engine's path (SpecDecoder: verify graph,
    acceptance, then the MTP drafter's graphs), every lane drafting K tokens each round. The round's cost does
    not depend on how many drafts are accepted (verify always runs K + 1 rows, the drafter's first pass is padded
    to K + 1 rows), so random weights time it truthfully; only their acceptance is meaningless. Each round is
    timed from its start to the next one's (a round's acceptance read waits for its verification, so the rounds
    of the window are the engine's steady period); the figure is their median, with the mean and the 10th / 90th
    percentiles beside it."""
    spec = core.spec
    assert spec is not None, "the core was built without --spec"
    assert spec.policy is None, "rounds at a fixed K: build the core with spec_adaptive=False"
    k = spec.k
    seqs = _lanes(core.runner, lanes, depth, (rounds + warmup + 1) * (k + 1), draft_slots=k + 1,
                  sampling=sampling)

    def one_round() -> int:
        chunks = [ScheduledChunk(s, 1, True) for s in seqs]
        made = 0
        for o in spec.step(chunks):
            o.seq.output_ids += o.token_ids
            made += len(o.token_ids)
        spec.after_step()
        return made

    for _ in range(warmup):
        one_round()
    drafted0, chained0 = spec.drafted, getattr(spec.drafter, "chained", 0)
    sync(core.runner.device)
    made, marks = 0, []
    with no_gc():
        for _ in range(rounds):
            marks.append(time.perf_counter())
            made += one_round()
        sync(core.runner.device)
        marks.append(time.perf_counter())
    ms = sorted((b - a) * 1e3 for a, b in zip(marks, marks[1:]))
    n = rounds * lanes
    chained = (getattr(spec.drafter, "chained", 0) - chained0) / rounds
    return SpecTiming(statistics.median(ms), rounds, made / n, (spec.drafted - drafted0) / n, chained,
                      ms_mean=(marks[-1] - marks[0]) * 1e3 / rounds, ms_p10=ms[len(ms) // 10],
                      ms_p90=ms[min(len(ms) - 1, len(ms) * 9 // 10)])  # fmt: skip


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def prefill(runner: ModelRunner, tokens: int, chunk: int, repeats: int = 2, warmup: bool = True) -> Timing:
    """One sequence of `tokens` random ids, in chunks of `chunk` as the scheduler would run it alone; the best of
    `repeats` timed runs, after one untimed run when `warmup` (Triton compile, allocator). A run longer than
    PROGRESS_S logs its progress every PROGRESS_S seconds (host time, no sync: the host runs at most a few
    chunks ahead of the GPU)."""
    best = None
    first = 0 if warmup else 1
    for r in range(first, repeats + 1):
        s = _lanes(runner, 1, 0, tokens)[0]
        s.prompt_ids = torch.randint(1, runner.model.cfg.vocab_size, (tokens,)).tolist()
        s.output_ids, s.num_cached = [], 0
        runner.state.reset_slots([s.slot])
        sync(runner.device)
        t0 = time.perf_counter()
        shown = t0
        while s.num_cached < tokens:
            n = min(chunk, tokens - s.num_cached)
            runner.step([ScheduledChunk(s, n, s.num_cached + n == tokens)])
            if time.perf_counter() - shown >= PROGRESS_S and s.num_cached < tokens:
                shown = time.perf_counter()
                log.info("prefill %d: %d tokens in %.0f s", tokens, s.num_cached, shown - t0)
        sync(runner.device)
        dt = time.perf_counter() - t0
        if r > 0:
            best = dt if best is None else min(best, dt)
    assert best is not None
    return Timing(tokens / best, best * 1e3, -(-tokens // chunk))
