"""One rank's shard of the model, built from its rank config: read from slices of the checkpoint, or random."""

from __future__ import annotations

from pathlib import Path

import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.model.loader import load_weights
from hinfer.model.quantized_loader import build_skeleton, load_stored_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init, random_quantized
from hinfer.ops.parallel import TensorParallel
from hinfer.quant.apply import quantize_model
from hinfer.quant.recipes import get_recipe
from hinfer.sharding import rank_config
from hinfer.weights.compressed_tensors import stored_recipe
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.shard_layout import tensor_slice


def load_rank_model(path: Path | None, cfg: ModelConfig, ecfg: EngineConfig, recipe, tp: TensorParallel,
                    device: torch.device) -> Qwen35ForCausalLM:  # fmt: skip
    """`cfg` is the whole model's config, `ecfg` resolved. Only this rank's bytes are read (HFCheckpoint.iter_slices).
    A pre-quantized checkpoint in its own recipe loads as stored (_as_stored); otherwise the shard is built in the
    model dtype and quantized with `recipe` (as `--weights fp8|int4` does on one GPU). With no `path` the shard is
    random at its shapes (`hinfer bench` on a packaged config: each rank draws its own values, already in
    `recipe`'s format)."""
    dtype = torch.bfloat16 if ecfg.dtype == "bf16" else torch.float32
    shard = rank_config(cfg, tp.size)
    if path is None:
        if recipe == "bf16":
            return random_init(Qwen35ForCausalLM(shard, dtype, device, with_mtp=False, tp=tp), seed=tp.rank)
        return random_quantized(shard, recipe, device, seed=tp.rank, dtype=dtype, tp=tp)
    ckpt = HFCheckpoint(path)
    exact = _as_stored(shard, recipe)
    parts = ckpt.iter_slices(lambda name: tensor_slice(name, cfg, tp.size, tp.rank), dtype,
                             skip=lambda name: name.startswith("mtp."), keep_stored=exact)  # no MTP head: one rank only
    if exact:  # codes and scales as stored, and the model built quantized layer by layer (no bf16 shard first)
        net, slots = build_skeleton(shard, get_recipe(recipe), dtype, device, with_mtp=False, tp=tp)
        load_stored_weights(net, slots, parts, str(path))
        return net
    net = Qwen35ForCausalLM(shard, dtype=dtype, device=device, with_mtp=False, tp=tp)
    load_weights(net, ((n, t.to(device)) for n, t in parts), str(path))
    if recipe != "bf16":
        quantize_model(net, recipe)
    return net


def _as_stored(shard: ModelConfig, recipe) -> bool:
    """A pre-quantized checkpoint (official block fp8, compressed-tensors int4) loading in its own recipe, as it
    would at the rank's shapes (`shard`: fp8 parts must still fuse on 128-row blocks there): each rank's parts stay
    as stored. Requantizing them would add an error of the format's own size (int4), or of the blocks' (fp8 parts
    whose block does not reach the largest code)."""
    stored, _ = stored_recipe(shard)
    return stored is not None and get_recipe(recipe) == stored
