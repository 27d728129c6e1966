"""`hinfer bench --spec mtp --forced-acceptance p` on the CPU tiny config: the drafter proposes the recorded
greedy continuation (recorded by the speculative engine with adaptive K off) with probability p, output stays
the recorded output, and acceptance follows p."""

from __future__ import annotations

import torch

from hinfer.bench.forced import forced_sweep, forced_table
from hinfer.config import EngineConfig
from hinfer.engine.factory import resolve_engine_config


def test_forced_acceptance_rows(tiny_model, tokenizer):
    torch.manual_seed(0)
    cfg, model = tiny_model
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", spec="mtp", max_concurrency=2, max_context=256,
                                                   page_size=16, spec_draft_cost=0.3))  # fmt: skip
    rows = forced_sweep([0.0, 1.0], [3], [1, 2], 24, cfg, ecfg, model, tokenizer, {"gpu": "cpu"})
    assert [(r["concurrency"], r["forced_acceptance"]) for r in rows] == [(1, 0.0), (1, 1.0), (2, 0.0), (2, 1.0)]
    for r in rows:
        assert r["identical_to_recorded"] and r["tok_s"] > 0 and r["plain_tok_s"] > 0 and r["adaptive"]
        assert r["recorded_equals_plain"]  # fp32 on the CPU: verification and plain decode agree
        if r["forced_acceptance"] == 1.0:
            assert r["measured_acceptance"] == 1.0 and r["tokens_per_round"] > 3 and r["plain_steps"] == 0
        else:
            assert r["measured_acceptance"] == 0.0 and r["plain_steps"] > 3 * r["verify_steps"]
    text = "\n".join(forced_table(rows))
    assert "| 3 | 2 | 1.0 | 1.00 |" in text and "adaptive K on" in text and "prefill out" in text


def test_bench_cli_takes_forced_acceptance():
    from hinfer.cli.main import build_parser

    args = build_parser().parse_args(["bench", "m", "--spec", "mtp", "--forced-acceptance", "0.5,0.9"])
    assert args.forced_acceptance == [0.5, 0.9] and args.spec_adaptive


def test_sharpened_logits_scale_then_restore_exactly():
    from hinfer.bench.forced import sharpened_logits

    w = torch.randn(64, 32, generator=torch.Generator().manual_seed(0)).bfloat16()
    before = w.clone()

    class Model:
        lm_head = w

    with sharpened_logits(Model(), 8.0):
        assert torch.equal(w, before * 8)
    assert torch.equal(w, before)


def test_forced_drafter_keeps_the_inner_drafters_early_pass():
    """The decoder queues the drafter's pass over a verified round (and the next round's drafts) before reading the
    acceptance only where the drafter has `prelaunch`: the forced drafter passes the MTP drafter's on, so its
    timing is the real path's."""
    from hinfer.bench.forced import ForcedDrafter

    class Inner:
        def prelaunch(self, *a):
            return True

        def draft(self, jobs):
            return [None] * len(jobs)

    inner = Inner()
    assert ForcedDrafter(inner, {}, 0.5, 10).prelaunch.__self__ is inner
    assert getattr(ForcedDrafter(object(), {}, 0.5, 10), "prelaunch", None) is None


def test_timed_run_times_decode_from_the_last_lanes_first_token():
    """The decode window opens after the step in which every request has its first token (prefill out) and counts
    only the tokens after it."""
    from types import SimpleNamespace

    from hinfer.bench.forced import requests, timed_run
    from hinfer.engine.protocol import TokenEvent

    reqs = requests(2, 4, 100)
    a, b = reqs[0].request_id, reqs[1].request_id
    script = [[TokenEvent(a, [1], "")], [TokenEvent(a, [2, 3], ""), TokenEvent(b, [7], "")],
              [TokenEvent(a, [4], ""), TokenEvent(b, [8, 9], "")], [TokenEvent(b, [10], "")]]  # fmt: skip

    class Core:
        runner = SimpleNamespace(device=torch.device("cpu"))

        def __init__(self):
            self.steps: list = []

        def add(self, req):
            if not self.steps:
                self.steps = list(script)

        @property
        def has_work(self):
            return bool(self.steps)

        def step(self):
            return self.steps.pop(0)

    t = timed_run(Core(), reqs, runs=2)
    assert t.outputs == {a: [1, 2, 3, 4], b: [7, 8, 9, 10]}
    assert t.decode_tokens == 4 and 0 < t.decode_seconds <= t.seconds and t.decode_tok_s > 0
