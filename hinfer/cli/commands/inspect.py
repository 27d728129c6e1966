"""`hinfer inspect FILE`: what a .hinfer artifact holds (header and metadata only; no weight is read)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="print what a .hinfer artifact holds: format version, config, recipe, source, tensors, vision tower",
        description="Print a .hinfer artifact's format version, model config summary, quantization recipe, "
        "source checkpoint identity, tensor count and bytes by dtype, and whether the tokenizer, chat "
        "template and generation config are present. Reads the header only.",
    )
    p.add_argument("file", metavar="FILE", help="a .hinfer file")
    p.add_argument("--tensors", action="store_true", help="also list every tensor (name, dtype, shape, bytes)")
    p.set_defaults(func=run)


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e7 else f"{n / 1e3:.1f} KB"


def describe(path: str, tensors: bool = False) -> str:
    from hinfer.weights.artifact import open_artifact

    art = open_artifact(path)
    cfg = json.loads(art.config_text)
    text = cfg.get("text_config") or cfg
    lines = [f"{art.path}: hinfer artifact, format v{art.version}"]
    keys = ("model_type", "hidden_size", "num_hidden_layers", "vocab_size", "num_experts", "mtp_num_hidden_layers")
    lines.append("config:  " + ", ".join(f"{k}={text[k]}" for k in keys if k in text))
    r = art.recipe
    lines.append(f"recipe:  {r.get('name')} ({r.get('fmt')}; targets {', '.join(r.get('targets', [])) or 'none'})"
                 f"; {len(art.layout)} quantized weights")
    s = art.source
    lines.append(f"source:  {s.get('path')} (config sha256 {str(s.get('config_sha256'))[:12]}, "
                 f"{'index' if 'index_sha256' in s else 'header'} sha256 "
                 f"{str(s.get('index_sha256') or s.get('header_sha256'))[:12]}), "
                 f"hinfer {s.get('hinfer_version')}, {s.get('created')}")
    by_dtype: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for t in art.tensors.values():
        by_dtype[str(t.dtype).removeprefix("torch.")][0] += 1
        by_dtype[str(t.dtype).removeprefix("torch.")][1] += t.nbytes
    total = sum(b for _, b in by_dtype.values())
    lines.append(f"tensors: {len(art.tensors)}, {_gb(total)}: "
                 + ", ".join(f"{d} {n} ({_gb(b)})" for d, (n, b) in sorted(by_dtype.items())))
    visual = [t for t in art.tensors.values() if t.name.startswith("visual.")]
    lines.append(f"vision:  {len(visual)} tensors, {_gb(sum(t.nbytes for t in visual))} (takes images)" if visual
                 else "vision:  none (text only)")
    have = {k: bool(art.meta.get(k)) for k in ("tokenizer_json", "tokenizer_config", "chat_template",
                                                 "generation_config")}
    lines.append("carried: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in have.items()))
    if tensors:
        for t in art.tensors.values():
            lines.append(f"  {t.name}  {str(t.dtype).removeprefix('torch.')}  {list(t.shape)}  {t.nbytes}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    print(describe(args.file, args.tensors))
    return 0
