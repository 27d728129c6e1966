"""Build a ready engine from a model path (or the demo) and an EngineConfig: config, plan, weights, state."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from hinfer.config import EngineConfig, ModelConfig, apply_rope_scaling, load_model_config
from hinfer.demo import resolve_model_path
from hinfer.engine.core import EngineCore
from hinfer.engine.engine import Engine
from hinfer.engine.memory_plan import (
    MemoryPlan,
    activation_dtype,
    check_plan,
    checkpoint_slots,
    device_memory,
    gdn_slot_bytes,
    host_checkpoint_rows,
    host_kv_rows,
    kv_dtype,
    kv_page_bytes,
    plan_memory,
    resolve_device,
)
from hinfer.engine.runner import ModelRunner
from hinfer.engine.sampler import Sampler
from hinfer.engine.tp.follower import follow
from hinfer.engine.tp.group import launcher_rank
from hinfer.engine.tp.leader import LeaderRunner, LeaderState, Ranks
from hinfer.engine.tp.load import load_rank_model
from hinfer.engine.weight_bytes import resolve_weights
from hinfer.errors import CheckpointError, ConfigError
from hinfer.kv_format import KV_FORMATS
from hinfer.model.artifact_loader import load_artifact_model
from hinfer.model.loader import load_weights
from hinfer.model.quantized_loader import load_quantized_checkpoint
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.serving_layout import lay_out_for_serving
from hinfer.model.state import RESERVED_PAGES, RESERVED_SLOTS, ModelState, StateShape
from hinfer.model.vision import VisionEncoder
from hinfer.model.vision_loader import load_vision_weights
from hinfer.quant.apply import quantize_head, quantize_model
from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults, load_sampling_defaults
from hinfer.sharding import check_tensor_parallel, rank_settings
from hinfer.tokenizer import Tokenizer
from hinfer.weights.artifact import engine_weights, is_artifact_path, open_artifact
from hinfer.weights.compressed_tensors import stored_recipe
from hinfer.weights.hf_reader import HFCheckpoint

log = logging.getLogger("hinfer")

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# --kv-dtype -> K's storage dtype, and V's where it differs (k8v4)
KV_DTYPES = {name: getattr(torch, f.k.torch_dtype) for name, f in KV_FORMATS.items()}
V_DTYPES = {name: getattr(torch, f.v.torch_dtype) for name, f in KV_FORMATS.items() if f.v != f.k}


@dataclass
class Loaded:
    path: Path
    cfg: ModelConfig
    ecfg: EngineConfig  # resolved: device, dtype, max_context clamp
    model: Qwen35ForCausalLM
    tokenizer: Tokenizer
    device: torch.device
    plan: MemoryPlan | None = None
    ranks: Ranks | None = None  # tensor parallelism: rank 0's handle on the other ranks
    sampling: SamplingDefaults = NEUTRAL  # for the fields a request leaves out (--generation-config)


def resolve_engine_config(cfg: ModelConfig, ecfg: EngineConfig) -> EngineConfig:
    """Settle 'auto' device/dtype the way the memory plan counts them (one rule for both)."""
    ecfg.validate()
    check_tensor_parallel(cfg, ecfg.tensor_parallel)
    ecfg = rank_settings(ecfg)
    device = ecfg.device if ecfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    max_context = min(ecfg.max_context, cfg.max_position_embeddings)
    return replace(ecfg, device=device, dtype=activation_dtype(ecfg, device), max_context=max_context,
                   kv_dtype=kv_dtype(ecfg, device))  # fmt: skip


def state_shape(cfg: ModelConfig, ecfg: EngineConfig, plan=None) -> StateShape:
    """Pool sizes from the memory plan when there is one; else every lane guaranteed max_context of pages."""
    if plan is not None:
        pages, slots, ckpt, host = plan.num_pages, plan.num_slots, plan.checkpoint_slots, plan.host_checkpoints
        host_kv = plan.host_kv_pages
    else:
        per_lane = -(-ecfg.max_context // ecfg.page_size)
        pages = (-(-ecfg.kv_capacity // ecfg.page_size) if ecfg.kv_capacity else ecfg.max_concurrency * per_lane)
        pages += RESERVED_PAGES
        slots = ecfg.max_concurrency * (1 + ecfg.draft_slots) + RESERVED_SLOTS
        ckpt = checkpoint_slots(ecfg, pages * kv_page_bytes(cfg, ecfg, ecfg.kv_dtype), gdn_slot_bytes(cfg, ecfg.dtype))
        host = host_checkpoint_rows(ecfg, ckpt, gdn_slot_bytes(cfg, ecfg.dtype), ecfg.device)
        host_kv = host_kv_rows(ecfg, ckpt, kv_page_bytes(cfg, ecfg, ecfg.kv_dtype))
    cache_dtype = KV_DTYPES.get(ecfg.kv_dtype, torch.float32)
    mtp = cfg.mtp_num_hidden_layers if ecfg.spec == "mtp" else 0
    return StateShape(pages, ecfg.page_size, slots, cache_dtype, DTYPES[ecfg.dtype], mtp_layers=mtp,
                      checkpoint_slots=ckpt, host_checkpoints=host, host_kv_pages=host_kv,
                      v_dtype=V_DTYPES.get(ecfg.kv_dtype))


def weight_plan(ecfg: EngineConfig, cfg: ModelConfig):
    """(recipe, as_stored) for --weights and the checkpoint's config. as_stored: the checkpoint's own quantized
    weights load as they are (official block fp8 -> `fp8-block`, compressed-tensors W4A16 -> `int4-default` or
    `int4-sym`) with --weights auto or the stored format; else the checkpoint is read as bf16 (quantized
    checkpoints dequantized) and --weights fp8|int4 converts it in place. An fp8 checkpoint whose blocks cannot
    be kept (block size, fused parts not multiples of 128 rows) is dequantized under auto, an error with fp8."""
    stored, why_not = stored_recipe(cfg)
    w = ecfg.weights
    if why_not is not None and w == "fp8":
        raise CheckpointError(f"--weights fp8: this fp8 checkpoint cannot load as stored: {why_not} "
                              "(use --weights bf16 or int4)")
    if why_not is not None and w == "auto":
        log.warning("fp8 checkpoint loads dequantized to %s: %s", ecfg.dtype, why_not)
    recipe = resolve_weights(cfg, w)
    return recipe, stored is not None and recipe == stored


def plan_for_serve(cfg: ModelConfig, ecfg: EngineConfig, weights: str) -> MemoryPlan:
    """The plan serve runs before loading weights; raises PlanError with exact figures unless it fits.
    `weights` may be 'auto' (resolved from the checkpoint config); ecfg.device should be resolved."""
    ecfg.validate()
    available, name = device_memory(ecfg)
    plan = plan_memory(cfg, ecfg, weights=resolve_weights(cfg, weights), device_bytes=available,
                       device_name=name, device=resolve_device(ecfg))
    return check_plan(plan)


def load_model(model: str | None, ecfg: EngineConfig) -> Loaded:
    path = resolve_model_path(model)
    if ecfg.tensor_parallel > 1:
        return _load_sharded(path, ecfg)
    if is_artifact_path(path):
        return _load_artifact(path, ecfg)
    cfg = apply_rope_scaling(load_model_config(path), ecfg.rope_scaling)
    ecfg = resolve_engine_config(cfg, ecfg)
    recipe, as_stored = weight_plan(ecfg, cfg)
    plan = plan_for_serve(cfg, ecfg, recipe)  # before any weight is read: fail fast with figures
    log.info("memory plan (%s):\n%s", plan.device_name, plan.table())
    ckpt = HFCheckpoint(path)
    tok = Tokenizer.from_dir(path)
    device = torch.device(ecfg.device)
    dtype = DTYPES[ecfg.dtype]
    t0 = time.monotonic()
    with_mtp = ecfg.spec == "mtp"
    if as_stored:
        net = load_quantized_checkpoint(ckpt, recipe, dtype, device, with_mtp=with_mtp)
    else:
        net = Qwen35ForCausalLM(cfg, dtype=dtype, device=device, with_mtp=with_mtp)
        load_weights(net, ((n, t.to(device=device, dtype=dtype)) for n, t in ckpt.iter_tensors(dtype=dtype)),
                     str(path))
        if recipe != "bf16":
            quantize_model(net, recipe)
    _load_vision(net, ckpt, ecfg, dtype, device)
    name = getattr(recipe, "name", recipe)
    log.info("loaded %s (%s, %s, %s on %s) in %.1f s", path, cfg.model_type, name, ecfg.dtype, device,
             time.monotonic() - t0)
    return Loaded(path, cfg, ecfg, net, tok, device, plan, sampling=sampling_defaults(ecfg, path))


def sampling_defaults(ecfg: EngineConfig, path: Path, artifact_config: dict | None = None) -> SamplingDefaults:
    """The sampling defaults --generation-config names, logged once."""
    d = load_sampling_defaults(ecfg.generation_config, path, artifact_config)
    log.info("sampling defaults for fields a request leaves out: %s (%s)", d.describe(), d.source)
    return d


def _load_sharded(path: Path, ecfg: EngineConfig) -> Loaded:
    """Tensor parallelism (docs/tensor-parallel.md): this process is rank 0; the others are spawned here (or were
    started by a launcher such as torchrun, in which case those processes follow rank 0 from inside this call
    and exit when it closes). Every rank reads only its slices of the checkpoint."""
    if is_artifact_path(path):
        raise ConfigError(f"{path}: a .hinfer artifact cannot be split over ranks yet; give the checkpoint folder")
    cfg = apply_rope_scaling(load_model_config(path), ecfg.rope_scaling)
    ecfg = resolve_engine_config(cfg, ecfg)
    recipe, _ = weight_plan(ecfg, cfg)
    n = ecfg.tensor_parallel
    rank = launcher_rank(n)
    if rank:  # a launcher's follower process: serve rank 0's steps, then end (nothing here is for this process)
        raise SystemExit(follow(rank, n, "env://", path, cfg, ecfg, recipe))
    plan = plan_for_serve(cfg, ecfg, recipe)
    log.info("memory plan per rank (%s):\n%s", plan.device_name, plan.table())
    tok = Tokenizer.from_dir(path)
    t0 = time.monotonic()
    net, ranks = start_ranks(path, cfg, ecfg, recipe)
    _load_vision(net, HFCheckpoint(path), ecfg, DTYPES[ecfg.dtype], ranks.device)  # rank 0 encodes every image
    log.info("loaded %s over %d ranks (%s, %s, %s on %s) in %.1f s", path, n, cfg.model_type,
             getattr(recipe, "name", recipe), ecfg.dtype, ranks.device, time.monotonic() - t0)
    return Loaded(path, cfg, ecfg, net, tok, ranks.device, plan, ranks, sampling_defaults(ecfg, path))


def start_ranks(path: Path | None, cfg: ModelConfig, ecfg: EngineConfig, recipe
                ) -> tuple[Qwen35ForCausalLM, Ranks]:  # fmt: skip
    """This process as rank 0 of `ecfg.tensor_parallel`: the other ranks started (or joined, under a launcher), each
    loading its shard of the checkpoint at `path` (random at its shapes with no path), then rank 0's own. Every
    rank reports before any raises, so none is left waiting. -> (rank 0's shard, the group)."""
    ranks = Ranks(ecfg.tensor_parallel, path, cfg, ecfg, recipe)
    net, error = None, None
    try:
        net = load_rank_model(path, cfg, ecfg, recipe, ranks.tp, ranks.device)
    except Exception as e:
        error = e
    ranks.ready(error)
    assert net is not None
    return net, ranks


def _load_vision(net: Qwen35ForCausalLM, ckpt: HFCheckpoint, ecfg: EngineConfig, dtype, device) -> None:
    """The vision tower in the activation dtype, when the checkpoint has one and --no-vision is not given."""
    vision = net.cfg.vision
    if vision is None or not ecfg.vision:
        return
    if not ckpt.has_visual:
        log.info("%s: config has a vision tower but the checkpoint has no model.visual.* tensors: text only",
                 ckpt.path)
        return
    if vision.out_hidden_size != net.cfg.hidden_size:
        raise ConfigError(f"{ckpt.path}: vision_config.out_hidden_size {vision.out_hidden_size} != hidden_size "
                          f"{net.cfg.hidden_size}")  # fmt: skip
    net.visual = VisionEncoder(vision, dtype=dtype, device=device)
    load_vision_weights(net.visual, ((n, t.to(device)) for n, t in ckpt.iter_visual(dtype)), str(ckpt.path))


def _load_artifact(path: Path, ecfg: EngineConfig) -> Loaded:
    """A .hinfer file: config and tokenizer from its metadata, weights memory-mapped straight to the device."""
    art = open_artifact(path)  # header only: version-checked before anything else
    cfg, tok = art.load_config_and_tokenizer()
    cfg = apply_rope_scaling(cfg, ecfg.rope_scaling)
    ecfg = resolve_engine_config(cfg, ecfg)
    ecfg = replace(ecfg, vision=ecfg.vision and art.has_visual)  # the plan counts the tower only when it loads
    plan_recipe, requantize = engine_weights(art, ecfg.weights)
    plan = plan_for_serve(cfg, ecfg, plan_recipe)
    log.info("memory plan (%s):\n%s", plan.device_name, plan.table())
    device, t0 = torch.device(ecfg.device), time.monotonic()
    net = load_artifact_model(art, cfg, DTYPES[ecfg.dtype], device, with_mtp=ecfg.spec == "mtp",
                              with_vision=ecfg.vision)  # fmt: skip
    if requantize:
        quantize_model(net, requantize)
    log.info("loaded %s (v%d, %s, %s on %s) in %.1f s", path, art.version, plan_recipe, ecfg.dtype, device,
             time.monotonic() - t0)
    return Loaded(path, cfg, ecfg, net, tok, device, plan,
                  sampling=sampling_defaults(ecfg, path, art.generation_config()))


def build_core(loaded: Loaded) -> EngineCore:
    shape = state_shape(loaded.cfg, loaded.ecfg, loaded.plan)
    core = make_core(loaded.cfg, loaded.model, loaded.tokenizer, loaded.ecfg, loaded.device, shape, loaded.ranks)
    core.sampling_defaults = loaded.sampling
    return core


def warm_cudnn_prefill(model: Qwen35ForCausalLM, ecfg: EngineConfig, device: torch.device) -> None:
    """With prefill attention on cuDNN (HINFER_PREFILL_CUDNN not `0`), build its execution plans for every part shape
    a full chunk can bring (attention_cudnn.plan_shapes) now, not on the first request of each shape (by default
    only those shapes run on cuDNN); a shape cuDNN refuses leaves prefill to the Triton kernel, as at run time."""
    from hinfer.ops.triton.attention_cudnn import cudnn_prefill_enabled, cudnn_prefill_failed, warm_plans

    if not cudnn_prefill_enabled(device) or model.dtype not in (torch.bfloat16, torch.float16):
        return
    cfg = model.cfg
    try:
        n, secs = warm_plans(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, model.dtype, device,
                             ecfg.prefill_chunk, ecfg.max_context, cfg.head_dim**-0.5)  # fmt: skip
    except RuntimeError as e:
        cudnn_prefill_failed(e)
        return
    log.info("prefill attention on cuDNN: %d part shapes planned in %.1f s", n, secs)


def make_core(
    cfg: ModelConfig,
    model: Qwen35ForCausalLM,
    tokenizer: Tokenizer,
    ecfg: EngineConfig,
    device: torch.device,
    shape: StateShape | None = None,
    ranks: Ranks | None = None,
) -> EngineCore:
    """State pool, sampler, runner (+ CUDA graphs) and core around a loaded model. `ecfg` must be resolved.
    With `ranks` (tensor parallelism) the state is this rank's shard, and state and runner tell the other ranks."""
    if ecfg.lm_head != "keep":
        quantize_head(model, ecfg.lm_head)
    lay_out_for_serving(model, device)
    shape = shape or state_shape(cfg, ecfg)
    sampler = Sampler(cfg.vocab_size, device, max_rows=ecfg.max_concurrency, num_real_tokens=tokenizer.vocab_size)
    if ranks is None:
        runner = ModelRunner(model, ModelState(cfg, shape, device), sampler)
    else:
        runner = LeaderRunner(model, LeaderState(model.cfg, shape, device, ranks), sampler, ranks)
    if device.type == "cuda" and ecfg.cuda_graphs:
        runner.capture_graphs(ecfg.max_concurrency, ecfg.max_context)
    if ranks is None:
        warm_cudnn_prefill(model, ecfg, device)
    eos = sorted(set(cfg.eos_token_ids) | set(tokenizer.eos_token_ids))
    return EngineCore(runner, tokenizer, ecfg, eos)


def create_engine(model: str | None, ecfg: EngineConfig):
    """-> (Engine, Tokenizer, model name) for the server."""
    loaded = load_model(model, ecfg)
    name = "demo" if model in (None, "", "demo") else loaded.path.name
    return Engine(build_core(loaded), name), loaded.tokenizer, name
