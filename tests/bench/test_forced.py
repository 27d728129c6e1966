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
    assert "| 3 | 2 | 1.0 | 1.00 |" in text and "adaptive K on" in text


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
