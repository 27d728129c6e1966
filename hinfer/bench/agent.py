"""`hinfer bench --agent`: multi-turn agent conversations (agent_workload.py) on the engine the server runs
(EngineCore: scheduler, chunked prefill, prefix cache, sampler), once with the prefix cache on and once off, over
the same model in one process. Each conversation sends its next turn as soon as the previous answer is complete
(a closed loop), so the N conversations share the engine as N agents would.

Reported per mode: total time, time to first token (median, p90, and the median of each turn index), prompt
tokens computed vs taken from the cache, host restores of GDN checkpoints. A table on stdout, a JSON in
bench/results/ (GPU name, commit, command). With a config the weights are random at the real shapes (as in
`hinfer bench`); --device cpu runs a tiny config as a smoke test whose timings mean nothing.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from hinfer.bench import measure
from hinfer.bench.agent_workload import AgentWorkload, longest_conversation
from hinfer.bench.run import build_model, git_commit, resolve_model, truncate_layers
from hinfer.config import EngineConfig, apply_rope_scaling, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.fixtures import tokenizer_dir
from hinfer.sampling_params import SamplingParams
from hinfer.tokenizer import Tokenizer

log = logging.getLogger("hinfer.bench")

MODES = ("on", "off")  # prefix cache on / off


@dataclass
class AgentSpec:
    model: str
    weights: str = "bf16"
    workload: AgentWorkload = field(default_factory=AgentWorkload)
    modes: list[str] = field(default_factory=lambda: list(MODES))
    layers: int | None = None
    out_dir: Path = Path("bench/results")
    command: str = ""  # the command line, recorded in the JSON


@dataclass
class Turn:
    conversation: int
    turn: int
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float  # submitted -> first token out of the engine
    latency_s: float  # submitted -> answer complete
    answer: list[int] = field(repr=False, default_factory=list)


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    s = sorted(xs)
    if not s:
        return 0.0
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def drive(core: EngineCore, messages: list[list[list[int]]], answer_tokens: int) -> tuple[list[Turn], float]:
    """Every conversation's turns through `core`, each sent when its previous answer is done. -> (turns, seconds)."""
    params = SamplingParams(temperature=0, max_tokens=answer_tokens, ignore_eos=True)
    history: list[list[int]] = [[] for _ in messages]
    live: dict[str, tuple[int, int, float]] = {}  # request id -> (conversation, turn, submitted)
    first: dict[str, float] = {}
    answers: dict[str, list[int]] = {}
    done: list[Turn] = []

    def submit(c: int, t: int) -> None:
        history[c] += messages[c][t]
        rid = f"c{c}-t{t}"
        core.add(GenerationRequest(rid, list(history[c]), params))
        live[rid], answers[rid] = (c, t, time.perf_counter()), []

    t0 = time.perf_counter()
    for c in range(len(messages)):
        submit(c, 0)
    while live:
        events = core.step()  # returns once the step's tokens are on the host: the clock below is honest
        now = time.perf_counter()
        for ev in events:
            rid = ev.request_id
            if ev.token_ids and rid not in first:
                first[rid] = now
            answers[rid] += ev.token_ids
            if ev.finish_reason is None:
                continue
            if ev.finish_reason != "length":
                raise RuntimeError(f"{rid} ended with {ev.finish_reason!r}")
            c, t, sent = live.pop(rid)
            done.append(Turn(c, t, ev.usage.prompt_tokens, ev.usage.cached_tokens, first[rid] - sent, now - sent,
                             answers.pop(rid)))  # fmt: skip
            history[c] += done[-1].answer
            if t + 1 < len(messages[c]):
                submit(c, t + 1)
    return done, time.perf_counter() - t0


def warm_up(core: EngineCore, vocab: int) -> None:
    """Two turns of one conversation first (kernel compilation and autotuning, of the cached-prefix path too,
    stay out of the timings), then an empty cache."""
    n = min(core.ecfg.prefill_chunk, 1000, core.ecfg.max_context // 2)
    prompt = [1 + (i * 7919) % (vocab - 1) for i in range(n)]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    for turn in range(2):
        core.add(GenerationRequest(f"warmup{turn}", prompt, params))
        while core.has_work:
            for ev in core.step():
                prompt = prompt + ev.token_ids
        prompt = prompt + prompt[:50]
    core.clear_prefix_cache()


def summarize(turns: list[Turn], total_s: float, n_turns: int, host_restores: int, host_kv_restores: int) -> dict:
    prompt = sum(t.prompt_tokens for t in turns)
    cached = sum(t.cached_tokens for t in turns)
    ttft = [t.ttft_s for t in turns]
    return {
        "total_s": total_s, "turns": len(turns), "ttft_median_s": percentile(ttft, 0.5),
        "ttft_p90_s": percentile(ttft, 0.9), "prompt_tokens": prompt, "computed_tokens": prompt - cached,
        "cached_tokens": cached, "cached_fraction": cached / prompt if prompt else 0.0,
        "answer_tokens": sum(len(t.answer) for t in turns), "host_restores": host_restores,
        "host_kv_page_restores": host_kv_restores,
        "ttft_median_by_turn_s": [percentile([t.ttft_s for t in turns if t.turn == i], 0.5) for i in range(n_turns)],
        "prompt_tokens_by_turn": [max((t.prompt_tokens for t in turns if t.turn == i), default=0)
                                  for i in range(n_turns)],
    }  # fmt: skip


def run_agent_bench(spec: AgentSpec, ecfg: EngineConfig) -> dict:
    """Both modes over one model. -> the result written to JSON: {"meta", "runs": {mode: summary}, "turns"}."""
    if ecfg.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("hinfer bench --agent needs a CUDA GPU (or --device cpu for a smoke run of a tiny config)")
    dev = torch.device("cpu" if ecfg.device == "cpu" else "cuda")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path, is_ckpt = resolve_model(spec.model)
    cfg = truncate_layers(apply_rope_scaling(load_model_config(path), ecfg.rope_scaling), spec.layers)
    tok = Tokenizer.from_dir(tokenizer_dir())
    vocab = min(cfg.vocab_size, tok.vocab_size)
    w = spec.workload
    messages = w.messages(vocab)
    need = longest_conversation(messages, w.answer_tokens) + ecfg.page_size
    cfg = replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, need))
    ecfg = replace(ecfg, device=dev.type, dtype="bf16" if dev.type == "cuda" else "fp32",
                   max_concurrency=w.conversations, max_context=need, spec=None)  # fmt: skip
    model = build_model(path, is_ckpt, cfg, spec.weights, dev=dev, dtype=dtype)
    runs: dict[str, dict] = {}
    answers: dict[str, dict[tuple[int, int], list[int]]] = {}
    records: dict[str, list[dict]] = {}
    settings: dict[str, dict] = {}
    for mode in spec.modes:
        mcfg = resolve_engine_config(cfg, replace(ecfg, prefix_cache=mode == "on"))
        core = make_core(cfg, model, tok, mcfg, dev)
        warm_up(core, vocab)
        extra0 = core.stats().extra
        measure.sync(dev)
        turns, total_s = drive(core, messages, w.answer_tokens)
        st = core.runner.state.shape
        settings[mode] = {"checkpoint_slots": st.checkpoint_slots, "host_checkpoints": st.host_checkpoints,
                          "kv_pages": st.num_pages, "host_kv_pages": st.host_kv_pages}  # fmt: skip
        extra = core.stats().extra
        runs[mode] = summarize(turns, total_s, w.turns, *(extra.get(k, 0) - extra0.get(k, 0) for k in
                                                          ("prefix_host_restores", "prefix_host_kv_restores")))
        answers[mode] = {(t.conversation, t.turn): t.answer for t in turns}
        records[mode] = [{k: v for k, v in asdict(t).items() if k != "answer"} for t in turns]
        log.info("prefix cache %s: %.2f s, TTFT median %.3f s p90 %.3f s, %d of %d prompt tokens cached", mode,
                 total_s, runs[mode]["ttft_median_s"], runs[mode]["ttft_p90_s"], runs[mode]["cached_tokens"],
                 runs[mode]["prompt_tokens"])  # fmt: skip
        del core
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if "on" in answers and "off" in answers:  # greedy: the cache should not change answers (bf16 near-ties may)
        same = sum(answers["on"][k] == answers["off"].get(k) for k in answers["on"])
        runs["on"]["answers_equal_to_off"] = same / max(1, len(answers["on"]))
    meta = {
        "kind": "agent", "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "commit": git_commit(), "command": spec.command, "model": str(spec.model), "layers": cfg.num_hidden_layers,
        "weights": spec.weights, "kv_dtype": ecfg.kv_dtype, "page_size": ecfg.page_size,
        "prefill_chunk": ecfg.prefill_chunk, "max_context": need, "torch": torch.__version__,
        "python": platform.python_version(), "workload": asdict(w) | {"opening_tokens": w.opening_tokens},
        "engine": settings,
    }  # fmt: skip
    result = {"meta": meta, "runs": runs, "turns": records}
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    out = spec.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-agent-{Path(str(spec.model)).name}-{spec.weights}.json"
    out.write_text(json.dumps(result, indent=1))
    log.info("wrote %s", out)
    return result


def agent_table(result: dict) -> str:
    runs = result["runs"]
    lines = ["| prefix cache | total s | turns | TTFT median s | TTFT p90 s | prompt tokens | computed | cached | "
             "host restores (checkpoints, KV pages) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for mode, r in runs.items():
        lines.append(f"| {mode} | {r['total_s']:.2f} | {r['turns']} | {r['ttft_median_s']:.3f} | "
                     f"{r['ttft_p90_s']:.3f} | {r['prompt_tokens']:,} | {r['computed_tokens']:,} | "
                     f"{r['cached_tokens']:,} ({r['cached_fraction']:.0%}) | {r['host_restores']}, "
                     f"{r['host_kv_page_restores']} |")  # fmt: skip
    modes = list(runs)
    lines += ["", "| turn | prompt tokens | " + " | ".join(f"TTFT median s ({m})" for m in modes) + " |",
              "|---|---|" + "---|" * len(modes)]  # fmt: skip
    first = runs[modes[0]]
    for i, n in enumerate(first["prompt_tokens_by_turn"]):
        lines.append(f"| {i} | {n:,} | " + " | ".join(f"{runs[m]['ttft_median_by_turn_s'][i]:.3f}" for m in modes)
                     + " |")  # fmt: skip
    return "\n".join(lines)
