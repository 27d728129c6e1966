"""The `.hinfer` artifact: one safetensors file holding a model in the engine's own layout (docs/artifact.md).

Metadata (all strings, structured values JSON-encoded): format, format_version, config, recipe, layout,
tokenizer_json, tokenizer_config, chat_template, generation_config, source. Tensors: the names of
`Qwen35ForCausalLM.state_dict()` after quantization (fused, int4 packed + scales + zeros, fp8 + scales; int4
routed experts as `mlp.experts_gate_up.{qweight,scales,zeros}` [E, N, ...], fp8 ones as
`mlp.experts_gate_up.{weight,scale}` [E, N, K] / [E, N] or [E, N/128, K/128]).
The vision tower, when the source checkpoint has one, follows as `visual.*` (its parameters' names, bf16, never
quantized; format v3). `layout` maps each quantized attribute to how it is rebuilt, so loading (hinfer/model/artifact_loader.py) never
re-runs a recipe: the model is built on the meta device, quantized objects are constructed from their stored
buffers, every other tensor is copied in, tensor by tensor from the memory-mapped file straight to the device.
"""

from __future__ import annotations

import json
import struct
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from hinfer.config import ModelConfig, load_model_config
from hinfer.errors import ConfigError, HinferError
from hinfer.quant.apply import RowSplitWeight
from hinfer.quant.experts import Fp8ExpertsWeight, Int4ExpertsWeight
from hinfer.quant.fp8 import Fp8Weight
from hinfer.quant.int4 import Int4Weight
from hinfer.quant.recipes import RECIPES, QuantRecipe, get_recipe
from hinfer.weights.hf_reader import MAX_HEADER, TORCH_TO_ST, read_header

FORMAT = "hinfer"
# Bump on any change an older reader would misread; keep reading every older version. v1: bf16, int4, fp8 and
# rowsplit weights (routed experts always in the model dtype). v2: adds the `int4_experts` and `fp8_experts`
# layout types (int4 / fp8 MoE routed experts, recipe target "experts"); a v1 file reads exactly as before.
# v3: adds the vision tower's `visual.*` tensors (an older reader would refuse them as unexpected).
FORMAT_VERSION = 3
VISUAL = "visual."  # prefix of the vision tower's tensors
SUFFIX = ".hinfer"
# files of a checkpoint folder carried as metadata: metadata key -> file name
AUX_FILES = {"config": "config.json", "generation_config": "generation_config.json",
             "tokenizer_json": "tokenizer.json", "tokenizer_config": "tokenizer_config.json",
             "chat_template": "chat_template.jinja"}  # fmt: skip


class ArtifactError(HinferError):
    """A .hinfer file that is not an artifact, is damaged, or comes from a newer hinfer."""


def is_artifact_path(path: str | Path) -> bool:
    p = Path(path)
    return p.suffix == SUFFIX and p.is_file()


# ---- layout of the quantized weights ----------------------------------------------------------------------
def _spec(m: nn.Module) -> dict[str, Any]:
    if isinstance(m, Int4Weight):
        return {"type": "int4", "in_features": m.in_features, "group": m.group}
    if isinstance(m, Fp8Weight):
        return {"type": "fp8", "block": None if m.block is None else list(m.block)}
    if isinstance(m, RowSplitWeight):
        return {"type": "rowsplit", "head": _spec(m.head)}
    if isinstance(m, Int4ExpertsWeight):
        return {"type": "int4_experts", "in_features": m.in_features, "group": m.group}
    if isinstance(m, Fp8ExpertsWeight):
        return {"type": "fp8_experts", "block": None if m.block is None else list(m.block)}
    raise TypeError(f"no artifact layout for {type(m).__name__}")


_QUANTIZED = (Int4Weight, Fp8Weight, RowSplitWeight, Int4ExpertsWeight, Fp8ExpertsWeight)


def quantized_layout(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Path of each quantized weight object (outermost only) -> how to rebuild it from its buffers."""
    out: dict[str, dict[str, Any]] = {}
    for name, m in model.named_modules():
        if isinstance(m, _QUANTIZED) and not any(name.startswith(p + ".") for p in out):
            out[name] = _spec(m)
    return out


def build_quantized(spec: dict[str, Any], prefix: str, get, dtype: torch.dtype) -> nn.Module:
    """A quantized weight object from its stored tensors (`get(name)` returns one, on the target device)."""
    kind = spec["type"]
    if kind == "int4":
        zeros = get(f"{prefix}.zeros", optional=True)
        return Int4Weight(get(f"{prefix}.qweight"), get(f"{prefix}.scales").to(dtype), zeros,
                          int(spec["in_features"]), int(spec["group"]))
    if kind == "fp8":
        block = spec.get("block")
        return Fp8Weight(get(f"{prefix}.weight"), get(f"{prefix}.scale"), None if block is None else tuple(block))
    if kind == "int4_experts":
        zeros = get(f"{prefix}.zeros", optional=True)
        return Int4ExpertsWeight(get(f"{prefix}.qweight"), get(f"{prefix}.scales").to(dtype), zeros,
                                 int(spec["in_features"]), int(spec["group"]))
    if kind == "fp8_experts":
        block = spec.get("block")
        return Fp8ExpertsWeight(get(f"{prefix}.weight"), get(f"{prefix}.scale"),
                                None if block is None else tuple(block))
    if kind == "rowsplit":
        return RowSplitWeight(build_quantized(spec["head"], f"{prefix}.head", get, dtype),
                              get(f"{prefix}.tail").to(dtype))
    raise ArtifactError(f"unknown quantized weight type {kind!r} (a newer hinfer wrote this file?)")


def recipe_meta(r: QuantRecipe) -> dict[str, Any]:
    d = asdict(r)
    d["targets"] = sorted(r.targets)
    return d


# ---- writing: header first, then the bytes tensor by tensor ---------------------------------------------------
@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n


class StreamWriter:
    """Writes a safetensors file whose tensors are all declared up front; their bytes then come one by one,
    in declaration order, so the whole model never has to be in memory."""

    def __init__(self, f: BinaryIO, entries: list[TensorEntry], metadata: dict[str, str]):
        header: dict[str, Any] = {"__metadata__": metadata}
        offset = 0
        for e in entries:
            if e.dtype not in TORCH_TO_ST:
                raise ValueError(f"{e.name}: dtype {e.dtype} has no safetensors code")
            header[e.name] = {"dtype": TORCH_TO_ST[e.dtype], "shape": list(e.shape),
                              "data_offsets": [offset, offset + e.nbytes]}
            offset += e.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, like the reference writer
        if len(raw) > MAX_HEADER:
            raise ValueError(f"artifact header is {len(raw)} bytes, over the safetensors limit")
        f.write(struct.pack("<Q", len(raw)) + raw)
        self.f, self.pending, self.data_bytes = f, list(reversed(entries)), offset

    def write(self, name: str, t: torch.Tensor) -> None:
        e = self.pending.pop() if self.pending else None
        if e is None or e.name != name:
            raise RuntimeError(f"artifact writer: got {name!r}, expected {e.name if e else 'nothing more'!r}")
        if t.dtype != e.dtype or tuple(t.shape) != e.shape:
            raise RuntimeError(f"artifact writer: {name} is {t.dtype} {tuple(t.shape)}, declared {e.dtype} {e.shape}")
        self.f.write(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().data)

    def close(self) -> None:
        if self.pending:
            raise RuntimeError(f"artifact writer: {len(self.pending)} tensors never written ({self.pending[-1].name})")


# ---- reading ----------------------------------------------------------------------------------------------
def _raw_metadata(path: Path) -> dict[str, str]:
    read_header(path)  # validates the safetensors structure and size (CheckpointError naming the file)
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n)).get("__metadata__") or {}
    return meta if isinstance(meta, dict) else {}


class Artifact:
    """An opened .hinfer file: metadata and tensor table read and version-checked; weights not yet touched."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ArtifactError(f"{self.path}: no such file")
        self.meta = _raw_metadata(self.path)
        if self.meta.get("format") != FORMAT:
            raise ArtifactError(f"{self.path}: not a hinfer artifact (a safetensors file without format=hinfer "
                                "metadata); make one with `hinfer convert`")
        v = self.meta.get("format_version", "")
        if not v.isdigit() or int(v) < 1:
            raise ArtifactError(f"{self.path}: bad format_version {v!r}")
        self.version = int(v)
        if self.version > FORMAT_VERSION:
            known = "v1" if FORMAT_VERSION == 1 else f"v1..v{FORMAT_VERSION}"
            raise ArtifactError(f"{self.path} was written by a newer hinfer (format v{self.version}); this hinfer "
                                f"reads {known}: upgrade hinfer to load it")
        try:
            self.recipe: dict[str, Any] = json.loads(self.meta["recipe"])
            self.layout: dict[str, dict[str, Any]] = json.loads(self.meta.get("layout", "{}"))
            self.source: dict[str, Any] = json.loads(self.meta.get("source", "{}"))
            self.config_text: str = self.meta["config"]
        except (KeyError, json.JSONDecodeError) as e:
            raise ArtifactError(f"{self.path}: damaged hinfer metadata ({e})") from None
        self.tensors = read_header(self.path)

    @property
    def has_visual(self) -> bool:
        """Holds the vision tower (format v3 and later, converted from a checkpoint that had one)."""
        return any(n.startswith(VISUAL) for n in self.tensors)

    @property
    def recipe_name(self) -> str:
        return str(self.recipe.get("name", "bf16"))

    @property
    def fmt(self) -> str:
        return str(self.recipe.get("fmt", "bf16"))

    def stored_recipe(self) -> QuantRecipe:
        """The recipe the stored tensors follow, rebuilt from the metadata rather than looked up by name (a v1
        int4 file of an MoE model holds its routed experts in bf16, unlike today's `int4-default`)."""
        known = {f.name for f in fields(QuantRecipe)}
        d = {k: v for k, v in self.recipe.items() if k in known}
        if isinstance(d.get("targets"), list):
            d["targets"] = frozenset(d["targets"])
        try:
            return QuantRecipe(**{"name": self.recipe_name, "fmt": self.fmt, **d})
        except (TypeError, ValueError) as e:
            raise ArtifactError(f"{self.path}: damaged recipe metadata ({e})") from None

    def generation_config(self) -> dict | None:
        """The carried generation_config.json, parsed (None when the file had none)."""
        text = self.meta.get("generation_config")
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ArtifactError(f"{self.path}: damaged generation_config metadata ({e})") from None

    def write_aux(self, folder: Path) -> None:
        """The carried files (config.json, tokenizer.json, ...) into `folder`, as in a checkpoint folder."""
        for key, fname in AUX_FILES.items():
            if self.meta.get(key):
                (folder / fname).write_text(self.meta[key], encoding="utf-8")

    def load_config_and_tokenizer(self) -> tuple[ModelConfig, Any]:
        """(ModelConfig, Tokenizer) parsed by the same code as a checkpoint folder's files."""
        from hinfer.tokenizer import Tokenizer

        with tempfile.TemporaryDirectory(prefix="hinfer-artifact-") as d:
            self.write_aux(Path(d))
            try:
                cfg = load_model_config(d)
            except ConfigError as e:
                raise ConfigError(f"{self.path}: config metadata: {e}") from None
            if not self.meta.get("tokenizer_json"):
                raise ArtifactError(f"{self.path}: has no tokenizer_json metadata")
            return cfg, Tokenizer.from_dir(d)


def open_artifact(path: str | Path) -> Artifact:
    return Artifact(path)


def engine_weights(art: Artifact, requested: str) -> tuple[str | QuantRecipe, str | None]:
    """(recipe for the memory plan, recipe to quantize with after loading or None) for --weights `requested`.
    The plan's recipe is the stored one's name, or the rebuilt recipe where the name now means something else."""
    if requested in ("auto", art.fmt) or (requested == "bf16" and art.fmt == "bf16"):
        stored = art.stored_recipe()
        named = get_recipe(art.recipe_name) if art.recipe_name in RECIPES else None
        return (art.recipe_name if stored == named else stored), None
    if art.fmt == "bf16" and requested in ("fp8", "int4"):
        r = get_recipe(requested).name
        return r, r
    raise ConfigError(f"{art.path} holds {art.fmt} weights (recipe {art.recipe_name}); --weights {requested} "
                      "cannot convert them: use --weights auto, or `hinfer convert` the checkpoint again")
