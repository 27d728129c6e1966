"""`hinfer convert SRC DST --quant bf16|fp8|int4 [--recipe NAME]`: a checkpoint folder -> one .hinfer artifact.

Streaming, so peak RAM is about one decoder layer whatever the model size: the full model is only ever built
on the meta device (and quantized there) to declare every output tensor in the header; then each unit (the
top-level tensors, one decoder layer, the MTP head) is built on the CPU, filled from just its checkpoint
tensors, quantized, appended to the file and freed. The vision tower, when the checkpoint has one, follows tensor
by tensor, bf16 (`visual.*`; --no-vision leaves it out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger("hinfer.convert")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert a checkpoint folder into one .hinfer artifact (fused, optionally quantized)",
        description="Stream a Hugging Face checkpoint folder (bf16, or official block-scaled FP8) into a single "
        ".hinfer safetensors file: tensors in the engine's fused layout, quantized per the recipe, with the "
        "config, tokenizer, chat template, generation config and source identity in its metadata. Peak RAM "
        "stays about one decoder layer. See docs/artifact.md.",
    )
    p.add_argument("src", type=Path, metavar="SRC", help="checkpoint folder (config.json + safetensors)")
    p.add_argument("dst", type=Path, metavar="DST", help="output file; should end in .hinfer")
    p.add_argument("--quant", choices=["bf16", "fp8", "int4"], default="bf16", help="weight format (default bf16)")
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help="a named recipe of that format (e.g. int4-sym, fp8-block); default: the format's default")
    p.add_argument("--no-vision", dest="vision", action="store_false",
                   help="leave the vision tower out (a text-only artifact); by default it is carried when the "
                        "checkpoint has one")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hinfer.errors import ConfigError
    from hinfer.quant.recipes import get_recipe

    try:
        recipe = get_recipe(args.recipe or args.quant)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if recipe.fmt != args.quant:
        raise ConfigError(f"--recipe {recipe.name} is {recipe.fmt}, not --quant {args.quant}")
    if args.dst.suffix != ".hinfer":
        log.warning("%s does not end in .hinfer: `hinfer serve` recognises artifacts by that suffix", args.dst)
    convert_checkpoint(args.src, args.dst, recipe, progress=sys.stderr.isatty(), vision=args.vision)
    return 0


# ---- the converter ----------------------------------------------------------------------------------------
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source_identity(src: Path) -> dict[str, Any]:
    from hinfer import __version__
    from hinfer.weights.hf_reader import INDEX_FILE, SINGLE_FILE

    index = src / INDEX_FILE
    if index.is_file():
        weights_hash = {"index_sha256": _sha256(index.read_bytes())}
    else:  # one file: hash its header (names, shapes, offsets), not gigabytes of data
        with (src / SINGLE_FILE).open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            weights_hash = {"header_sha256": _sha256(f.read(n))}
    return {"path": str(src.resolve()), "config_sha256": _sha256((src / "config.json").read_bytes()),
            **weights_hash, "hinfer_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds")}  # fmt: skip


def _metadata(src: Path, recipe, layout: dict) -> dict[str, str]:
    from hinfer.weights.artifact import AUX_FILES, FORMAT, FORMAT_VERSION, recipe_meta

    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "recipe": json.dumps(recipe_meta(recipe)), "layout": json.dumps(layout),
            "source": json.dumps(_source_identity(src))}  # fmt: skip
    for key, fname in AUX_FILES.items():
        if (src / fname).is_file():
            meta[key] = (src / fname).read_text(encoding="utf-8")
    return meta


TOP = "top."  # prefix of the top-level units: one per tensor (embedding, norm, lm_head)


def _unit_of(name: str) -> str:
    """Checkpoint or state_dict name -> its conversion unit: 'layers.N', 'mtp', or 'top.P' for the top-level
    parameter P, each alone (embedding and lm_head are the model's two largest tensors: 2 x 2.5 GB on the 27B)."""
    if name.startswith("layers."):
        return ".".join(name.split(".")[:2])
    return "mtp" if name.startswith("mtp.") else TOP + name.split(".")[0]


class _Shim(nn.Module):
    """What quantize_model walks (`layers`, `mtp`), holding just the unit being converted."""

    def __init__(self, layers: list[nn.Module], mtp: nn.Module | None):
        super().__init__()
        self.layers, self.mtp = nn.ModuleList(layers), mtp


def _materialize(net: nn.Module, unit: str) -> nn.Module:
    """Swap a real CPU bf16 copy of `unit` into the meta model; returns the real module (net for a top-level one)."""
    from hinfer.model.qwen3_5 import DecoderLayer, MTPHead

    cfg, dtype = net.cfg, torch.bfloat16
    if unit.startswith(TOP):
        name = unit.removeprefix(TOP)
        setattr(net, name, nn.Parameter(torch.empty(getattr(net, name).shape, dtype=dtype), requires_grad=False))
        return net
    if unit == "mtp":
        net.mtp = MTPHead(cfg, dtype, "cpu")
        return net.mtp
    i = int(unit.split(".")[1])
    net.layers[i] = DecoderLayer(cfg, i, cfg.layer_types[i], cfg.layer_is_moe(i), dtype, "cpu")
    return net.layers[i]


def _fill(net: nn.Module, unit: str, tensors, source: str) -> None:
    """Copy the unit's checkpoint tensors into place (model/loader.py's rules) and check it is complete."""
    from hinfer.errors import CheckpointError
    from hinfer.model.loader import checkpoint_targets, place_tensor

    targets = {n: t for n, t in checkpoint_targets(net).items() if _unit_of(n) == unit}
    seen = {name for name, t in tensors if place_tensor(net, targets, name, t, source)}
    missing = [n for n in targets if n not in seen and ".experts." not in n]
    if missing:
        raise CheckpointError(f"{source}: missing tensor {missing[0]!r}")


def _visual_entries(ckpt, source: str) -> list:
    """The tower's tensors as the artifact stores them (`visual.` + the checkpoint's name, bf16, in the
    checkpoint's order), checked against the config's tower from the headers, before anything is written."""
    from hinfer.errors import CheckpointError
    from hinfer.model.vision import VisionEncoder
    from hinfer.weights.artifact import VISUAL, TensorEntry

    vision = ckpt.config.vision
    if vision is None:
        raise CheckpointError(f"{source}: has model.visual.* tensors but its config has no vision_config")
    want = {n: tuple(p.shape) for n, p in VisionEncoder(vision, torch.bfloat16, "meta").named_parameters()}
    have = ckpt.visual_shapes()
    for name, shape in have.items():
        if name not in want:
            raise CheckpointError(f"{source}: unexpected vision tensor 'model.visual.{name}' (not in vision_config)")
        if tuple(shape) != want[name]:
            raise CheckpointError(f"{source}: vision tensor 'model.visual.{name}' has shape {list(shape)}, expected "
                                  f"{list(want[name])} for this vision_config")  # fmt: skip
    missing = [n for n in want if n not in have]
    if missing:
        raise CheckpointError(f"{source}: missing vision tensor 'model.visual.{missing[0]}'")
    return [TensorEntry(VISUAL + n, torch.bfloat16, tuple(s)) for n, s in have.items()]


def convert_checkpoint(src: str | Path, dst: str | Path, recipe="bf16", progress: bool = False,
                       vision: bool = True) -> Path:  # fmt: skip
    """Write the artifact of checkpoint folder `src` to `dst` (atomically: a temp file renamed at the end), with
    the checkpoint's vision tower unless `vision` is False."""
    from tqdm import tqdm

    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.quant.apply import quantize_model
    from hinfer.quant.recipes import get_recipe
    from hinfer.weights.artifact import VISUAL, StreamWriter, TensorEntry, quantized_layout
    from hinfer.weights.hf_reader import HFCheckpoint

    t0 = time.monotonic()
    src, dst, r = Path(src), Path(dst), get_recipe(recipe)
    ckpt = HFCheckpoint(src)
    cfg = ckpt.config
    skel = Qwen35ForCausalLM(cfg, torch.bfloat16, "meta", with_mtp=True)
    quantize_model(skel, r)  # on meta: shapes and dtypes of every output tensor, no data
    entries = [TensorEntry(n, t.dtype, tuple(t.shape)) for n, t in skel.state_dict().items()]
    visual = _visual_entries(ckpt, str(src)) if vision and ckpt.has_visual else []
    meta = _metadata(src, r, quantized_layout(skel))
    net = Qwen35ForCausalLM(cfg, torch.bfloat16, "meta", with_mtp=True)  # units are swapped in one at a time
    by_unit: dict[str, list[str]] = {}
    for name in ckpt.tensor_names():
        if (name.startswith("mtp.") and net.mtp is None) or (name == "lm_head.weight" and net.lm_head is None):
            continue  # ignored exactly as the directory loader ignores them
        by_unit.setdefault(_unit_of(name), []).append(name)
    units = list(dict.fromkeys(_unit_of(e.name) for e in entries))
    stray = [n for u, names in by_unit.items() if u not in units for n in names]
    if stray:  # the directory loader refuses these too: the artifact must serve what the folder serves
        from hinfer.errors import CheckpointError

        raise CheckpointError(f"{src}: unexpected tensor {stray[0]!r} (not part of this model's config)")
    total = sum(e.nbytes for e in entries + visual)
    tmp = dst.with_name(dst.name + ".partial")
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with ExitStack() as stack, tmp.open("wb") as f:
            writer = StreamWriter(f, entries + visual, meta)
            bar = stack.enter_context(tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                                           desc=f"converting to {r.name}"))
            for unit in units:
                mod = _materialize(net, unit)
                _fill(net, unit, ckpt.read_tensors(by_unit.get(unit, [])), str(src))
                if unit.startswith(TOP):
                    sd = {unit.removeprefix(TOP): getattr(net, unit.removeprefix(TOP))}
                else:
                    shim = _Shim([mod], None) if unit != "mtp" else _Shim([], mod)
                    quantize_model(shim, r)
                    sd = mod.state_dict(prefix=unit + ".")
                for e in entries:  # declaration order within the unit
                    if _unit_of(e.name) == unit:
                        writer.write(e.name, sd[e.name])
                        bar.update(e.nbytes)
                _free(net, skel, unit)
                del mod, sd
            if visual:  # tensor by tensor, in the order declared
                for name, t in ckpt.iter_visual(torch.bfloat16):
                    writer.write(VISUAL + name, t)
                    bar.update(t.numel() * t.element_size())
            writer.close()
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote %s (%s, %.2f GB, %d tensors%s) in %.1f s", dst, r.name, dst.stat().st_size / 1e9,
             len(entries) + len(visual), f", {len(visual)} of them the vision tower's" if visual else "",
             time.monotonic() - t0)  # fmt: skip
    return dst


def _free(net: nn.Module, skel: nn.Module, unit: str) -> None:
    """Put meta modules back in place of the converted unit, so its CPU memory is released."""
    if unit.startswith(TOP):
        p = getattr(net, unit.removeprefix(TOP))
        setattr(net, unit.removeprefix(TOP), nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"),
                                                          requires_grad=False))  # fmt: skip
    elif unit == "mtp":
        net.mtp = skel.mtp
    else:
        i = int(unit.split(".")[1])
        net.layers[i] = skel.layers[i]
