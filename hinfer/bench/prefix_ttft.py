"""`hinfer bench --prefix-ttft N`: the time to first token of a conversation's second turn, from the prefix cache
in GPU memory and in host RAM, against the same run's cold figure; and decode tok/s with the cache on and off.

One process, two EngineCores over one model (the engine the server steps: scheduler, chunked prefill, prefix
cache, host tiers, sampler, CUDA graphs), one with the prefix cache and one without:
1. cold: turn 1, a random N-token history, on an empty cache (cleared before each repeat);
2. GPU: turn 2 = the same history + `new_tokens` new ones (different each repeat), the history's KV pages and
   its turn-boundary GDN checkpoint still on the device;
3. host: the same after `EngineCore.spill_prefix_cache()` moved every cached page and checkpoint to the host
   tiers (what churn by other prompts does one eviction at a time), so turn 2 restores them from host RAM;
4. off: the turn-2 prompts of (2) on the cache-off core (a cold prefill of the whole prompt);
5. decode: the same greedy lanes on both cores, timed in alternating windows.
Every request's cached-token count and host restores are checked against what the cache must do. A table on
stdout and a JSON in bench/results/ (GPU name, commit, command). With a config the weights are random at the real
shapes; --device cpu runs a tiny config as a smoke test whose timings mean nothing.
"""

from __future__ import annotations

import json
import logging
import platform
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from hinfer.bench import measure
from hinfer.bench.agent import percentile, warm_up
from hinfer.bench.engine_timing import DecodeLanes, FirstToken, first_token
from hinfer.bench.run import build_model, git_commit, resolve_model, truncate_layers
from hinfer.config import EngineConfig, ModelConfig, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.memory_plan import gdn_slot_bytes, kv_page_bytes
from hinfer.fixtures import tokenizer_dir
from hinfer.tokenizer import Tokenizer

log = logging.getLogger("hinfer.bench")

TARGETS = {"gpu_ttft_s": 0.150, "host_ttft_s": 0.400, "decode_on_over_off": 0.98}  # 27B shapes on an H200
DECODE_WARMUP = 4  # untimed steps at the start of each decode window


@dataclass
class PrefixTtftSpec:
    model: str
    history_tokens: int = 32768  # turn 1: the conversation so far
    new_tokens: int = 200  # turn 2 adds these
    repeats: int = 5  # TTFT samples per case; decode windows per mode and lane count
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8])  # decode lanes
    decode_prompt: int = 1000  # prompt tokens of each decoding lane
    decode_steps: int = 64  # timed steps per decode window
    weights: str = "bf16"
    layers: int | None = None
    seed: int = 0
    out_dir: Path = Path("bench/results")
    command: str = ""  # the command line, recorded in the JSON


class Prompts:
    """Random token ids (seeded): a turn-1 history, turn-2 tails, decode prompts; separate ones to warm up."""

    def __init__(self, spec: PrefixTtftSpec, vocab: int) -> None:
        rng = random.Random(spec.seed)
        self._rng, self._vocab = rng, vocab
        self.history = self.ids(spec.history_tokens)
        self.warm_history = self.ids(spec.history_tokens)
        self.tails = {case: [self.ids(spec.new_tokens) for _ in range(spec.repeats)] for case in ("gpu", "host")}
        self.warm_tails = [self.ids(spec.new_tokens) for _ in range(2)]
        self.decode = [self.ids(spec.decode_prompt) for _ in range(max(spec.concurrency, default=0))]

    def ids(self, n: int) -> list[int]:
        return [self._rng.randrange(1, self._vocab) for _ in range(n)]


def engine_configs(cfg: ModelConfig, ecfg: EngineConfig, spec: PrefixTtftSpec, dev: torch.device
                   ) -> tuple[ModelConfig, EngineConfig, EngineConfig]:  # fmt: skip
    """-> (cfg with room for the context, cache-on config, cache-off config). Both pools hold the conversation
    with every turn 2 of the run cached, or the decode lanes; the host tiers hold all of it (unless given).
    Checkpoint slots default to 2 per lane, serve's default when the KV pool fills the GPU."""
    ps, lanes, r = ecfg.page_size, max(spec.concurrency, default=1), spec.repeats
    pages = lambda n: -(-n // ps)  # noqa: E731
    turn2 = spec.history_tokens + spec.new_tokens
    decode_total = spec.decode_prompt + decode_tokens(spec) + 2
    max_context = pages(max(turn2, decode_total) + 2) * ps
    cfg = replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, max_context))
    tail_pages = pages(spec.new_tokens) + 1  # one turn 2's own pages
    kv_pages = pages(turn2 + 1) + (2 * r + 4) * tail_pages + lanes * pages(decode_total)
    base = replace(ecfg, device=dev.type, dtype="bf16" if dev.type == "cuda" else "fp32", spec=None,
                   max_concurrency=lanes, max_context=max_context, kv_capacity=kv_pages * ps)  # fmt: skip
    base = resolve_engine_config(cfg, base)
    slots = ecfg.prefix_cache_slots if ecfg.prefix_cache_slots is not None else 2 * lanes  # serve's default
    if slots < 2:
        raise SystemExit("--prefix-ttft needs --prefix-cache-slots >= 2 (the turn boundary and turn 2's own)")
    host_ckpt = ecfg.host_cache_bytes or (2 * r + 8) * gdn_slot_bytes(cfg, base.dtype)
    host_kv = ecfg.host_kv_bytes or (pages(turn2 + 1) + (2 * r + 4) * tail_pages) * kv_page_bytes(
        cfg, base, base.kv_dtype)
    on = replace(base, prefix_cache=True, prefix_cache_slots=slots, host_cache_bytes=host_ckpt,
                 host_kv_bytes=host_kv)  # fmt: skip
    off = replace(base, prefix_cache=False, host_cache_bytes=0, host_kv_bytes=0)
    return cfg, on, off


def decode_tokens(spec: PrefixTtftSpec) -> int:
    """Tokens each decode lane makes: its first, then every window on its core."""
    return 1 + spec.repeats * (DECODE_WARMUP + spec.decode_steps)


def host_restores(core: EngineCore) -> tuple[int, int]:
    """(checkpoints, KV pages) restored from host RAM so far."""
    ex = core.stats().extra
    return int(ex.get("prefix_host_restores", 0)), int(ex.get("prefix_host_kv_restores", 0))


class Case:
    """TTFT samples of one case, with the cached-token counts and host restores of each."""

    def __init__(self, name: str, expected_cached: int) -> None:
        self.name, self.expected_cached = name, expected_cached
        self.samples: list[FirstToken] = []
        self.restores: list[tuple[int, int]] = []

    def timed(self, core: EngineCore, rid: str, prompt: list[int]) -> None:
        before = host_restores(core)
        self.samples.append(first_token(core, rid, prompt))
        after = host_restores(core)
        self.restores.append((after[0] - before[0], after[1] - before[1]))

    def summary(self) -> dict:
        s = [x.seconds for x in self.samples]
        return {
            "prompt_tokens": self.samples[0].prompt_tokens, "expected_cached_tokens": self.expected_cached,
            "cached_tokens": [x.cached_tokens for x in self.samples],
            "first_tokens": [x.token_id for x in self.samples], "ttft_s": s,
            "ttft_median_s": percentile(s, 0.5), "ttft_min_s": min(s), "ttft_max_s": max(s),
            "host_checkpoint_restores": [a for a, _ in self.restores],
            "host_kv_page_restores": [b for _, b in self.restores],
        }  # fmt: skip


def second_turns(core: EngineCore, history: list[int], tails: dict[str, list[list[int]]], tag: str
                 ) -> dict[str, Case]:  # fmt: skip
    """Cases 1-3 on the cache-on core, one sample per tail: cold turn 1 (the last one leaves it cached), then turn
    2 from GPU memory, then from host RAM."""
    ps = core.runner.state.page_size
    hit = len(history) // ps * ps  # the turn boundary, aligned down to a page: where a checkpoint is saved
    cases = {"cold": Case("cold", 0), "gpu": Case("gpu", hit), "host": Case("host", hit)}
    for i in range(len(tails["gpu"])):
        core.clear_prefix_cache()
        cases["cold"].timed(core, f"{tag}cold{i}", history)
    for i, tail in enumerate(tails["gpu"]):
        cases["gpu"].timed(core, f"{tag}gpu{i}", history + tail)
    for i, tail in enumerate(tails["host"]):
        core.spill_prefix_cache()
        cases["host"].timed(core, f"{tag}host{i}", history + tail)
    return cases


def decode_rates(on: EngineCore, off: EngineCore, spec: PrefixTtftSpec, prompts: Prompts) -> list[dict]:
    """For each lane count: the same greedy lanes on both cores, timed in windows alternating between them (on
    first, then off first) so drift in clocks or temperature falls on both alike."""
    rows = []
    for lanes in spec.concurrency:
        on.clear_prefix_cache()  # as a fresh server: earlier checkpoints do not crowd the lanes' own
        max_tokens = decode_tokens(spec) + 2
        group = {"on": DecodeLanes(on, prompts.decode[:lanes], max_tokens, f"on{lanes}"),
                 "off": DecodeLanes(off, prompts.decode[:lanes], max_tokens, f"off{lanes}")}  # fmt: skip
        rates: dict[str, list[float]] = {"on": [], "off": []}
        for r in range(spec.repeats):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                rates[mode].append(group[mode].window(spec.decode_steps, DECODE_WARMUP))
        for g in group.values():
            g.close()
        on_s, off_s = percentile(rates["on"], 0.5), percentile(rates["off"], 0.5)
        rows.append({"lanes": lanes, "on_tok_s": on_s, "off_tok_s": off_s, "on_over_off": on_s / off_s,
                     "on_windows_tok_s": rates["on"], "off_windows_tok_s": rates["off"]})  # fmt: skip
        log.info("decode %d lanes: %.1f tok/s cache on, %.1f off (%.3f)", lanes, on_s, off_s, on_s / off_s)
    return rows


def checks(ttft: dict[str, dict], history_pages: int) -> dict[str, bool]:
    """What the cache must have done, whatever the timings."""
    hits = lambda c: all(n == ttft[c]["expected_cached_tokens"] > 0 for n in ttft[c]["cached_tokens"])  # noqa: E731
    return {
        "cold_and_off_computed_everything": all(n == 0 for c in ("cold", "off") for n in ttft[c]["cached_tokens"]),
        "gpu_hit_the_history": hits("gpu"),
        "gpu_restored_nothing_from_host": not any(ttft["gpu"]["host_checkpoint_restores"] +
                                                  ttft["gpu"]["host_kv_page_restores"]),
        "host_hit_the_history": hits("host"),
        "host_restored_checkpoint_and_pages": all(n == 1 for n in ttft["host"]["host_checkpoint_restores"]) and
        all(n == history_pages for n in ttft["host"]["host_kv_page_restores"]),
    }  # fmt: skip


def run_prefix_ttft(spec: PrefixTtftSpec, ecfg: EngineConfig) -> dict:
    """The five measurements over one model. -> the result written to JSON: {"meta", "ttft", "decode", "checks",
    "targets"}."""
    if ecfg.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("hinfer bench --prefix-ttft needs a CUDA GPU (or --device cpu for a smoke run of a tiny "
                         "config)")  # fmt: skip
    dev = torch.device("cpu" if ecfg.device == "cpu" else "cuda")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path, is_ckpt = resolve_model(spec.model)
    cfg = truncate_layers(load_model_config(path), spec.layers)
    tok = Tokenizer.from_dir(tokenizer_dir())
    vocab = min(cfg.vocab_size, tok.vocab_size)
    prompts = Prompts(spec, vocab)
    cfg, on_cfg, off_cfg = engine_configs(cfg, ecfg, spec, dev)
    model = build_model(path, is_ckpt, cfg, spec.weights, dev=dev, dtype=dtype)
    on, off = make_core(cfg, model, tok, on_cfg, dev), make_core(cfg, model, tok, off_cfg, dev)
    # warm-up at the real shapes (kernel compilation and autotuning stay out of the timings), then empty caches
    second_turns(on, prompts.warm_history, {"gpu": prompts.warm_tails[:1], "host": prompts.warm_tails[1:]}, "warm-")
    on.clear_prefix_cache()
    warm_up(off, vocab)
    measure.sync(dev)
    cases = second_turns(on, prompts.history, prompts.tails, "")
    cases["off"] = Case("off", 0)
    for i, tail in enumerate(prompts.tails["gpu"]):
        cases["off"].timed(off, f"off{i}", prompts.history + tail)
    ttft = {name: c.summary() for name, c in cases.items()}
    # the same turn-2 prompts with and without the cache: greedy first tokens should agree (bf16 near-ties may not)
    same = [a == b for a, b in zip(ttft["gpu"]["first_tokens"], ttft["off"]["first_tokens"])]
    ttft["gpu"]["first_tokens_equal_to_off"] = sum(same) / len(same)
    for name, t in ttft.items():
        log.info("TTFT %s: median %.1f ms (%d prompt tokens, %d cached)", name, 1e3 * t["ttft_median_s"],
                 t["prompt_tokens"], t["cached_tokens"][0])  # fmt: skip
    decode = decode_rates(on, off, spec, prompts) if spec.concurrency else []
    ok = checks(ttft, len(prompts.history) // on_cfg.page_size)
    for name, good in ok.items():
        if not good:
            log.warning("check failed: %s", name)
    engines = {}
    for mode, core in (("on", on), ("off", off)):
        st = core.runner.state.shape
        engines[mode] = {"checkpoint_slots": st.checkpoint_slots, "host_checkpoints": st.host_checkpoints,
                         "kv_pages": st.num_pages, "host_kv_pages": st.host_kv_pages}  # fmt: skip
    meta = {
        "kind": "prefix_ttft", "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "commit": git_commit(), "command": spec.command, "model": str(spec.model), "layers": cfg.num_hidden_layers,
        "weights": spec.weights, "kv_dtype": on_cfg.kv_dtype, "page_size": on_cfg.page_size,
        "prefill_chunk": on_cfg.prefill_chunk, "max_context": on_cfg.max_context, "torch": torch.__version__,
        "python": platform.python_version(), "engine": engines,
        "workload": {k: v for k, v in asdict(spec).items() if k not in ("model", "weights", "layers", "out_dir",
                                                                         "command")},
    }  # fmt: skip
    result = {"meta": meta, "ttft": ttft, "decode": decode, "checks": ok, "targets": TARGETS}
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-prefix-ttft-{Path(str(spec.model)).name}-{spec.weights}.json"
    out = spec.out_dir / name
    out.write_text(json.dumps(result, indent=1))
    log.info("wrote %s", out)
    return result
