"""Synthetic checkpoints: the exact Hugging Face layout (names, shapes, dtypes, shards, index, config,
tokenizer) of a real Qwen3.5 model, filled with seeded random values.

Values are chosen so activations stay finite and non-trivial through every layer (the model's inputs to
each block are RMS-normalised, so unit-scale projections keep every stream near unit scale):
- Linear weights ~ normal(0, 1/sqrt(fan_in)): unit-variance inputs give unit-variance outputs. This covers
  q/k/v (+ gate), the GDN in-projections, MLP gate/up, experts, the router (logits ~ N(0,1): routing spreads
  over experts), shared_expert_gate, mtp.fc and lm_head (logits ~ N(0,1)).
- Output projections (o_proj, out_proj, down_proj, experts' down) ~ normal(0, 0.5/sqrt(fan_in)): each
  layer adds about half a unit to the residual stream, so it grows like sqrt(1 + L/4), not explosively.
- Embeddings ~ normal(0, 1).
- Zero-centred RMSNorm weights (the model scales by 1 + w) ~ normal(0, 0.1); the GDN gated norm has a plain
  weight, so normal(1, 0.1).
- conv1d (depthwise, kernel K) ~ normal(0, 1/sqrt(K)).
- A_log = log(uniform(0.5, 4)) and dt_bias ~ normal(-1, 0.1): with a = in_proj_a(x) ~ N(0, 1),
  softplus(a + dt_bias) averages ~0.45, so the per-token decay exp(g) spans roughly 0.15..0.8. The state
  keeps several tokens of memory, so a bug in carrying state between steps or chunks changes the output
  (the transformers init, A in (0.01, 16) with dt_bias 1, mostly wipes the state every token).
- The vision tower (`vision=True`, `model.visual.*`, hinfer/weights/visual_layout.py): LayerNorm weights
  ~ normal(1, 0.1), biases ~ normal(0, 0.02), the position grid ~ normal(0, 1), projections ~ normal(0,
  1/sqrt(fan_in)) over every input dim (the patch Conv3d's too), what each block adds to its stream ~ normal(0,
  0.5/sqrt(fan_in)).
Every tensor draws from its own torch.Generator seeded by (seed, crc32(name)), so a tensor's values do not
depend on the shard size, the fp8 flag or the order of generation; fp8 weights are the bf16 ones quantized,
and fused experts are the per-expert tensors stacked (same model either way).
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import sys
import zlib
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from hinfer.config import ModelConfig, find_config_file
from hinfer.errors import CheckpointError, ConfigError
from hinfer.fixtures import tokenizer_dir as default_tokenizer_dir
from hinfer.quant.fp8_block import DEFAULT_BLOCK, quantize_fp8_block
from hinfer.weights.hf_layout import (
    EXPERT_ROLES,
    TensorSpec,
    default_modules_to_not_convert,
    fp8_quantization_config,
    fp8_scale_name,
    hf_tensor_specs,
    module_name,
    not_converted,
)
from hinfer.weights.visual_layout import visual_tensor_specs

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
DEFAULT_GENERATION_CONFIG = {"bos_token_id": 248044, "eos_token_id": [248046, 248044], "pad_token_id": 248044}
_CHUNK_ELEMS = 1 << 24  # fp32 scratch per generation step (64 MiB), so 248320 x 5120 tables stay cheap


# ---- config ----------------------------------------------------------------------------------------
def _layer_types(text: dict[str, Any], n: int) -> list[str]:
    """The first n layer types (the config's list, extended by full_attention_interval if too short),
    with at least one full-attention layer: the model and its KV pool need one."""
    interval = int(text.get("full_attention_interval", 4))
    given = list(text.get("layer_types") or [])
    types = [given[i] if i < len(given) else
             ("full_attention" if (i + 1) % interval == 0 else "linear_attention") for i in range(n)]
    if "full_attention" not in types:
        types[-1] = "full_attention"
    return types


def build_config(raw: dict[str, Any], *, layers: int | None, overrides: dict[str, Any] | None,
                 quantization: dict[str, Any] | None, vision_overrides: dict[str, Any] | None = None
                 ) -> dict[str, Any]:  # fmt: skip
    """A copy of config.json (same keys and order) with overrides (the text model's; the vision tower's apart),
    the layer count and quantization_config."""
    raw = json.loads(json.dumps(raw))
    wrapper = raw.get("model_type") in ("qwen3_5", "qwen3_5_moe")
    text = raw.setdefault("text_config", {}) if wrapper else raw
    if vision_overrides:
        if not isinstance(raw.get("vision_config"), dict):
            raise ConfigError("vision overrides given, but the config has no vision_config")
        raw["vision_config"].update(vision_overrides)
    for k, v in (overrides or {}).items():
        text[k] = v
        if wrapper and k == "tie_word_embeddings":
            raw[k] = v  # the wrapper repeats it at top level; keep both in agreement
    if layers is not None:
        if layers < 1:
            raise ConfigError(f"--layers must be >= 1, got {layers}")
        text["num_hidden_layers"] = layers
        text["layer_types"] = _layer_types(text, layers)
    if quantization is not None:
        raw["quantization_config"] = quantization
    return raw


def _json_indent(text: str) -> int:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped and len(stripped) < len(line):
            return len(line) - len(stripped)
    return 2


# ---- values ----------------------------------------------------------------------------------------
def _fill(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator, mean: float, std: float) -> torch.Tensor:
    """normal(mean, std) drawn in fp32 chunks of rows and rounded to `dtype`."""
    out = torch.empty(shape, dtype=dtype)
    flat = out.view(shape[0], -1) if len(shape) > 1 else out.view(-1, 1)
    rows = max(1, _CHUNK_ELEMS // max(1, flat.shape[1]))
    for r in range(0, flat.shape[0], rows):
        block = torch.empty(flat[r:r + rows].shape, dtype=torch.float32)
        block.normal_(mean, std, generator=gen)
        flat[r:r + rows] = block
    return out


def synth_tensor(name: str, spec: TensorSpec, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The synthetic value of one tensor (see the module docstring for the scales)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    shape, role = spec.shape, spec.role
    if role == "embed":
        return _fill(shape, dtype, gen, 0.0, 1.0)
    if role == "norm":
        return _fill(shape, dtype, gen, 0.0, 0.1)
    if role == "gdn_norm":
        return _fill(shape, dtype, gen, 1.0, 0.1)
    if role == "conv1d":
        return _fill(shape, dtype, gen, 0.0, 1.0 / math.sqrt(shape[-1]))
    if role == "A_log":
        return torch.empty(shape, dtype=torch.float32).uniform_(0.5, 4.0, generator=gen).log().to(dtype)
    if role == "dt_bias":
        return _fill(shape, dtype, gen, -1.0, 0.1)
    if role in EXPERT_ROLES:
        return _fused_experts(name, spec, seed, dtype)
    if role in ("linear", "lm_head", "router", "gate_scalar", "mtp_fc"):
        return _fill(shape, dtype, gen, 0.0, 1.0 / math.sqrt(shape[-1]))
    if role == "linear_out":
        return _fill(shape, dtype, gen, 0.0, 0.5 / math.sqrt(shape[-1]))
    if role == "vision_norm":
        return _fill(shape, dtype, gen, 1.0, 0.1)
    if role == "vision_bias":
        return _fill(shape, dtype, gen, 0.0, 0.02)
    if role == "vision_pos":
        return _fill(shape, dtype, gen, 0.0, 1.0)
    if role in ("vision_linear", "vision_linear_out"):
        scale = 0.5 if role == "vision_linear_out" else 1.0
        return _fill(shape, dtype, gen, 0.0, scale / math.sqrt(math.prod(shape[1:])))
    raise ValueError(f"no synthetic rule for {name} (role {role!r})")


def _fused_experts(name: str, spec: TensorSpec, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Fused experts hold exactly the per-expert values ([gate; up] rows, as transformers fuses them), so
    the fused and per-expert checkpoints of one seed are the same model."""
    experts = module_name(name)  # `....mlp.experts`
    e, rows, cols = spec.shape
    out = torch.empty(spec.shape, dtype=dtype)
    for x in range(e):
        if spec.role == "experts_in":
            half = TensorSpec((rows // 2, cols), dtype, "linear")
            out[x, : rows // 2] = synth_tensor(f"{experts}.{x}.gate_proj.weight", half, seed, dtype)
            out[x, rows // 2:] = synth_tensor(f"{experts}.{x}.up_proj.weight", half, seed, dtype)
        else:
            down = TensorSpec((rows, cols), dtype, "linear_out")
            out[x] = synth_tensor(f"{experts}.{x}.down_proj.weight", down, seed, dtype)
    return out


# ---- shards ----------------------------------------------------------------------------------------
class _ShardWriter:
    """Holds at most one shard's tensors; shards get their final names once the count is known."""

    def __init__(self, out: Path, shard_bytes: int) -> None:
        self.out, self.shard_bytes = out, shard_bytes
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.shards: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0
        self.n_tensors = 0

    def add(self, group: dict[str, torch.Tensor]) -> None:
        """Add tensors that must share a shard (an fp8 weight and its scale)."""
        size = sum(t.numel() * t.element_size() for t in group.values())
        if self.pending and self.pending_bytes + size > self.shard_bytes:
            self.flush()
        self.pending.update(group)
        self.pending_bytes += size
        self.total_bytes += size
        self.n_tensors += len(group)

    def flush(self) -> None:
        if not self.pending:
            return
        tmp = self.out / f".shard-{len(self.shards):05d}.safetensors.tmp"
        save_file(self.pending, str(tmp), metadata={"format": "pt"})
        self.shards.append((tmp, list(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def finish(self) -> None:
        self.flush()
        n = len(self.shards)
        weight_map: dict[str, str] = {}
        for i, (tmp, names) in enumerate(self.shards, start=1):
            final = f"model-{i:05d}-of-{n:05d}.safetensors"
            tmp.replace(self.out / final)
            (self.out / final).chmod(0o644)  # save_file leaves 0600; checkpoints are usually shared read-only
            weight_map.update(dict.fromkeys(names, final))
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        (self.out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _copy_side_files(src_dir: Path, out: Path, tokenizer_dir: Path | None) -> None:
    gen = src_dir / "generation_config.json"
    if gen.is_file():
        shutil.copyfile(gen, out / "generation_config.json")
    else:
        (out / "generation_config.json").write_text(json.dumps(DEFAULT_GENERATION_CONFIG, indent=2) + "\n")
    tok = tokenizer_dir or default_tokenizer_dir()  # $HINFER_FIXTURES/qwen3.5-tokenizer, else the packaged one
    missing = [f for f in TOKENIZER_FILES if not (tok / f).is_file()]
    if missing and tokenizer_dir is not None:
        raise CheckpointError(f"{tok}: tokenizer files missing: {', '.join(missing)}")
    if missing:
        log.warning("%s: no tokenizer files found; the checkpoint has none (pass tokenizer_dir)", tok)
        return
    for f in TOKENIZER_FILES:
        shutil.copyfile(tok / f, out / f)


# ---- entry point -----------------------------------------------------------------------------------
def write_synthetic_checkpoint(
    config_src: Path,
    out: Path,
    *,
    layers: int | None = None,
    fp8: bool = False,
    fused_experts: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
    shard_bytes: int = 2 * 2**30,
    tokenizer_dir: Path | None = None,
    overrides: dict[str, Any] | None = None,
    fp8_block: tuple[int, int] = DEFAULT_BLOCK,
    progress: bool = True,
    vision: bool = False,
    vision_overrides: dict[str, Any] | None = None,
) -> Path:
    """Write a synthetic HF checkpoint of the model described by `config_src` (a config.json or a folder
    holding one) into `out`; returns `out`. vision: also the vision tower's tensors (the config's
    vision_config, with `vision_overrides`), always in `dtype`."""
    cfg_path = find_config_file(config_src)
    src_text = cfg_path.read_text()
    try:
        raw = json.loads(src_text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{cfg_path}: invalid JSON ({e})") from None
    # Shapes first (the quantization list depends on them), then the final config with that list.
    cfg = ModelConfig.from_dict(build_config(raw, layers=layers, overrides=overrides, quantization=None,
                                             vision_overrides=vision_overrides), source=str(cfg_path))  # fmt: skip
    if vision and cfg.vision is None:
        raise ConfigError(f"{cfg_path}: --vision needs a config with a vision_config (a multimodal model type)")
    if vision and cfg.vision is not None and cfg.vision.out_hidden_size != cfg.hidden_size:
        raise ConfigError(f"{cfg_path}: vision_config.out_hidden_size {cfg.vision.out_hidden_size} != hidden_size "
                          f"{cfg.hidden_size}")  # fmt: skip
    skip = default_modules_to_not_convert(cfg) if fp8 else None
    quant = fp8_quantization_config(skip, fp8_block) if fp8 else None
    final = build_config(raw, layers=layers, overrides=overrides, quantization=quant,
                         vision_overrides=vision_overrides)  # fmt: skip
    ModelConfig.from_dict(final, source=str(cfg_path))

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stale = [*out.glob("model-*.safetensors"), *out.glob(".shard-*.tmp"), *out.glob("model.safetensors")]
    for old in stale:
        old.unlink()  # a previous run's weights would otherwise mix with ours
    (out / "config.json").write_text(json.dumps(final, indent=_json_indent(src_text), ensure_ascii=False) + "\n")
    _copy_side_files(cfg_path.parent, out, tokenizer_dir)

    specs = hf_tensor_specs(cfg, fused_experts=fused_experts, dtype=dtype)
    if vision and cfg.vision is not None:  # never fp8: the tower stays in the activation dtype
        specs |= visual_tensor_specs(cfg.vision, dtype)
    writer = _ShardWriter(out, shard_bytes)
    total = sum(math.prod(s.shape) for s in specs.values())
    show = progress and sys.stderr.isatty()
    with tqdm(total=total, unit="param", unit_scale=True, disable=not show, desc=f"synth {out.name}") as bar:
        for name, spec in specs.items():
            w = synth_tensor(name, spec, seed, dtype)
            if fp8 and spec.is_linear and not not_converted(module_name(name), skip):
                q, s = quantize_fp8_block(w, fp8_block)
                writer.add({name: q, fp8_scale_name(name): s})
            else:
                writer.add({name: w})
            bar.update(w.numel())
            del w
    writer.finish()
    log.info("%s: %d tensors, %.2f GB in %d shard(s)", out, writer.n_tensors, writer.total_bytes / 1e9,
             len(writer.shards))
    return out
