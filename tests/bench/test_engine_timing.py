"""DecodeLanes (hinfer/bench/engine_timing.py) against a stand-in core: a step that only queues the next one
ahead (the GPU's decode a step ahead) yields no tokens, and the window still counts one token a lane a step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from hinfer.bench.engine_timing import DecodeLanes
from hinfer.engine.protocol import TokenEvent


class AheadCore:
    """Prefill gives every lane its first token; the first decode step after it only launches (no tokens), every
    later one lands a token a lane, as EngineCore does when its runner runs ahead."""

    def __init__(self, stall_from: int = 0) -> None:
        self.ids: list[str] = []
        self.calls = 0
        self.primed = False
        self.stall_from = stall_from  # from this call on no tokens come
        self.runner = SimpleNamespace(device=torch.device("cpu"))
        self.has_work = False

    def add(self, req) -> None:
        self.ids.append(req.request_id)

    def abort(self, rid: str) -> None:
        pass

    def step(self) -> list[TokenEvent]:
        self.calls += 1
        if self.calls == 1:  # the prefill step samples each lane's first token
            return [TokenEvent(rid, [1], "") for rid in self.ids]
        if not self.primed or (self.stall_from and self.calls >= self.stall_from):
            self.primed = True
            return []
        return [TokenEvent(rid, [2], "") for rid in self.ids]


def test_a_step_that_only_queues_ahead_is_not_a_stall():
    core = AheadCore()
    lanes = DecodeLanes(core, [[5, 6], [7]], max_tokens=64, tag="t")
    assert lanes.window(steps=8, warmup=1) > 0
    assert all(len(toks) == 1 + 9 for toks in lanes.tokens.values())  # the first token, then one a step


def test_a_lane_that_stops_making_tokens_is_reported():
    core = AheadCore(stall_from=6)
    lanes = DecodeLanes(core, [[5]], max_tokens=64, tag="t")
    with pytest.raises(RuntimeError, match="0 tokens from 1 decoding lanes"):
        lanes.window(steps=8, warmup=0)
