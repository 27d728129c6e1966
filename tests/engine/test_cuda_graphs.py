"""The static padded batches of the CUDA-graph path (engine/cuda_graphs.py), run eagerly on the CPU: decode through
them equals the unpadded path token for token, across page-table widths and lane buckets; the filler rows of a
padded lane touch only the scratch page and slot. (The speculative verify/draft batches: test_spec_decode.py;
the captured graphs themselves: tests/gpu/test_engine_gpu.py.)"""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.batch import SeqChunk
from hinfer.engine import cuda_graphs
from hinfer.engine.cuda_graphs import SCRATCH_PAGE, SCRATCH_SLOT, StepGraphs, page_widths
from hinfer.engine.protocol import GenerationRequest
from hinfer.sampling_params import SamplingParams as SP


def _run(core, prompts, n):
    for i, p in enumerate(prompts):
        core.add(GenerationRequest(f"r{i}", p, SP(temperature=0, max_tokens=n, ignore_eos=True)))
    out = {f"r{i}": [] for i in range(len(prompts))}
    while core.has_work:
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
    return out


@pytest.mark.parametrize("host_buffers", [1, 2])
def test_decode_through_static_batches_equals_eager(make_engine_core, monkeypatch, host_buffers):
    """With two host buffers (the GPU's staging) the fields are staged in each in turn, page-table rows tracked per
    buffer: lanes that come and go in a bucket must find their own rows in whichever buffer is staged."""
    monkeypatch.setattr(cuda_graphs, "HOST_BUFFERS", host_buffers)
    rng = random.Random()
    # 3 lanes -> buckets 1, 2, 3; max_context 512 at page 16 -> one width (32 pages); lengths vary
    prompts = [[rng.randrange(1, 1024) for _ in range(n)] for n in (1, 9, 40, 75, 3)]
    plain = _run(make_engine_core(max_concurrency=3, prefill_chunk=16), prompts, 20)
    core = make_engine_core(max_concurrency=3, prefill_chunk=16)
    core.runner.capture_graphs(3, core.ecfg.max_context, capture=False)
    assert [g.buckets for g in core.runner.graphs] == [[1, 2, 3]]
    assert _run(core, prompts, 20) == plain


def test_page_widths():
    assert page_widths(8192, 64) == [64, 128]
    assert page_widths(131072, 64) == [64, 512, 2048]
    assert page_widths(1000, 16) == [63]


def test_fillers_write_only_scratch(tiny_model):
    """Stage a verify batch of two lanes (3 and 1 real tokens of t = 4) in a 3-lane bucket and read it back."""
    from hinfer.model.state import ModelState, StateShape

    cfg, model = tiny_model
    state = ModelState(cfg, StateShape(20, 16, 12, torch.float32, torch.float32), "cpu")
    g = StepGraphs(model, state, 3, 8, tokens_per_lane=4, verify=True)
    chunks = [SeqChunk([5, 6, 7], 30, [3, 4, 5], 2, gdn_step_slots=[6, 7, 8], all_logits=True),
              SeqChunk([9], 16, [9, 10], 4, gdn_step_slots=[10], all_logits=True)]  # fmt: skip
    g._stage(chunks, 3)
    b = g._batch(3)
    assert b.input_ids.tolist() == [5, 6, 7, 7, 9, 9, 9, 9, 0, 0, 0, 0]
    assert b.positions.tolist()[:8] == [30, 31, 32, 33, 16, 17, 18, 19]
    scratch = SCRATCH_PAGE * 16
    assert b.slot_mapping.tolist() == [4 * 16 + 14, 4 * 16 + 15, 5 * 16 + 0, scratch,
                                       10 * 16 + 0, scratch, scratch, scratch] + [scratch] * 4  # fmt: skip
    assert b.gdn_step_slots.tolist() == [[6, 7, 8, SCRATCH_SLOT], [10] + [SCRATCH_SLOT] * 3, [SCRATCH_SLOT] * 4]
    assert b.gdn_slots.tolist() == [2, 4, SCRATCH_SLOT]
    assert b.cached_lens.tolist() == [30, 16, 0] == b.cached_lens_cpu
    assert b.q_lens_cpu == [4, 4, 4] and b.cu_q_lens.tolist() == [0, 4, 8, 12]
    assert b.page_table.tolist() == [[3, 4, 5, 0, 0, 0, 0, 0], [9, 10, 0, 0, 0, 0, 0, 0], [0] * 8]
    assert g.fits(chunks) and not g.fits([SeqChunk([1], 16 * 8 - 3, list(range(8)), 1)])


def test_graph_pool_per_engine_state(monkeypatch):
    """Graphs of one engine share a pool; a later engine gets a fresh one (a pool whose graphs all died cannot be
    captured into again)."""
    import gc
    import itertools

    from hinfer.engine import cuda_graphs

    ids = itertools.count()
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(ids))

    class State:  # stands in for ModelState: hashable by identity, weakly referenced
        pass

    a, b = State(), State()
    assert cuda_graphs.shared_pool(a) == cuda_graphs.shared_pool(a) == 0
    assert cuda_graphs.shared_pool(b) == 1
    del a
    gc.collect()
    assert len([s for s in cuda_graphs._POOLS if isinstance(s, State)]) == 1
