"""Forced-acceptance benchmark: end-to-end tok/s of speculative decoding at a chosen acceptance rate.

Random weights never accept a draft, so they cannot show what speculation gains. Here the target's own greedy
continuation is recorded first, then the speculative engine runs the same requests with `ForcedDrafter`: the MTP
head still runs (its cost is paid), but each drafted token is replaced by the recorded one with probability p and
by a wrong one otherwise. Each draft is then accepted with probability p, the engine's output stays the recorded
greedy output, and the timing is the real engine's, adaptive K included; a plain run of the same requests is
the baseline.

The continuation is recorded by the speculative engine itself at the same draft count with adaptive K off (the
MTP head's drafts, which random weights reject): every token then comes out of a verification like the ones that
are timed, whose per-row arithmetic does not depend on how many of the drafts before it were accepted (the same
GEMM tiles at a given row count, the GDN state carried in fp32).

Random weights' logits are near-ties that rounding flips between a 1-row decode step and a K+1-row
verification (the bf16 GEMV and tensor-core tiles sum in other orders, and the logits are rounded to bf16);
once the speculative output leaves the recorded one, the recorded continuation is no longer the target's and
every draft misses, so the measured acceptance falls below p (H200, 27B int4, p = 0.8, recorded by a plain run:
0.50 at one lane, 0.61 at eight; bench/RESULTS.md), hence the recording by verification above. The sweep scales the lm_head by a power of two (exact, undone after), as the GPU
identity test does; that sharpens sampling, but a greedy pick and its rounding scale together, so it does not
stop those flips: kernels that sum every row alike whatever the row count (batch invariance) would.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec import Drafter, DraftJob, Proposal
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.sampling_params import SamplingParams
from hinfer.tokenizer import Tokenizer

PROMPT_TOKENS = 16
SHARPEN = 8.0  # lm_head scale during the sweep: a power of two, exact in bf16 and undone exactly


@contextmanager
def sharpened_logits(model: Qwen35ForCausalLM, factor: float = SHARPEN) -> Iterator[None]:
    """Logits times `factor` (an untied lm_head scaled in place); a tied one is left alone."""
    w = model.lm_head
    if w is None:
        yield
        return
    with torch.no_grad():
        w.mul_(factor)
    try:
        yield
    finally:
        with torch.no_grad():
            w.div_(factor)


@dataclass
class ForcedDrafter:
    """Runs the real drafter, then proposes the recorded continuation token by token with probability p."""

    inner: Drafter
    expected: dict[str, list[int]]  # request id -> its greedy output
    p: float
    vocab: int
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        if hasattr(self.inner, "prelaunch"):  # the inner drafter's pass (and chain) queued before the acceptance
            self.prelaunch = self.inner.prelaunch  # read, as in a real run: the timing is the real path's

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        self.inner.draft(jobs)  # the MTP head's forward and draft steps: their cost is part of the figure
        out: list[Proposal | None] = []
        for j in jobs:
            if not j.num_drafts:
                out.append(None)
                continue
            n = len(j.seq.output_ids)
            want = self.expected[j.seq.request_id][n : n + j.num_drafts]
            out.append(Proposal([t if self.rng.random() < self.p else (t + 1) % self.vocab for t in want]))
        return out


def requests(lanes: int, tokens: int, vocab: int) -> list[GenerationRequest]:
    rng = random.Random(1)
    return [GenerationRequest(f"forced{i}", [rng.randrange(1, vocab) for _ in range(PROMPT_TOKENS)],
                              SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
            for i in range(lanes)]  # fmt: skip


@dataclass
class Timed:
    """One timed run: every request's output; the whole run's seconds; the decode window's (from the step in which
    the last request got its first token, so prompts' prefill and the first step's launch stay out) and the
    tokens it produced."""

    outputs: dict[str, list[int]]
    seconds: float
    decode_seconds: float
    decode_tokens: int

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


def timed_run(core, reqs: list[GenerationRequest], runs: int = 2) -> Timed:
    """Run the requests to completion `runs` times (all but the last warm up) and time the last."""
    for _ in range(runs - 1):
        _one_run(core, reqs)
    return _one_run(core, reqs)


def _one_run(core, reqs: list[GenerationRequest]) -> Timed:
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    for r in reqs:
        core.add(replace(r, sampling=replace(r.sampling)))
    if core.runner.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    t_decode, before = None, 0
    while core.has_work:
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
        if t_decode is None and all(out.values()):  # every request has its first token: decode from here
            t_decode, before = time.perf_counter(), sum(map(len, out.values()))
    end = time.perf_counter()
    if t_decode is None:
        return Timed(out, end - t0, 0.0, 0)
    return Timed(out, end - t0, end - t_decode, sum(map(len, out.values())) - before)


def forced_sweep(acceptance: list[float], draft_tokens: list[int], concurrency: list[int], tokens: int,
                 cfg: ModelConfig, ecfg: EngineConfig, model: Qwen35ForCausalLM, tok: Tokenizer,
                 meta: dict) -> list[dict]:  # fmt: skip
    """Rows of kind "spec_forced": per lane count, K and p, end-to-end tok/s beside the plain engine's."""
    with sharpened_logits(model):
        return _sweep(acceptance, draft_tokens, concurrency, tokens, cfg, ecfg, model, tok, meta)


def _sweep(acceptance: list[float], draft_tokens: list[int], concurrency: list[int], tokens: int,
           cfg: ModelConfig, ecfg: EngineConfig, model: Qwen35ForCausalLM, tok: Tokenizer,
           meta: dict) -> list[dict]:  # fmt: skip
    dev = torch.device(ecfg.device)
    vocab = cfg.vocab_size
    rows = []
    for c in concurrency:
        reqs = requests(c, tokens, vocab)
        plain = make_core(cfg, model, tok, resolve_engine_config(cfg, replace(ecfg, spec=None)), dev)
        plain_run = timed_run(plain, reqs)
        del plain
        for k in draft_tokens:
            rec = make_core(cfg, model, tok,
                            resolve_engine_config(cfg, replace(ecfg, draft_tokens=k, spec_adaptive=False)), dev)  # fmt: skip
            expected = timed_run(rec, reqs, runs=1).outputs  # the continuation as verification computes it (untimed)
            del rec
            for p in acceptance:
                core = make_core(cfg, model, tok, resolve_engine_config(cfg, replace(ecfg, draft_tokens=k)), dev)
                core.spec.drafter = ForcedDrafter(core.spec.drafter, expected, p, vocab, seed=c * 100 + k)
                d0, a0, r0 = core.spec.drafted, core.spec.accepted, core.spec.rounds
                run = timed_run(core, reqs)
                st = core.stats().extra
                drafted, accepted, rounds = st["spec_drafted"] - d0, st["spec_accepted"] - a0, st["spec_rounds"] - r0
                rows.append(meta | {
                    "kind": "spec_forced", "concurrency": c, "draft_tokens": k, "forced_acceptance": p,
                    "adaptive": ecfg.spec_adaptive, "tokens": c * tokens, "tok_s": run.decode_tok_s,
                    "plain_tok_s": plain_run.decode_tok_s, "speedup": run.decode_tok_s / plain_run.decode_tok_s,
                    "e2e_tok_s": c * tokens / run.seconds, "plain_e2e_tok_s": c * tokens / plain_run.seconds,
                    "measured_acceptance": accepted / drafted if drafted else None,
                    "tokens_per_round": (accepted + rounds) / rounds if rounds else None,
                    "verify_steps": st["spec_verify_steps"], "plain_steps": st["spec_plain_steps"],
                    "identical_to_recorded": run.outputs == expected,
                    "recorded_equals_plain": expected == plain_run.outputs,
                })  # fmt: skip
                del core
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def forced_table(rows: list[dict]) -> list[str]:
    rows = [r for r in rows if r["kind"] == "spec_forced"]
    if not rows:
        return []
    out = ["", "| K | C | forced p | measured acceptance | tokens/round | tok/s | plain tok/s | speedup | with prefill "
           "(plain) | verify/plain steps | output = recorded | recorded = plain |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        acc = "-" if r["measured_acceptance"] is None else f"{r['measured_acceptance']:.2f}"
        tpr = "-" if r["tokens_per_round"] is None else f"{r['tokens_per_round']:.2f}"
        out.append(f"| {r['draft_tokens']} | {r['concurrency']} | {r['forced_acceptance']} | {acc} | {tpr} | "
                   f"{r['tok_s']:.1f} | {r['plain_tok_s']:.1f} | {r['speedup']:.2f}x | {r['e2e_tok_s']:.1f} "
                   f"({r['plain_e2e_tok_s']:.1f}) | {r['verify_steps']}/"
                   f"{r['plain_steps']} | {r['identical_to_recorded']} | {r['recorded_equals_plain']} |")  # fmt: skip
    out.append(f"\nthe real engine loop ({PROMPT_TOKENS}-token prompts, greedy; adaptive K "
               f"{'on' if rows[0]['adaptive'] else 'off'}); the drafter proposes the recorded continuation (greedy, "
               "recorded by verification) with probability p, so p is the per-draft acceptance; tok/s from the step in "
               "which the last lane got its first token to the end (prompts' prefill out), `with prefill` over the "
               "whole run")
    return out
