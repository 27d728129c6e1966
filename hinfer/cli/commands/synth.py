"""`hinfer synth`: write a synthetic Hugging Face checkpoint (real names and shapes, random values)."""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

from hinfer.errors import ConfigError
from hinfer.fixtures import config_dir

log = logging.getLogger("hinfer.synth")

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """'2GB' (10^9, as transformers' max_shard_size), '2GiB' (2^30), '500MB', or plain bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ConfigError(f"--shard-size {text!r}: expected a size like 2GB, 2GiB, 500MB or a byte count")
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if size <= 0:
        raise ConfigError(f"--shard-size {text!r} must be positive")
    return size


def parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--override {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare string
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "synth",
        help="write a synthetic checkpoint with the real tensor layout and random weights",
        description="Write a Hugging Face-layout checkpoint (config.json, generation_config.json, tokenizer "
        "files, model-0000i-of-0000N.safetensors shards and their index) with the exact tensor names, "
        "shapes and dtypes of the model described by --config, filled with seeded random values that keep "
        "activations finite through every layer. For tests and speed runs without the real weights.",
    )
    p.add_argument("--config", required=True, type=Path, metavar="CONFIG_OR_FIXTURE_DIR",
                   help="a config.json, a folder holding one (e.g. ../shared/fixtures/qwen3.6-27b), or a "
                   "packaged model name (qwen3.6-27b, qwen3.6-35b-a3b, qwen3.5-0.8b); its "
                   "generation_config.json is copied when present")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder (created if needed)")
    p.add_argument("--layers", type=int, default=None, metavar="N",
                   help="keep only the first N decoder layers (at least one stays full attention)")
    p.add_argument("--fp8", action="store_true",
                   help="official block-scaled FP8 layout: Linear weights float8_e4m3fn + float32 "
                   "weight_scale_inv per 128x128 block, quantization_config in config.json")
    p.add_argument("--fused-experts", action="store_true",
                   help="MoE experts as fused mlp.experts.gate_up_proj [E,2I,H] / down_proj [E,H,I] "
                   "instead of the released per-expert tensors (same values either way)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same weights")
    p.add_argument("--shard-size", default="2GiB", metavar="SIZE",
                   help="largest shard, e.g. 2GiB (default), 5GB (10^9 bytes), 500MB")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR",
                   help="folder with tokenizer.json, tokenizer_config.json, chat_template.jinja "
                   "(default: $HINFER_FIXTURES/qwen3.5-tokenizer, else the tokenizer packaged with hinfer)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a text-config field (JSON value), e.g. --override hidden_size=256; repeatable")
    p.add_argument("--vision", action="store_true",
                   help="also write the vision tower's tensors (model.visual.*, from the config's vision_config; "
                   "never fp8), so the checkpoint takes images")
    p.add_argument("--vision-override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a vision_config field (JSON value), e.g. --vision-override depth=2; repeatable")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hinfer.weights.synth import write_synthetic_checkpoint  # torch import only when used

    src = args.config
    if not src.exists() and config_dir(str(src)) is not None:
        src = config_dir(str(src))  # a packaged model name
    start = time.perf_counter()
    out = write_synthetic_checkpoint(
        src,
        args.out,
        layers=args.layers,
        fp8=args.fp8,
        fused_experts=args.fused_experts,
        seed=args.seed,
        shard_bytes=parse_size(args.shard_size),
        tokenizer_dir=args.tokenizer,
        overrides=parse_overrides(args.override),
        vision=args.vision,
        vision_overrides=parse_overrides(args.vision_override),
    )
    log.info("synthetic checkpoint written to %s in %.1f s", out, time.perf_counter() - start)
    return 0
