"""`hinfer bench`: prefill and decode throughput on the real engine path, each decode figure beside its floor.

With a config (e.g. hinfer/configs/qwen3.6-27b) the weights are random at the exact shapes, generated on the GPU
(no file); with a checkpoint directory they are loaded. Results: bench/results/*.json, a table on stdout.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from hinfer.bench import floors, measure
from hinfer.config import EngineConfig, ModelConfig, apply_rope_scaling, find_config_file, load_model_config
from hinfer.engine.factory import make_core, plan_for_serve, resolve_engine_config, start_ranks
from hinfer.engine.tp.leader import Ranks
from hinfer.fixtures import config_dir, tokenizer_dir
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init, random_quantized
from hinfer.quant.apply import quantize_head
from hinfer.tokenizer import Tokenizer

log = logging.getLogger("hinfer.bench")


@dataclass
class BenchSpec:
    model: str
    weights: str = "bf16"
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    depths: list[int] = field(default_factory=lambda: [1024, 32768, 131072])
    prefill: list[int] = field(default_factory=lambda: [1024, 8192, 32768])
    prefill_repeats: int = 2  # timed runs a length (the best counts), after a warm-up run where its chunk is new
    steps: int = 64
    layers: int | None = None
    vs_hf: bool = False
    out_dir: Path = Path("bench/results")
    draft_tokens: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])  # with --spec mtp: K per sweep point
    acceptance: list[float] = field(default_factory=lambda: [3.2])  # tokens per round for the projected tok/s
    forced_acceptance: list[float] = field(default_factory=list)  # with --spec mtp: end-to-end runs at these p
    sampling: list[str] = field(default_factory=lambda: ["greedy"])  # decode rows per sampler path (measure.SAMPLING)
    # the engine's max_context, at least what the points need (None: just that); it picks the decode graphs' page-table
    # widths (cuda_graphs.page_widths), which size the split decode's grid: a server's times decode as it is served
    max_context: int | None = None


def git_commit() -> str:
    if os.environ.get("HINFER_COMMIT"):
        return os.environ["HINFER_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except Exception:
        return "unknown"


def resolve_model(model: str) -> tuple[Path, bool]:
    """-> (path, is_checkpoint). A short name picks a packaged config."""
    p = Path(model)
    if not p.exists() and config_dir(model) is not None:
        p = config_dir(model)  # type: ignore[assignment]
    has_weights = p.is_dir() and any(p.glob("*.safetensors"))
    find_config_file(p)
    return p, has_weights


def truncate_layers(cfg: ModelConfig, n: int | None) -> ModelConfig:
    if not n or n >= cfg.num_hidden_layers:
        return cfg
    return replace(cfg, num_hidden_layers=n, layer_types=cfg.layer_types[:n])


def build_model(
    path: Path, is_ckpt: bool, cfg: ModelConfig, weights: str, with_mtp: bool = False,
    dev: torch.device = torch.device("cuda"), dtype: torch.dtype = torch.bfloat16,
) -> Qwen35ForCausalLM:  # fmt: skip
    t0 = time.monotonic()
    if is_ckpt:
        from hinfer.model.loader import load_weights
        from hinfer.weights.hf_reader import HFCheckpoint

        model = Qwen35ForCausalLM(cfg, dtype, dev, with_mtp=with_mtp)
        ck = HFCheckpoint(path)
        load_weights(model, ((n, t.to(dev, dtype)) for n, t in ck.iter_tensors(dtype=dtype)))
    elif weights != "bf16":  # quantized layer by layer: the bf16 122B-A10B would not fit the GPU
        model = random_quantized(cfg, weights, dev, with_mtp=with_mtp, seed=0, dtype=dtype)
    else:
        model = random_init(Qwen35ForCausalLM(cfg, dtype, dev, with_mtp=with_mtp), seed=0)
    if is_ckpt and weights != "bf16":
        from hinfer.quant.apply import quantize_model

        quantize_model(model, weights)
    measure.sync(dev)
    log.info("model ready (%s weights) in %.1f s", weights, time.monotonic() - t0)
    return model


def build_rank_models(path: Path | None, cfg: ModelConfig, ecfg: EngineConfig, weights: str,
                      dev: torch.device) -> tuple[Qwen35ForCausalLM, Ranks]:  # fmt: skip
    """Tensor parallelism (factory.start_ranks), timed and logged. -> (rank 0's shard, the group)."""
    t0 = time.monotonic()
    model, ranks = start_ranks(path, cfg, ecfg, weights)
    measure.sync(ranks.device)
    log.info("model ready over %d ranks (%s weights) in %.1f s", ranks.tp.size, weights, time.monotonic() - t0)
    return model, ranks


# a step's all-reduces: the attention / GDN block's and the MLP's in every layer, the embedding's (vocabulary split)
def step_all_reduces(cfg: ModelConfig) -> int:
    return 2 * cfg.num_hidden_layers + 1


def all_reduce_rows(ranks: Ranks, cfg: ModelConfig, lanes: list[int], dtype: torch.dtype, meta: dict,
                    repeats: int = 5) -> list[dict]:  # fmt: skip
    """The collectives of a decode step alone, at each lane count: the step's all-reduces of [lanes, hidden]
    back to back (best of `repeats`), beside their floor at the group's bus bandwidth, measured here on a 64 MiB
    all-reduce (bus bytes: 2 (n - 1) / n of the buffer, as nccl-tests count them)."""
    n, item = ranks.tp.size, dtype.itemsize
    big = 32 * 2**20 // item * 2
    t_big = min(ranks.time_all_reduce(big, dtype, 4) / 4 for _ in range(2))
    bus = 2 * (n - 1) / n
    bus_bw = bus * big * item / t_big
    count = step_all_reduces(cfg)
    rows = []
    for c in lanes:
        t = min(ranks.time_all_reduce(c * cfg.hidden_size, dtype, count) for _ in range(repeats))
        floor = count * bus * c * cfg.hidden_size * item / bus_bw
        rows.append(meta | {"kind": "all_reduce", "concurrency": c, "depth": 0, "prefill_tokens": 0,
                            "all_reduces_per_step": count, "ms_per_step": t * 1e3, "floor_ms_per_step": floor * 1e3,
                            "us_each": t / count * 1e6, "bus_bw_gb_s": bus_bw / 1e9, "tok_s": None,
                            "floor_tok_s": None, "ratio": floor / t})  # fmt: skip
        log.info("all-reduces of a decode step, C=%d: %d x [%d, %d] in %.3f ms (%.1f us each; floor %.3f ms at the "
                 "bus bandwidth %.0f GB/s)", c, count, c, cfg.hidden_size, t * 1e3, t / count * 1e6, floor * 1e3,
                 bus_bw / 1e9)  # fmt: skip
    return rows


def active_params(model: Qwen35ForCausalLM) -> int:
    """Parameters one token multiplies through (experts scaled by top_k / E; no embedding, lm_head or MTP).
    Quantized weights are modules: count their logical [out, in] once, not their buffers or inner parts."""
    cfg, n = model.cfg, 0
    quantized: list[str] = []
    for name, mod in model.named_modules():
        if name.startswith("mtp") or any(name.startswith(q + ".") for q in quantized):
            continue
        if hasattr(mod, "matmul") and hasattr(mod, "shape"):
            quantized.append(name)
            n += int(torch.Size(mod.shape).numel())
    for name, p in model.named_parameters():
        if name.startswith("mtp") or name in ("embed_tokens", "lm_head"):
            continue
        if any(name.startswith(q + ".") for q in quantized):
            continue
        k = p.numel()
        if "experts_" in name:
            k = k * cfg.num_experts_per_tok // cfg.num_experts
        n += k
    return n


def run_bench(spec: BenchSpec, ecfg: EngineConfig) -> list[dict]:
    """The benchmark on the GPU; with --device cpu the same path runs on the CPU reference ops (tiny configs: a
    smoke test of the whole pipeline; its figures mean nothing)."""
    if ecfg.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("hinfer bench needs a CUDA GPU (or --device cpu for a smoke run of a tiny config)")
    if ecfg.spec not in (None, "mtp"):  # random weights and tokens: nothing repeats, no draft to time
        raise SystemExit(f"hinfer bench --spec {ecfg.spec}: the throughput sweep times MTP rounds only; "
                         "prompt-lookup drafts depend on the text (serve the model and measure real requests)")
    dev = torch.device("cpu" if ecfg.device == "cpu" else "cuda")
    path, is_ckpt = resolve_model(spec.model)
    cfg = truncate_layers(apply_rope_scaling(load_model_config(path), ecfg.rope_scaling), spec.layers)
    lanes = max(spec.concurrency)
    steps = spec.steps  # tokens a lane runs past its depth: decode steps, or speculative rounds of K + 1
    if ecfg.spec:
        steps = max(steps, (spec_round_count(spec) + SPEC_WARMUP + 1) * (max(spec.draft_tokens) + 1))
    need_ctx = max(max(spec.depths, default=0) + steps + 16, max(spec.prefill, default=0) + 16, spec.max_context or 0)
    capacity = max(
        [c * (d + steps + 16) for c in spec.concurrency for d in spec.depths] + [max(spec.prefill, default=0) + 64]
    )
    cfg = replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, need_ctx))
    ecfg = replace(ecfg, device=dev.type, dtype="bf16" if dev.type == "cuda" else "fp32", max_concurrency=lanes,
                   max_context=need_ctx, kv_capacity=capacity + lanes * ecfg.page_size)  # fmt: skip
    ecfg = resolve_engine_config(cfg, ecfg)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32

    bw = floors.copy_bandwidth(dev)
    flops = floors.matmul_flops(dev)
    log.info("measured: copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s", bw / 1e12, flops / 1e12)
    ranks = None
    if ecfg.tensor_parallel > 1:  # this process is rank 0; every figure below is one rank's (its bytes, its FLOPs)
        if spec.vs_hf:
            raise SystemExit("hinfer bench --vs-hf runs one process: leave out --tensor-parallel")
        model, ranks = build_rank_models(path if is_ckpt else None, cfg, ecfg, spec.weights, dev)
        dev = ranks.device
    else:
        # the plan serve runs, before any weight is built: one that does not fit fails with its figures (on the
        # device's free memory, the floors' buffers handed back first)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        plan = plan_for_serve(cfg, ecfg, spec.weights)
        log.info("memory plan (%s):\n%s", plan.device_name, plan.table())
        model = build_model(path, is_ckpt, cfg, spec.weights, with_mtp=ecfg.spec == "mtp", dev=dev, dtype=dtype)
        if dev.type == "cuda":  # the layer-by-layer build's freed bf16 blocks (16 GB at the 122B-A10B) go back
            torch.cuda.empty_cache()
    if ecfg.lm_head != "keep":  # before the floors: they count the head's bytes as it runs
        quantize_head(model, ecfg.lm_head)
    wbytes, ebytes = floors.weight_bytes_per_step(model), floors.expert_bytes(model)
    core = make_core(cfg, model, Tokenizer.from_dir(tokenizer_dir()), replace(ecfg, spec=None), dev, ranks=ranks)
    runner = core.runner
    runner.state.fill_random()
    meta = {
        "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "commit": git_commit(), "model": str(spec.model),
        "layers": cfg.num_hidden_layers, "weights": spec.weights, "kv_dtype": ecfg.kv_dtype,
        "copy_bw_tb_s": bw / 1e12, "gemm_tflop_s": flops / 1e12, "torch": torch.__version__,
        "python": platform.python_version(), "weight_bytes": wbytes, "expert_bytes": ebytes,
        "page_size": ecfg.page_size, "max_context": ecfg.max_context, "switches": switches(), "decode_ahead": ecfg.decode_ahead,
        "lm_head": ecfg.lm_head, "tensor_parallel": ecfg.tensor_parallel, "spec_draft": ecfg.spec_draft,
    }  # fmt: skip
    rows: list[dict] = []
    kv_item = floors.kv_element_bytes(runner.state.k_cache, runner.state.v_cache)
    for sampling in spec.sampling:
        for depth in spec.depths:
            for c in spec.concurrency:
                t = measure.decode(runner, c, depth, steps=spec.steps, ahead=ecfg.decode_ahead, sampling=sampling)
                b = floors.decode_step_bytes(model.cfg, wbytes, c, depth, kv_item, dtype.itemsize, ebytes)
                floor_tok_s = c / (b.total / bw)
                rows.append(meta | {"kind": "decode", "concurrency": c, "depth": depth, "prefill_tokens": 0,
                                    "tok_s": t.tok_s, "ms_per_step": t.ms_per_step, "bytes_per_step": b.total,
                                    "floor_tok_s": floor_tok_s, "ratio": t.tok_s / floor_tok_s,
                                    "sampling": sampling})  # fmt: skip
                log.info("decode C=%d depth=%d%s: %.1f tok/s (floor %.1f, %.0f%%)", c, depth,
                         "" if sampling == "greedy" else f" sampling {sampling}", t.tok_s, floor_tok_s,
                         100 * t.tok_s / floor_tok_s)  # fmt: skip
    act = active_params(model)
    warm: set[int] = set()  # chunk sizes already run: a longer prompt in them launches the same kernels
    for n in spec.prefill:
        chunk = min(n, ecfg.prefill_chunk)
        t = measure.prefill(runner, n, chunk, spec.prefill_repeats, warmup=chunk not in warm)
        warm.add(chunk)
        floor_tok_s = n / (floors.prefill_flops(model.cfg, act, n) / flops)
        rows.append(meta | {"kind": "prefill", "concurrency": 1, "depth": 0, "prefill_tokens": n, "chunk": chunk,
                            "tok_s": t.tok_s, "ms_per_step": t.ms_per_step, "floor_tok_s": floor_tok_s,
                            "ratio": t.tok_s / floor_tok_s})  # fmt: skip
        log.info("prefill %d (chunk %d): %.0f tok/s (floor %.0f, %.0f%%)", n, chunk, t.tok_s, floor_tok_s,
                 100 * t.tok_s / floor_tok_s)  # fmt: skip
    if ranks is not None:
        rows += all_reduce_rows(ranks, model.cfg, spec.concurrency, dtype, meta)
    del core, runner
    if ranks is not None:
        ranks.close()
    if ecfg.spec == "mtp":
        rows += spec_sweep(spec, cfg, ecfg, model, meta, bw)
        if spec.forced_acceptance:
            from hinfer.bench.forced import forced_sweep

            rows += forced_sweep(spec.forced_acceptance, spec.draft_tokens, spec.concurrency, spec.steps, cfg, ecfg,
                                 model, Tokenizer.from_dir(tokenizer_dir()), meta)  # fmt: skip
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if spec.vs_hf:
        from hinfer.bench.hf_baseline import hf_decode

        hf = hf_decode(path, cfg, depth=min(spec.depths), steps=16)
        rows.append(meta | {"kind": "hf_decode", "concurrency": 1, "depth": min(spec.depths), "prefill_tokens": 0,
                            "tok_s": hf, "floor_tok_s": None, "ratio": None})  # fmt: skip
        log.info("HF transformers decode C=1: %.2f tok/s", hf)
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = Path(str(spec.model)).name
    out = spec.out_dir / f"{stamp}-{name}-{spec.weights}.json"
    out.write_text(json.dumps({"spec": {k: str(v) for k, v in asdict(spec).items()}, "rows": rows}, indent=1))
    log.info("wrote %s", out)
    return rows


SPEC_WARMUP = 4


def spec_round_count(spec: BenchSpec) -> int:
    return max(8, spec.steps // 2)


PUBLISHED_ACCEPTANCE = ("3.2-3.3 tokens per round at 3 drafts: SemiAnalysis, Qwen3.8-27B on H200, thinking off "
                        "(the issue's source; not measured here)")


# the environment switches that select kernel paths (docs/ARCHITECTURE.md, "Switches for comparison")
SWITCHES = ("HINFER_PDL", "HINFER_GDN_FUSED", "HINFER_GDN_EARLY", "HINFER_FUSE_LAUNCHES", "HINFER_MOE_INT4",
            "HINFER_INT4_LAYOUT", "HINFER_INT4_PREFILL", "HINFER_INT4_DEQUANT",
            "HINFER_INT4_WGMMA", "HINFER_MOE_MMA_PAIRS", "HINFER_MOE_DIRECT_PAIRS", "HINFER_PREFILL_CUDNN",
            "HINFER_TILES", "HINFER_TP_GRAPHS", "HINFER_SAMPLER_KERNEL", "HINFER_SPEC_PICKS_KERNEL",
            "HINFER_FUSION_ROWS", "HINFER_SPEC_CHAIN", "HINFER_EXPERTS_WORDS")  # fmt: skip


def switches() -> dict[str, str]:
    """The kernel-path switches set in this run's environment (unset ones take their defaults), for the JSON."""
    return {k: os.environ[k] for k in SWITCHES if k in os.environ}


def spec_sweep(spec: BenchSpec, cfg: ModelConfig, ecfg: EngineConfig, model: Qwen35ForCausalLM, meta: dict,
               bw: float) -> list[dict]:  # fmt: skip
    """MTP speculation: round time for each K at each lane count and depth, beside a plain decode step of the same
    engine and the round's byte floor; tok/s projected from given acceptance lengths (random weights' own
    acceptance is meaningless and reported only as a check that drafts ran). Per sampling mode (--sampling): a
    sampled lane drafts as --spec-draft says and is judged by rejection sampling (on the device, row by row, where
    its drafts are the head's argmax and its distribution lies among its candidates: engine/spec/picks.py), where a
    greedy one compares argmaxes."""
    rows: list[dict] = []
    tok = Tokenizer.from_dir(tokenizer_dir())
    wbytes, ebytes = floors.weight_bytes_per_step(model), floors.expert_bytes(model)
    for k in spec.draft_tokens:
        kcfg = resolve_engine_config(cfg, replace(ecfg, draft_tokens=k, spec_adaptive=False))  # every round at K
        core = make_core(cfg, model, tok, kcfg, core_device := torch.device(kcfg.device))
        head = getattr(core.spec.drafter, "draft_head", None)
        core.runner.state.fill_random()
        kv_item = floors.kv_element_bytes(core.runner.state.k_cache, core.runner.state.v_cache)
        for sampling, depth, c in itertools.product(spec.sampling, spec.depths, spec.concurrency):
            plain = measure.decode(core.runner, c, depth, steps=spec.steps, ahead=ecfg.decode_ahead,
                                   sampling=sampling)  # fmt: skip
            t = measure.spec_rounds(core, c, depth, rounds=spec_round_count(spec), warmup=SPEC_WARMUP,
                                    sampling=sampling)  # fmt: skip
            draft_bytes = floors.mtp_bytes_per_draft(model, head, c)
            b = floors.spec_round_bytes(cfg, wbytes, draft_bytes, c, depth, k, kv_item,
                                        model.embed_tokens.element_size(), ebytes)
            floor_ms = b.total / bw * 1e3
            row = meta | {"kind": "spec_round", "concurrency": c, "depth": depth, "prefill_tokens": 0,
                          "draft_tokens": k, "ms_per_round": t.ms_per_round, "ms_per_round_mean": t.ms_mean,
                          "ms_per_round_p10": t.ms_p10, "ms_per_round_p90": t.ms_p90, "floor_ms_per_round": floor_ms,
                          "ratio": floor_ms / t.ms_per_round, "plain_ms_per_step": plain.ms_per_step,
                          "round_vs_plain": t.ms_per_round / plain.ms_per_step,
                          "measured_tokens_per_round_random_weights": t.tokens_per_round,
                          "drafted_per_round": t.drafted_per_round, "chained_rounds": t.chained,
                          "tok_s": None, "floor_tok_s": None,
                          "projected": {str(a): c * a / (t.ms_per_round / 1e3) for a in spec.acceptance
                                        if a <= k + 1},
                          "acceptance_source": PUBLISHED_ACCEPTANCE, "sampling": sampling}  # fmt: skip
            rows.append(row)
            proj = ", ".join(f"{v:.0f} tok/s at {a}" for a, v in row["projected"].items())
            log.info("spec K=%d C=%d depth=%d%s: round %.2f ms (p10-p90 %.2f-%.2f; floor %.2f, %.0f%%; %.2fx a "
                     "plain step of %.2f ms; %.0f%% drafted ahead of the read)%s", k, c, depth,
                     "" if sampling == "greedy" else f" sampling {sampling}", t.ms_per_round, t.ms_p10, t.ms_p90,
                     floor_ms,
                     100 * row["ratio"], row["round_vs_plain"], plain.ms_per_step, 100 * t.chained,
                     f"; projected {proj}" if proj else "")  # fmt: skip
        del core
        if core_device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _mode(label, row: dict) -> str:
    """A table cell naming the row's sampling mode beside `label` unless it is greedy."""
    mode = row.get("sampling", "greedy")
    return str(label) if mode == "greedy" else f"{label} ({mode})"


def table(rows: list[dict]) -> str:
    lines = ["| kind | C | depth | prefill | tok/s | floor tok/s | ratio |", "|---|---|---|---|---|---|---|"]
    from hinfer.bench.forced import forced_table

    spec = [r for r in rows if r["kind"] == "spec_round"]
    reduces = [r for r in rows if r["kind"] == "all_reduce"]
    forced = forced_table(rows)
    rows = [r for r in rows if r["kind"] not in ("spec_round", "spec_forced", "all_reduce")]
    for r in rows:
        ratio = f"{r['ratio']:.0%}" if r.get("ratio") else "-"
        floor = f"{r['floor_tok_s']:.1f}" if r.get("floor_tok_s") else "-"
        lines.append(f"| {_mode(r['kind'], r)} | {r['concurrency']} | {r['depth']} | {r['prefill_tokens']} | "
                     f"{r['tok_s']:.1f} | {floor} | {ratio} |")  # fmt: skip
    if spec:
        lines += ["", "| K | C | depth | round ms | floor ms | ratio | round / plain step | projected tok/s |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in spec:
            proj = ", ".join(f"{v:.0f} @ {a}" for a, v in r["projected"].items()) or "-"
            lines.append(f"| {_mode(r['draft_tokens'], r)} | {r['concurrency']} | {r['depth']} | {r['ms_per_round']:.2f} | "
                         f"{r['floor_ms_per_round']:.2f} | {r['ratio']:.0%} | {r['round_vs_plain']:.2f}x | {proj} |")
        lines.append(f"\nprojected = C x acceptance length / round time; acceptance {PUBLISHED_ACCEPTANCE}")
    if reduces:
        lines += ["", "| C | all-reduces a step | ms a step | us each | floor ms | bus GB/s |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['concurrency']} | {r['all_reduces_per_step']} | {r['ms_per_step']:.3f} | {r['us_each']:.1f} | "
                  f"{r['floor_ms_per_step']:.4f} | {r['bus_bw_gb_s']:.0f} |" for r in reduces]
    return "\n".join(lines + forced)
