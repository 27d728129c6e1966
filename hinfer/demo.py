"""The built-in demo model: a tiny random-weight Qwen3.5 (GDN + attention + MTP head, and a small vision tower
so it takes images) with the real tokenizer.

Its words are random: it exists so `hinfer serve` / `hinfer generate --demo` run on a fresh machine with nothing
downloaded. Written once, offline, into a cache folder (HINFER_CACHE or ~/.cache/hinfer).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from hinfer.fixtures import config_dir, tokenizer_dir

log = logging.getLogger("hinfer.demo")

DEMO_VERSION = 4
DEMO_OVERRIDES = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "max_position_embeddings": 65536,  # 64K, the default --max-context: agents' long prompts can be tried on it
    "tie_word_embeddings": False,  # a separate N(0, 1/sqrt(H)) head: flat logits, so sampled words vary
}
DEMO_LAYERS = 4  # three Gated DeltaNet layers and one full-attention layer, as in the real pattern
# the real patch size, merge and position grid (an image takes as many tokens as on the released models), a
# narrow tower of two blocks: ~0.4M parameters, encoding in milliseconds on a CPU
DEMO_VISION = {
    "depth": 2,
    "hidden_size": 64,
    "num_heads": 2,
    "intermediate_size": 128,
    "out_hidden_size": DEMO_OVERRIDES["hidden_size"],
}


def cache_root() -> Path:
    return Path(os.environ.get("HINFER_CACHE", Path.home() / ".cache" / "hinfer"))


def demo_model_dir() -> Path:
    """Path of the demo checkpoint, writing it on first use (a second, atomic rename avoids half-written dirs)."""
    out = cache_root() / f"demo-v{DEMO_VERSION}"
    if (out / "model.safetensors.index.json").is_file():
        return out
    from hinfer.weights.synth import write_synthetic_checkpoint

    t0 = time.monotonic()
    log.info("writing the built-in demo model (random weights, real tokenizer) to %s", out)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    src = config_dir("qwen3.5-0.8b")
    assert src is not None, "packaged config qwen3.5-0.8b is missing"
    write_synthetic_checkpoint(
        src, tmp, layers=DEMO_LAYERS, seed=1234, tokenizer_dir=tokenizer_dir(), overrides=DEMO_OVERRIDES,
        progress=False, vision=True, vision_overrides=DEMO_VISION,
    )  # fmt: skip
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process won the race: use theirs
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("demo model ready in %.1f s", time.monotonic() - t0)
    return out


def resolve_model_path(model: str | None) -> Path:
    """'demo' or None -> the demo checkpoint; anything else is a path."""
    if model in (None, "", "demo"):
        return demo_model_dir()
    return Path(model)
