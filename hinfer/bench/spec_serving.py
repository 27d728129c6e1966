"""`hinfer bench --spec-serving`: does speculative decoding cost throughput at the server? Two `hinfer serve`
processes on the same checkpoint, one after the other (one GPU): plain, then `--spec mtp` (adaptive
speculation as configured, on by default). Each gets the same streaming load at each client count: N clients
sending chat completions back to back (fixed prompts, greedy, max_tokens with ignore_eos, so every answer has
the same length), a warm-up, then a fixed window in which the server's own token counter (/metrics) gives
output tok/s. The ratio spec / plain is the figure; on random weights the drafter is never right, so adaptive
speculation must fall back to plain decode steps and stay within a few percent (TARGET_RATIO).

Before the load each server answers the same greedy completions: speculation must not change greedy output,
so the two servers' answers are compared token by token; on the GPU bf16 rounding (a verify step's rows against
a one-row step) can flip a near-tie, so where they part the speculative server's token must be among the plain
server's top TOP_LOGPROBS within NEAR_TIE nats of its first (the check fails otherwise). Both servers run without the prefix cache (speculation turns it off), so they do the
same work.

MODEL: a checkpoint folder is served as it is; "demo" serves the built-in demo model; a config (a packaged
name such as qwen3.6-27b, or a folder with only config.json) gets a random-weight checkpoint written once with
safetensors (`hinfer synth`'s writer; --layers keeps the first N layers) into a temporary folder, removed at
the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hinfer.bench.run import git_commit
from hinfer.bench.serve_process import ServeProcess
from hinfer.bench.stream_load import StreamClients, get_json, metrics, post_json
from hinfer.config import EngineConfig, find_config_file
from hinfer.fixtures import config_dir

log = logging.getLogger("hinfer.bench")

TARGET_RATIO = 0.95  # spec tok/s over plain tok/s, at every client count, when the drafter is never right
NEAR_TIE = 0.5  # nats below the plain server's first choice where rounding may part the greedy answers
# logprobs per token asked of both servers (the OpenAI completions limit): on random weights the vocabulary's top
# few lie within hundredths of a nat, so a rounding flip may land on the third or fourth choice
TOP_LOGPROBS = 5
MODEL_NAME = "bench"  # --served-model-name of both servers
STARTUP_TIMEOUT_S = 900.0
STALL_S = 120.0  # how long a warm-up or window waits past its time for the server to answer
PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash map handles collisions, with a small example.",
    "List ten ideas for a weekend project with a Raspberry Pi and describe each in a sentence.",
    "Describe the water cycle to a ten-year-old.",
    "Write a Python function that merges two sorted lists, then explain its running time.",
    "Summarize the causes of the French Revolution in a few paragraphs.",
    "Draft a polite email asking a colleague to review a pull request by Friday.",
    "Compare trains and planes for a 600 km trip: cost, time and emissions.",
)
SPEC_COUNTERS = ("rounds", "drafted", "accepted", "verify_steps", "plain_steps")


@dataclass
class SpecServingSpec:
    model: str
    clients: list[int] = field(default_factory=lambda: [1, 8])
    request_tokens: int = 256  # max_tokens of every request (ignore_eos: every answer has this length)
    warmup_s: float = 10.0  # load before each window (new lanes settle their draft lengths, costs get timed)
    window_s: float = 20.0
    greedy_prompts: int = 2  # greedy completions compared between the servers
    max_context: int | None = None  # of both servers (default: the answers' length and room, at least 4096)
    weights: str = "bf16"
    layers: int | None = None
    out_dir: Path = Path("bench/results")
    command: str = ""


@contextlib.contextmanager
def checkpoint(spec: SpecServingSpec) -> Iterator[Path]:
    """The folder both servers load: as given, the demo model's, or random weights written for a config."""
    if spec.model in ("", "demo"):
        from hinfer.demo import demo_model_dir

        _no_layers(spec)
        yield demo_model_dir()
        return
    p = Path(spec.model)
    if p.is_dir() and any(p.glob("*.safetensors")):
        _no_layers(spec)
        yield p
        return
    src = p if p.exists() else config_dir(spec.model)
    if src is None:
        raise SystemExit(f"{spec.model}: not a checkpoint folder, a config, or a packaged model name")
    find_config_file(src)
    from hinfer.weights.synth import write_synthetic_checkpoint  # torch only on this path

    tmp = Path(tempfile.mkdtemp(prefix="hinfer-spec-serving-"))
    try:
        t0 = time.monotonic()
        out = write_synthetic_checkpoint(src, tmp / "ckpt", layers=spec.layers, seed=0, progress=False)
        log.info("random-weight checkpoint (%s layers) written to %s in %.0f s", spec.layers or "all", out,
                 time.monotonic() - t0)  # fmt: skip
        yield out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _no_layers(spec: SpecServingSpec) -> None:
    if spec.layers:
        raise SystemExit("--layers applies to a config (random weights written for it), not to a checkpoint")


def serve_flags(ecfg: EngineConfig, spec: SpecServingSpec, spec_on: bool) -> list[str]:
    """Flags of both servers (the same engine), plus --spec mtp for the speculative one."""
    lanes = str(max(spec.clients))
    max_context = spec.max_context or max(4096, spec.request_tokens + 1024)  # short prompts: 1024 is plenty
    flags = ["--served-model-name", MODEL_NAME, "--no-webui", "--no-vision", "--no-prefix-cache",
             "--max-concurrency", lanes, "--max-context", str(max_context), "--max-pending-requests", lanes,
             "--kv-dtype", ecfg.kv_dtype, "--page-size", str(ecfg.page_size),
             "--prefill-chunk", str(ecfg.prefill_chunk), "--weights", spec.weights, "--device", ecfg.device,
             "--seed", str(ecfg.seed)]  # fmt: skip
    if ecfg.dtype != "auto":
        flags += ["--dtype", ecfg.dtype]
    if not ecfg.cuda_graphs:
        flags.append("--no-cuda-graphs")
    if ecfg.gpu_memory is not None:
        flags += ["--gpu-memory", str(ecfg.gpu_memory)]
    if spec_on:
        flags += ["--spec", "mtp", "--draft-tokens", str(ecfg.draft_tokens),
                  "--spec-adaptive" if ecfg.spec_adaptive else "--no-spec-adaptive"]  # fmt: skip
        if ecfg.spec_draft_cost is not None:
            flags += ["--spec-draft-cost", str(ecfg.spec_draft_cost)]
    return flags


def greedy_texts(url: str, spec: SpecServingSpec) -> list[dict]:
    """The same greedy completions on every server: text, usage (the spec server's drafted counts), and per token
    its text and the top TOP_LOGPROBS logprobs (where answers part, was it a near-tie?)."""
    out = []
    for prompt in PROMPTS[: spec.greedy_prompts]:
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": spec.request_tokens, "temperature": 0,
                "ignore_eos": True, "logprobs": TOP_LOGPROBS}  # fmt: skip
        r = post_json(url + "/v1/completions", body)
        lp = r["choices"][0].get("logprobs") or {}
        out.append({"text": r["choices"][0]["text"], "usage": r["usage"], "tokens": lp.get("tokens", []),
                    "top": lp.get("top_logprobs", [])})  # fmt: skip
    return out


def near_tie(plain: dict, spec: dict) -> dict | None:
    """Where two greedy answers part, token-wise: None when equal; else the token index, and whether the
    speculative server's token there was among the plain server's top choices within NEAR_TIE nats of its first.
    On random weights a verify step's K + 1 rows round differently from a one-row step, which flips such
    near-ties; a logic error picks a token outside the top few (about 5 in the vocabulary's size by chance)."""
    a, b = plain.get("tokens", []), spec.get("tokens", [])
    if a == b:
        return None
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    top = plain["top"][i] if i < len(plain.get("top", [])) and i < len(b) else None
    gap = max(top.values()) - top[b[i]] if top and b[i] in top else None
    return {"token": i, "gap": gap, "near_tie": gap is not None and gap <= NEAR_TIE}


def wait_idle(url: str, timeout_s: float = 120.0) -> None:
    """Until the aborted answers of the last load have left their lanes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        h = get_json(url + "/health")
        if h["lanes_busy"] == 0 and h["queue_depth"] == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the server still has busy lanes {timeout_s:.0f} s after the load stopped")


def _scrape(url: str) -> tuple[dict[str, float], float]:
    t0 = time.monotonic()
    m = metrics(url)
    return m, (t0 + time.monotonic()) / 2


TOKENS = "hinfer_engine_tokens_generated_total"


def load_phase(url: str, spec: SpecServingSpec, n: int) -> dict:
    """N streaming clients: warm-up, then the window timed by the server's generated-token counter."""
    clients = StreamClients(url, MODEL_NAME, list(PROMPTS), spec.request_tokens, n)
    clients.start()
    try:
        # warm-up: its time, and every client's first answer (a slow first step must not fall in the window)
        end = time.monotonic() + spec.warmup_s
        while (time.monotonic() < end or clients.fewest_answers() < 1) and time.monotonic() < end + STALL_S:
            time.sleep(0.05)
        m0, t0 = _scrape(url)
        time.sleep(spec.window_s)
        m1, t1 = _scrape(url)
        while m1[TOKENS] == m0[TOKENS] and t1 - t0 < STALL_S:  # a stalled host (CI): wait for a token
            time.sleep(0.05)
            m1, t1 = _scrape(url)
    finally:
        counts = clients.stop()
    wait_idle(url)
    tokens = m1[TOKENS] - m0[TOKENS]
    row = {"clients": n, "tok_s": tokens / (t1 - t0), "tokens": tokens, "seconds": t1 - t0,
           "requests_done": counts.requests_done, "client_errors": counts.errors}  # fmt: skip
    if counts.errors:
        row["last_error"] = counts.last_error
    spec_keys = [k for k in SPEC_COUNTERS if f"hinfer_engine_spec_{k}" in m1]
    if spec_keys:  # the speculative server: what its steps were in the window, and its measured cost ratios
        row["spec"] = {k: m1[f"hinfer_engine_spec_{k}"] - m0[f"hinfer_engine_spec_{k}"] for k in spec_keys}
        row["spec"]["cost_ratios"] = {k.removeprefix("hinfer_engine_"): v for k, v in m1.items()
                                      if k.startswith("hinfer_engine_spec_cost_")}  # fmt: skip
    log.info("%d clients: %.1f tok/s (%d tokens in %.1f s)%s", n, row["tok_s"], tokens, t1 - t0,
             f"; spec steps in the window: {row['spec']}" if "spec" in row else "")  # fmt: skip
    return row


def run_server(kind: str, ckpt: Path, flags: list[str], spec: SpecServingSpec) -> dict:
    """One server's life: start, greedy answers, a load phase per client count, clean stop."""
    log.info("starting the %s server: hinfer serve %s %s", kind, ckpt, " ".join(flags))
    proc = ServeProcess(str(ckpt), flags, spec.out_dir / f"spec-serving-{kind}.log")
    try:
        startup = proc.wait_ready(STARTUP_TIMEOUT_S)
        log.info("%s server ready in %.0f s at %s", kind, startup, proc.url)
        assert proc.url is not None
        greedy = greedy_texts(proc.url, spec)
        phases = [load_phase(proc.url, spec, n) for n in spec.clients]
    finally:
        rc = proc.stop()
    return {"server": kind, "flags": flags, "startup_s": startup, "device": proc.device, "exit_code": rc,
            "greedy": greedy, "phases": phases}  # fmt: skip


def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where the texts part (None when equal)."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(plain: dict, spec_run: dict) -> dict:
    ratios = []
    for p, s in zip(plain["phases"], spec_run["phases"]):
        r = s["tok_s"] / p["tok_s"] if p["tok_s"] > 0 else 0.0
        ratios.append({"clients": p["clients"], "plain_tok_s": p["tok_s"], "spec_tok_s": s["tok_s"],
                       "ratio": r, "meets_target": r >= TARGET_RATIO})  # fmt: skip
    diffs = [first_difference(a["text"], b["text"]) for a, b in zip(plain["greedy"], spec_run["greedy"])]
    parts = [near_tie(a, b) for a, b in zip(plain["greedy"], spec_run["greedy"])]
    phases = plain["phases"] + spec_run["phases"]
    checks = {
        "no_client_errors": all(p["client_errors"] == 0 for p in phases),
        "every_window_made_tokens": all(p["tokens"] > 0 for p in phases),
        # identical, or parted first at a near-tie (the answers cannot be compared past it)
        "greedy_outputs_identical_up_to_near_ties": all(d is None or d["near_tie"] for d in parts),
        "spec_server_drafted": any(g["usage"].get("spec_drafted_tokens", 0) > 0 for g in spec_run["greedy"]),
        "servers_stopped_cleanly": plain["exit_code"] == 0 and spec_run["exit_code"] == 0,
    }
    return {"ratios": ratios, "greedy_first_difference": diffs, "greedy_parting": parts, "checks": checks}


def run_spec_serving(spec: SpecServingSpec, ecfg: EngineConfig) -> dict:
    """-> the result written to JSON: {"meta", "servers", "ratios", "greedy_first_difference", "checks"}."""
    if not spec.clients or min(spec.clients) < 1 or spec.request_tokens < 1 or spec.window_s <= 0:
        raise SystemExit("--spec-serving needs client counts, --request-tokens and --window above 0")
    t0 = time.monotonic()
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    with checkpoint(spec) as ckpt:
        servers = [run_server(kind, ckpt, serve_flags(ecfg, spec, kind == "spec"), spec)
                   for kind in ("plain", "spec")]  # fmt: skip
    result = {"meta": meta(spec, servers, time.monotonic() - t0), "servers": servers, **compare(*servers)}
    for name, ok in result["checks"].items():
        if not ok:
            log.warning("check failed: %s", name)
    name = Path(str(spec.model)).name or "demo"
    out = spec.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-spec-serving-{name}-{spec.weights}.json"
    out.write_text(json.dumps(result, indent=1))
    log.info("wrote %s", out)
    return result


def meta(spec: SpecServingSpec, servers: list[dict], wall_s: float) -> dict:
    return {"kind": "spec_serving", "gpu": servers[0]["device"] or "unknown", "commit": git_commit(),
            "command": spec.command, "model": spec.model, "layers": spec.layers, "weights": spec.weights,
            "target_ratio": TARGET_RATIO, "wall_s": wall_s, "prompts": list(PROMPTS), "sampling": "greedy",
            "workload": {k: v for k, v in asdict(spec).items()
                         if k not in ("model", "weights", "layers", "out_dir", "command")}}  # fmt: skip
