"""`hinfer bench --structured`: decode tok/s with every lane constrained by a JSON schema against the same lanes
unconstrained, and a mixed batch (half constrained), on EngineCore, the engine the server steps (scheduler,
CUDA-graph decode, the sampler applying each constrained lane's grammar bitmask).

For each lane count, each mode is timed in `repeats` windows of `steps` steps (after a few untimed ones), the
modes taking turns in a rotating order so drift in clocks or temperature falls on all of them. Every window
starts fresh greedy requests on the same random prompts; a constrained lane's grammar starts at the answer's
first token. The schema (structured_schema.py) cannot be complete before a window ends, so every lane makes
every step's token. The sampler's grammar counters give the host time of the grammar work per step: filling
the bitmasks (xgrammar), launching the masking, feeding the sampled tokens to the matchers.

A table on stdout and a JSON in bench/results/ (GPU name, commit, command, schema). With a config the weights are
random at the real shapes; --device cpu runs a tiny config as a smoke test whose timings mean nothing.
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
from hinfer.bench.agent import percentile
from hinfer.bench.engine_timing import DecodeLanes
from hinfer.bench.run import build_model, git_commit, resolve_model, truncate_layers
from hinfer.bench.structured_schema import report_schema
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import tokenizer_dir
from hinfer.sampling_params import SamplingParams, StructuredOutput
from hinfer.tokenizer import Tokenizer

log = logging.getLogger("hinfer.bench")

MODES = ("free", "json", "mixed")  # no lane constrained, every lane, the first half
TARGET_OVERHEAD = 0.10  # decode tok/s with a schema at 8 lanes within 10% of unconstrained
WARMUP = 4  # untimed steps at the start of each window
WHITESPACE = 2  # blanks per run between JSON tokens: random weights love them; a real model writes few
GRAMMAR_KEYS = ("steps", "masks", "fill_s", "apply_s", "accept_s", "accepted")


@dataclass
class StructuredSpec:
    model: str
    lanes: list[int] = field(default_factory=lambda: [8])
    prompt_tokens: int = 1000  # random prompt of each lane
    steps: int = 256  # timed steps per window
    repeats: int = 3  # windows per mode and lane count; medians
    weights: str = "bf16"
    layers: int | None = None
    seed: int = 0
    out_dir: Path = Path("bench/results")
    command: str = ""  # the command line, recorded in the JSON

    @property
    def tokens_per_request(self) -> int:
        return WARMUP + self.steps  # in each window: one a lane a step

    @property
    def max_tokens(self) -> int:
        # never reached: no lane ends inside a window. The prefill's token, the window's, and slack for the tokens
        # a lane makes while the others finish their prefill (the step's token budget spreads it over a few steps)
        return 1 + self.tokens_per_request + 64


def constrained(mode: str, lanes: int) -> int:
    return {"free": 0, "json": lanes, "mixed": lanes // 2}[mode]


def lane_params(spec: StructuredSpec, mode: str, lanes: int, schema: dict) -> list[SamplingParams]:
    so = StructuredOutput(json_schema=schema, max_json_whitespace=WHITESPACE)
    n = constrained(mode, lanes)
    return [SamplingParams(temperature=0, max_tokens=spec.max_tokens, ignore_eos=True,
                           structured=so if i < n else None) for i in range(lanes)]  # fmt: skip


def grammar_counters(core: EngineCore) -> dict[str, float]:
    ex = core.stats().extra
    return {k: float(ex.get(f"grammar_{k}", 0)) for k in GRAMMAR_KEYS}


@dataclass
class Window:
    tok_s: float
    grammar: dict[str, float]  # counter deltas over the window (its untimed steps included)
    tokens: list[int]  # per request, made in the window (its untimed steps included)
    sample: list[int]  # the first constrained lane's tokens (empty when none)


def window(core: EngineCore, spec: StructuredSpec, prompts: list[list[int]], mode: str, schema: dict,
           steps: int, tag: str) -> Window:  # fmt: skip
    lanes = len(prompts)
    core.clear_prefix_cache()  # every window starts alike: no prompt comes from the cache of an earlier one
    group = DecodeLanes(core, prompts, spec.max_tokens, tag, lane_params(spec, mode, lanes, schema))
    before = grammar_counters(core)
    tok_s = group.window(steps, WARMUP)
    after = grammar_counters(core)
    out = [group.tokens[rid] for rid in group.ids]
    made = [group.made[rid] for rid in group.ids]
    group.close()
    delta = {k: after[k] - before[k] for k in GRAMMAR_KEYS}
    return Window(tok_s, delta, made, out[0] if constrained(mode, lanes) else [])


def summarize(mode: str, lanes: int, wins: list[Window], steps: int) -> dict:
    g = {k: sum(w.grammar[k] for w in wins) for k in GRAMMAR_KEYS}
    n_steps = len(wins) * (WARMUP + steps)
    per_step = lambda k: 1e3 * g[k] / n_steps  # noqa: E731
    n = constrained(mode, lanes)
    rates = [w.tok_s for w in wins]
    return {
        "lanes": lanes, "mode": mode, "constrained_lanes": n, "tok_s": percentile(rates, 0.5),
        "ms_per_step": 1e3 * lanes / percentile(rates, 0.5),
        "windows_tok_s": rates, "tokens_per_request": sorted({t for w in wins for t in w.tokens}),
        "grammar_host_ms_per_step": {"fill": per_step("fill_s"), "apply": per_step("apply_s"),
                                     "accept": per_step("accept_s"),
                                     "total": per_step("fill_s") + per_step("apply_s") + per_step("accept_s")},
        "fill_us_per_mask": 1e6 * g["fill_s"] / g["masks"] if g["masks"] else 0.0,
        "grammar_steps": int(g["steps"]), "grammar_masks": int(g["masks"]), "grammar_accepted": int(g["accepted"]),
        "expected_masks": n * n_steps,
    }  # fmt: skip


def run_lanes(core: EngineCore, spec: StructuredSpec, prompts: list[list[int]], lanes: int, schema: dict,
              tok: Tokenizer) -> tuple[list[dict], str]:  # fmt: skip
    """Every mode at one lane count, in rotating order. -> (rows, the start of a constrained answer)."""
    modes = [m for m in MODES if m != "mixed" or lanes >= 2]
    wins: dict[str, list[Window]] = {m: [] for m in modes}
    for r in range(spec.repeats):
        for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
            wins[mode].append(window(core, spec, prompts[:lanes], mode, schema, spec.steps, f"{mode}{lanes}-{r}"))
    rows = [summarize(m, lanes, wins[m], spec.steps) for m in modes]
    free = rows[0]["tok_s"]
    for row in rows:
        row["vs_free"] = row["tok_s"] / free
        row["overhead"] = 1 - row["vs_free"]
        log.info("%d lanes, %s: %.1f tok/s (%.1f%% overhead), grammar host %.3f ms/step", lanes, row["mode"],
                 row["tok_s"], 100 * row["overhead"], row["grammar_host_ms_per_step"]["total"])  # fmt: skip
    return rows, tok.decode(wins["json"][0].sample)


def checks(rows: list[dict], spec: StructuredSpec) -> dict[str, bool]:
    """What must hold whatever the timings: every lane made every token, each constrained one masked and fed to
    its grammar at every step, the unconstrained runs touched no grammar."""
    return {
        "every_request_made_its_tokens": all(r["tokens_per_request"] == [spec.tokens_per_request] for r in rows),
        "every_constrained_token_masked": all(r["grammar_masks"] == r["expected_masks"] for r in rows),
        "every_constrained_token_accepted": all(r["grammar_accepted"] == r["expected_masks"] for r in rows),
        "free_runs_touched_no_grammar": all(r["grammar_steps"] == 0 for r in rows if r["mode"] == "free"),
    }  # fmt: skip


def run_structured(spec: StructuredSpec, ecfg: EngineConfig) -> dict:
    """-> the result written to JSON: {"meta", "schema", "rows", "sample", "checks", "target_overhead"}."""
    if ecfg.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("hinfer bench --structured needs a CUDA GPU (or --device cpu for a smoke run of a tiny "
                         "config)")  # fmt: skip
    if not spec.lanes or min(spec.lanes) < 1 or spec.steps < 1 or spec.repeats < 1 or spec.prompt_tokens < 1:
        raise SystemExit("--structured needs lanes, --steps, --repeats and --decode-prompt >= 1")
    dev = torch.device("cpu" if ecfg.device == "cpu" else "cuda")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path, is_ckpt = resolve_model(spec.model)
    cfg = truncate_layers(load_model_config(path), spec.layers)
    tok = Tokenizer.from_dir(tokenizer_dir())
    vocab = min(cfg.vocab_size, tok.vocab_size)
    lanes = max(spec.lanes)
    ps = ecfg.page_size
    max_context = -(-(spec.prompt_tokens + spec.max_tokens + 2) // ps) * ps
    cfg = replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, max_context))
    ecfg = resolve_engine_config(cfg, replace(
        ecfg, device=dev.type, dtype="bf16" if dev.type == "cuda" else "fp32", spec=None, max_concurrency=lanes,
        max_context=max_context, kv_capacity=(lanes + 1) * max_context))  # fmt: skip
    model = build_model(path, is_ckpt, cfg, spec.weights, dev=dev, dtype=dtype)
    core = make_core(cfg, model, tok, ecfg, dev)
    rng = random.Random(spec.seed)
    prompts = [[rng.randrange(1, vocab) for _ in range(spec.prompt_tokens)] for _ in range(lanes)]
    schema = report_schema(min_items=spec.max_tokens)
    log.info("JSON schema of the constrained lanes: %s", json.dumps(schema))
    # warm-up: xgrammar's import and tokenizer view, the grammar's compile, kernels and graphs stay untimed
    for n in spec.lanes:
        for mode in MODES:
            window(core, spec, prompts[:n], mode, schema, 2, f"warm-{mode}{n}")
    measure.sync(dev)
    rows: list[dict] = []
    sample = ""
    for n in spec.lanes:
        got, sample = run_lanes(core, spec, prompts, n, schema, tok)
        rows += got
    ok = checks(rows, spec)
    for name, good in ok.items():
        if not good:
            log.warning("check failed: %s", name)
    meta = {
        "kind": "structured", "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "commit": git_commit(), "command": spec.command, "model": str(spec.model), "layers": cfg.num_hidden_layers,
        "weights": spec.weights, "kv_dtype": ecfg.kv_dtype, "page_size": ecfg.page_size,
        "prefix_cache": ecfg.prefix_cache, "cuda_graphs": bool(core.runner.graphs), "max_context": ecfg.max_context,
        "torch": torch.__version__,
        "python": platform.python_version(), "sampling": "greedy", "max_json_whitespace": WHITESPACE,
        "warmup_steps": WARMUP, "tokens_per_request": spec.tokens_per_request,
        "workload": {k: v for k, v in asdict(spec).items() if k not in ("model", "weights", "layers", "out_dir",
                                                                         "command")},
    }  # fmt: skip
    result = {"meta": meta, "schema": schema, "rows": rows, "sample": sample, "checks": ok,
              "target_overhead": TARGET_OVERHEAD}  # fmt: skip
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    out = spec.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-structured-{Path(str(spec.model)).name}-{spec.weights}.json"
    out.write_text(json.dumps(result, indent=1))
    log.info("wrote %s", out)
    return result
