"""HFCheckpoint: a Hugging Face safetensors checkpoint directory (sharded with an index, or one
model.safetensors), checked on open and streamed tensor by tensor.

Names come out with the `model.language_model.` / `model.` prefix stripped (`layers.N...`,
`embed_tokens.weight`, `norm.weight`, `lm_head.weight`, `mtp.*` as is); vision tensors come apart (`iter_visual`).
Pre-quantized weights - official block-scaled FP8 (`weight` + `weight_scale_inv`) and compressed-tensors
pack-quantized int4 (`weight_packed` + `weight_scale` + ..., one logical `X.weight`) - are dequantized by
`iter_tensors` / `read_tensors` (the reference path, conversion), or handed over as stored by `iter_stored`
(`Fp8BlockTensor` / `PackedInt4Tensor`) for loading as they are (hinfer/model/quantized_loader.py)."""

from __future__ import annotations

import json
import logging
import math
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tqdm import tqdm

from hinfer.config import ModelConfig, find_config_file, load_model_config
from hinfer.errors import CheckpointError
from hinfer.quant.fp8_block import DEFAULT_BLOCK, FP8_DTYPE, Fp8BlockTensor, dequantize_fp8_block, scale_shape
from hinfer.weights import compressed_tensors as ct
from hinfer.weights.hf_layout import module_name, not_converted, strip_prefix
from hinfer.weights.shard_layout import TensorSlice, coarse_slice, pad, take

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
VISUAL_PREFIXES = ("model.visual.", "visual.")
SCALE_SUFFIX = "_scale_inv"

# ---- safetensors headers ---------------------------------------------------------------------------
# safetensors dtype codes -> torch dtypes
ST_DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
TORCH_TO_ST = {v: k for k, v in ST_DTYPES.items()}
MAX_HEADER = 100 * 2**20  # the safetensors format's own limit


@dataclass(frozen=True)
class StoredTensor:
    name: str  # as stored (full checkpoint name)
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # start of its bytes within the data region
    nbytes: int


def read_header(path: Path) -> dict[str, StoredTensor]:
    """Tensors of one .safetensors file, in file order; CheckpointError naming the file if it is not
    a complete safetensors file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: not a safetensors file (only {size} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise CheckpointError(f"{path}: truncated or corrupt safetensors header "
                                      f"(header says {n} bytes, file has {size})")
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path}: corrupt safetensors header (invalid JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not an object)")
    out: dict[str, StoredTensor] = {}
    data_end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = ST_DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor {name!r} has a bad header entry {info!r}") from None
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes or begin < 0:
            raise CheckpointError(f"{path}: tensor {name!r} spans {end - begin} bytes, "
                                  f"its shape {list(shape)} {info['dtype']} needs {nbytes}")
        data_end = max(data_end, end)
        out[name] = StoredTensor(name, path, dtype, shape, begin, nbytes)
    if 8 + n + data_end > size:
        raise CheckpointError(f"{path}: truncated: its tensors need {8 + n + data_end} bytes, the file has {size}")
    return dict(sorted(out.items(), key=lambda kv: kv[1].offset))


# ---- the checkpoint --------------------------------------------------------------------------------
def is_visual(name: str) -> bool:
    return name.startswith(VISUAL_PREFIXES)


class HFCheckpoint:
    """A checkpoint directory. Opening validates config.json, the index, every shard's header and the FP8
    weight/scale pairs (or compressed-tensors int4 tensor sets), so a broken download fails here with the file
    named, before any weight is read."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: not a checkpoint directory")
        self.config: ModelConfig = load_model_config(self.path)
        cfg_file = find_config_file(self.path)
        self.quantization: dict[str, Any] | None = _quantization_config(cfg_file)
        self.quant_method: str | None = (self.quantization or {}).get("quant_method")
        # compressed-tensors: validated against what hinfer runs (one-line CheckpointError otherwise)
        self.compressed: ct.CTConfig | None = (ct.parse_config(self.quantization, str(cfg_file))
                                               if self.quant_method == ct.METHOD else None)
        self.fp8_block: tuple[int, int] = _fp8_block(self.quantization if self.quant_method == "fp8" else None,
                                                     self.path / "config.json")
        self._stored = self._read_layout()  # raw name -> StoredTensor, shard order then file order
        self._text = {n: t for n, t in self._stored.items() if not is_visual(n)}
        self._stripped = _strip_all(self._text, self.path)
        self._check_fp8()
        self._packed = self._check_packed()  # raw module name -> {component: raw tensor name}
        self._logical = self._logical_names()  # logical stripped name -> (raw name or module, kind)

    def __repr__(self) -> str:
        return f"HFCheckpoint({str(self.path)!r}, {self.config.model_type}, {len(self._text)} text tensors)"

    # ---- layout ---------------------------------------------------------------------------------
    def _read_layout(self) -> dict[str, StoredTensor]:
        index = self.path / INDEX_FILE
        if index.is_file():
            return _read_index(index)
        single = self.path / SINGLE_FILE
        if single.is_file():
            return read_header(single)
        raise CheckpointError(f"{self.path}: no {INDEX_FILE} or {SINGLE_FILE}")

    def _check_fp8(self) -> None:
        skip = (self.quantization or {}).get("modules_to_not_convert") or []
        where = self.path / "config.json"
        for name, t in self._text.items():
            if name.endswith(SCALE_SUFFIX):
                base = self._text.get(name[: -len(SCALE_SUFFIX)])
                if base is None or base.dtype != FP8_DTYPE:
                    raise CheckpointError(f"{t.file}: {name} has no float8_e4m3fn weight "
                                          f"{name[: -len(SCALE_SUFFIX)]} to scale")
                continue
            if t.dtype == torch.float8_e5m2:
                raise CheckpointError(f"{t.file}: {name} is float8_e5m2; only e4m3 FP8 checkpoints are supported")
            if t.dtype != FP8_DTYPE:
                continue
            if self.quantization is None:
                raise CheckpointError(f"{where}: no quantization_config, but {name} is stored as float8")
            if self.quant_method != "fp8":
                raise CheckpointError(f"{where}: quantization_config is {self.quant_method}, but {name} is stored "
                                      "as float8")
            mod = module_name(name)
            if not_converted(mod, skip) or not_converted(strip_prefix(mod), skip):
                raise CheckpointError(f"{where}: {mod} is in modules_to_not_convert, but {name} is stored as float8")
            scale = self._text.get(name + SCALE_SUFFIX)
            if scale is None:
                raise CheckpointError(f"{t.file}: float8 tensor {name} has no {name + SCALE_SUFFIX}")
            want = scale_shape(t.shape, self.fp8_block)
            if scale.shape != want:
                raise CheckpointError(f"{scale.file}: {scale.name} has shape {list(scale.shape)}, expected "
                                      f"{list(want)} for {list(t.shape)} with block {list(self.fp8_block)}")

    def _check_packed(self) -> dict[str, dict[str, str]]:
        """compressed-tensors tensor sets by module, each complete and of consistent dtypes and shapes."""
        where = self.path / "config.json"
        if self.compressed is None:
            for name, t in self._text.items():
                if name.endswith("." + ct.PACKED):
                    raise CheckpointError(f"{t.file}: {name} is a compressed-tensors packed weight, but {where} "
                                          "has no compressed-tensors quantization_config")
            return {}
        packed: dict[str, dict[str, str]] = {}
        for name in self._text:
            mod, _, comp = name.rpartition(".")
            if comp in ct.COMPONENTS:
                packed.setdefault(mod, {})[comp] = name
        group = self.compressed.group_size
        for mod, parts in packed.items():
            missing = [c for c in (ct.PACKED, ct.SCALE, ct.SHAPE) if c not in parts]
            some = self._text[next(iter(parts.values()))]
            if missing:
                raise CheckpointError(f"{some.file}: {mod} has {', '.join(sorted(parts))} but no {missing[0]}")
            if mod + ".weight" in self._text:
                raise CheckpointError(f"{some.file}: {mod} has both a plain weight and a packed one")
            p, s, shp = (self._text[parts[c]] for c in (ct.PACKED, ct.SCALE, ct.SHAPE))
            n, words = (p.shape + (0, 0))[:2]
            bad = None
            if p.dtype != torch.int32 or len(p.shape) != 2:
                bad = f"{p.name} is {p.dtype} {list(p.shape)}, expected int32 [N, K/8]"
            elif not s.dtype.is_floating_point or len(s.shape) != 2 or s.shape[0] != n \
                    or not math.ceil((8 * words - 7) / group) <= s.shape[1] <= math.ceil(8 * words / group):
                bad = f"{s.name} is {s.dtype} {list(s.shape)}, expected a float [{n}, K/{group}] scale"
            elif shp.shape != (2,) or shp.dtype.is_floating_point:
                bad = f"{shp.name} is {shp.dtype} {list(shp.shape)}, expected 2 integers"
            elif ct.ZERO in parts and (self._text[parts[ct.ZERO]].dtype, self._text[parts[ct.ZERO]].shape) not in (
                    (torch.int32, (math.ceil(n / 8), s.shape[1])), (torch.int8, (n, s.shape[1]))):
                z = self._text[parts[ct.ZERO]]
                bad = (f"{z.name} is {z.dtype} {list(z.shape)}, expected int32 {[math.ceil(n / 8), s.shape[1]]} "
                       f"(packed) or int8 {[n, s.shape[1]]}")
            if bad:
                raise CheckpointError(f"{p.file}: {bad}")
        return packed

    def _logical_names(self) -> dict[str, tuple[str, str]]:
        """Stripped logical name -> (raw name, kind) in reading order; kind plain | fp8 | int4 (raw = module)."""
        out: dict[str, tuple[str, str]] = {}
        for stripped, raw in self._stripped.items():
            if raw.endswith(SCALE_SUFFIX):
                continue  # read together with its weight
            mod, _, comp = raw.rpartition(".")
            if mod in self._packed and comp in ct.COMPONENTS:
                if comp == ct.PACKED:
                    out[strip_prefix(mod) + ".weight"] = (mod, "int4")
                continue
            out[stripped] = (raw, "fp8" if self._text[raw].dtype == FP8_DTYPE else "plain")
        return out

    # ---- queries --------------------------------------------------------------------------------
    def tensor_names(self, include_scales: bool = False) -> list[str]:
        """Stripped logical names of the text tensors, in reading order (a packed int4 set is one `X.weight`);
        include_scales: the stored names, FP8 scales and compressed-tensors parts included."""
        return list(self._stripped) if include_scales else list(self._logical)

    @property
    def has_visual(self) -> bool:
        """Holds the vision tower's tensors (`model.visual.*`)."""
        return len(self._stored) > len(self._text)

    def visual_shapes(self) -> dict[str, tuple[int, ...]]:
        """The vision tower's tensors from the headers alone: name without the prefix -> shape, in the order
        `iter_visual` yields them."""
        return {next(raw[len(p) :] for p in VISUAL_PREFIXES if raw.startswith(p)): t.shape
                for raw, t in self._stored.items() if is_visual(raw)}  # fmt: skip

    def iter_visual(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """The vision tower's tensors, named without the `model.visual.` prefix, floating ones cast to dtype."""
        with ExitStack() as stack:
            handles: dict[Path, Any] = {}
            for raw, t in self._stored.items():
                if not is_visual(raw):
                    continue
                if t.file not in handles:
                    handles[t.file] = stack.enter_context(safe_open(str(t.file), framework="pt"))
                x = handles[t.file].get_tensor(raw)
                if dtype is not None and x.is_floating_point():
                    x = x.to(dtype)
                yield next(raw[len(p) :] for p in VISUAL_PREFIXES if raw.startswith(p)), x

    @property
    def is_fp8(self) -> bool:
        return any(t.dtype == FP8_DTYPE for t in self._text.values())

    @property
    def is_int4(self) -> bool:
        """Holds compressed-tensors packed int4 weights."""
        return bool(self._packed)

    # ---- streaming ------------------------------------------------------------------------------
    def _stream(self, progress: bool) -> Iterator[tuple[str, str, dict[str, torch.Tensor]]]:
        """(logical name, kind, stored tensors) one logical tensor at a time: plain {"": x}, fp8 {"weight",
        "scale"}, int4 {component: tensor}."""
        n_visual = len(self._stored) - len(self._text)
        if n_visual:
            log.info("%s: %d vision tensors are read apart from the text model", self.path, n_visual)
        total = sum(t.nbytes for t in self._text.values())
        show = progress and sys.stderr.isatty()
        with ExitStack() as stack:
            handles: dict[Path, Any] = {}

            def load(raw: str) -> torch.Tensor:
                t = self._text[raw]
                if t.file not in handles:
                    handles[t.file] = stack.enter_context(safe_open(str(t.file), framework="pt"))
                bar.update(t.nbytes)
                return handles[t.file].get_tensor(t.name)

            bar = stack.enter_context(tqdm(total=total, unit="B", unit_scale=True, disable=not show,
                                           desc=f"reading {self.path.name}"))
            for name, (raw, kind) in self._logical.items():
                if kind == "int4":
                    yield name, kind, {c: load(r) for c, r in self._packed[raw].items()}
                elif kind == "fp8":
                    yield name, kind, {"weight": load(raw), "scale": load(raw + SCALE_SUFFIX)}
                else:
                    yield name, kind, {"": load(raw)}

    def _stored_tensor(self, name: str, kind: str, parts: dict[str, torch.Tensor]):
        if kind == "int4":
            return _packed_tensor(name, parts, self.compressed.group_size)  # type: ignore[union-attr]
        if kind == "fp8":
            return Fp8BlockTensor(parts["weight"], parts["scale"], self.fp8_block)
        return parts[""]

    def iter_tensors(
        self,
        dtype: torch.dtype | None = None,
        progress: bool = True,
        dequantize_fp8: bool = True,
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield (stripped name, tensor) one at a time. Floating tensors are cast to `dtype` when given;
        FP8 and packed int4 weights are dequantized to `dtype` (bfloat16 when None) and their scales not
        yielded, or with dequantize_fp8=False FP8 weights are yielded raw, each followed by its float32
        `*_scale_inv`."""
        for name, kind, parts in self._stream(progress):
            if kind == "fp8" and not dequantize_fp8:
                yield name, parts["weight"]
                yield name + SCALE_SUFFIX, parts["scale"]
                continue
            x = self._stored_tensor(name, kind, parts)
            if kind != "plain":
                yield name, x.dequantize(dtype or torch.bfloat16)
                continue
            if dtype is not None and x.is_floating_point() and x.dtype != dtype:
                x = x.to(dtype)
            yield name, x

    def iter_stored(
        self, progress: bool = True
    ) -> Iterator[tuple[str, torch.Tensor | Fp8BlockTensor | ct.PackedInt4Tensor]]:
        """Yield (stripped name, value) as stored, nothing cast: plain tensors, `Fp8BlockTensor` for an FP8
        weight with its scales, `PackedInt4Tensor` for a compressed-tensors int4 set (named `X.weight`)."""
        for name, kind, parts in self._stream(progress):
            yield name, self._stored_tensor(name, kind, parts)

    def iter_slices(
        self, slice_of: Callable[[str], TensorSlice | None], dtype: torch.dtype, skip: Callable[[str], bool],
        keep_stored: bool = False,
    ) -> Iterator[tuple[str, torch.Tensor | Fp8BlockTensor | ct.PackedInt4Tensor]]:
        """(stripped name, part) for a tensor-parallel rank: `slice_of(name)` (weights/shard_layout.py) names the
        part, and only its bytes are read (safetensors slice reads). FP8 and packed int4 weights read the rows or
        columns of their stored tensors (weights, scales, zero points) that the part covers, then dequantize to
        `dtype`; a part off their blocks, words or groups reads the whole tensor and cuts it. With `keep_stored` a part
        on those boundaries stays as stored (an `Fp8BlockTensor` or `PackedInt4Tensor` of its rows / columns, for
        quantized_loader.load_stored_weights). Names with skip(name) are not read at all."""
        with ExitStack() as stack:
            handles: dict[Path, Any] = {}

            def read(raw: str, s: TensorSlice | None) -> torch.Tensor:
                t = self._text[raw]
                if t.file not in handles:
                    handles[t.file] = stack.enter_context(safe_open(str(t.file), framework="pt"))
                if s is None:
                    return handles[t.file].get_tensor(raw)
                view = handles[t.file].get_slice(raw)
                lead = (slice(None),) * s.dim
                return torch.cat([view[(*lead, slice(p.start, p.stop))] for p in s.spans], dim=s.dim)

            for name, (raw, kind) in self._logical.items():
                if skip(name):
                    continue
                s = slice_of(name)
                if kind != "plain":
                    part = None if s is None else self._stored_part(name, raw, kind, s, read)
                    if part is None:
                        yield name, take(dict(self.read_tensors([name], dtype))[name], s, name, str(self.path))
                    elif keep_stored and not s.pad_to:
                        yield name, part
                    else:
                        yield name, pad(part.dequantize(dtype), s)
                    continue
                if s is None:
                    x = read(raw, None)
                else:
                    s.check(name, self._text[raw].shape, str(self._text[raw].file))
                    x = pad(read(raw, s), s)
                if x.is_floating_point() and x.dtype != dtype:
                    x = x.to(dtype)
                yield name, x

    def _stored_part(self, name: str, raw: str, kind: str, s: TensorSlice,
                     read: Callable[[str, TensorSlice | None], torch.Tensor]
                     ) -> Fp8BlockTensor | ct.PackedInt4Tensor | None:  # fmt: skip
        """A rank's part of an FP8 or packed int4 weight, as stored, from the rows / columns it covers (None when
        the part is off the format's boundaries); unpadded."""
        if kind == "fp8":
            t = self._text[raw]
            s.check(name, t.shape, str(t.file))
            lead = len(t.shape) - 2  # fused experts: blocks tile the last two dims
            scale = coarse_slice(s, s.dim, self.fp8_block[s.dim - lead]) if s.dim >= lead else s
            if scale is None:
                return None
            return Fp8BlockTensor(read(raw, s), read(raw + SCALE_SUFFIX, scale), self.fp8_block)
        comps = self._packed[raw]
        if ct.G_IDX in comps:  # columns permuted into groups: read whole
            return None
        n, k = (int(v) for v in read(comps[ct.SHAPE], None).tolist())
        s.check(name, (n, k), str(self.path))
        group = self.compressed.group_size  # type: ignore[union-attr]
        zero_rows = self._text[comps[ct.ZERO]].shape[0] if ct.ZERO in comps else n
        if s.dim == 0:  # rows: words and scales by row, packed zero points by 8 rows
            cuts = {ct.PACKED: s, ct.SCALE: s, ct.ZERO: s if zero_rows == n else coarse_slice(s, 0, 8)}
        else:  # columns: words by 8 columns, scales and zero points by group
            cuts = {ct.PACKED: coarse_slice(s, 1, 8), ct.SCALE: coarse_slice(s, 1, group),
                    ct.ZERO: coarse_slice(s, 1, group)}  # fmt: skip
        if any(cuts[c] is None for c in comps if c in cuts):
            return None
        parts = {c: read(r, cuts[c]) for c, r in comps.items() if c in cuts}
        rows = sum(p.size for p in s.spans)
        parts[ct.SHAPE] = torch.tensor([rows, k] if s.dim == 0 else [n, rows])
        return _packed_tensor(name, parts, group)

    def read_tensors(self, names: list[str], dtype: torch.dtype = torch.bfloat16) -> Iterator[tuple[str, torch.Tensor]]:
        """Just these tensors (stripped names), cast to `dtype`, FP8 and int4 weights dequantized; by positioned
        file reads, not a memory map, whose touched pages would stay resident and grow with the model
        (converting)."""
        with ExitStack() as stack:
            load = self._positioned_reader(stack)
            for name in names:
                raw, kind = self._logical[name] if name in self._logical else (self._stripped[name], "plain")
                if kind == "int4":
                    parts = {c: load(r) for c, r in self._packed[raw].items()}
                    packed = _packed_tensor(name, parts, self.compressed.group_size)  # type: ignore[union-attr]
                    yield name, packed.dequantize(dtype)
                    continue
                x = load(raw)
                if x.dtype == FP8_DTYPE:
                    x = dequantize_fp8_block(x, load(raw + SCALE_SUFFIX), self.fp8_block, dtype)
                elif x.is_floating_point() and x.dtype != dtype:
                    x = x.to(dtype)
                yield name, x

    def _positioned_reader(self, stack: ExitStack):
        files: dict[Path, tuple[Any, int]] = {}  # file -> (handle, start of its data region)

        def load(raw: str) -> torch.Tensor:
            t = self._text[raw]
            if t.file not in files:
                f = stack.enter_context(t.file.open("rb"))
                files[t.file] = (f, 8 + int.from_bytes(f.read(8), "little"))
            f, start = files[t.file]
            buf = torch.empty(t.nbytes, dtype=torch.uint8)
            f.seek(start + t.offset)
            if f.readinto(buf.numpy().data) != t.nbytes:
                raise CheckpointError(f"{t.file}: truncated reading {raw}")
            return buf.view(t.dtype).view(t.shape)

        return load


def _packed_tensor(name: str, parts: dict[str, torch.Tensor], group: int) -> ct.PackedInt4Tensor:
    shape = parts[ct.SHAPE].tolist()
    return ct.PackedInt4Tensor(parts[ct.PACKED], parts[ct.SCALE], (int(shape[0]), int(shape[1])),
                               parts.get(ct.ZERO), parts.get(ct.G_IDX), group, name)


def _read_index(index: Path) -> dict[str, StoredTensor]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TypeError
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{index}: invalid JSON ({e})") from None
    except (KeyError, TypeError):
        raise CheckpointError(f"{index}: no weight_map object of tensor name -> shard file") from None
    headers: dict[str, dict[str, StoredTensor]] = {}
    for shard in sorted(set(weight_map.values())):
        p = index.parent / shard
        if not p.is_file():
            raise CheckpointError(f"{p}: shard named by {index.name} is missing")
        headers[shard] = read_header(p)
    for name, shard in weight_map.items():
        if name not in headers[shard]:
            raise CheckpointError(f"{index}: tensor {name} is not in {shard}")
    # Shard order, then file order within a shard: sequential reads. Tensors a shard holds but the index
    # does not name are ignored, as transformers does.
    return {n: t for shard in headers for n, t in headers[shard].items() if weight_map.get(n) == shard}


def _strip_all(text: dict[str, StoredTensor], where: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text:
        s = strip_prefix(raw)
        if s in out:
            raise CheckpointError(f"{where}: tensors {out[s]} and {raw} both map to {s}")
        out[s] = raw
    return out


def _quantization_config(cfg_path: Path) -> dict[str, Any] | None:
    raw = json.loads(cfg_path.read_text())  # already parsed once by load_model_config: valid JSON
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict) or q.get("quant_method") not in ("fp8", ct.METHOD):
        method = q.get("quant_method") if isinstance(q, dict) else q
        raise CheckpointError(f"{cfg_path}: unsupported quantization_config quant_method {method!r} (hinfer reads "
                              "bf16, block-scaled fp8 and compressed-tensors pack-quantized int4 checkpoints)")
    return q


def _fp8_block(q: dict[str, Any] | None, where: Path) -> tuple[int, int]:
    if not q or q.get("weight_block_size") is None:
        return DEFAULT_BLOCK
    b = q["weight_block_size"]
    if not (isinstance(b, list) and len(b) == 2 and all(isinstance(v, int) and v > 0 for v in b)):
        raise CheckpointError(f"{where}: weight_block_size {b!r} is not two positive integers "
                              "(per-tensor FP8 scales are not supported)")
    return (b[0], b[1])
