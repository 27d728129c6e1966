"""One rank's shard of the model, built from its rank config and read from slices of the checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.ops.parallel import TensorParallel
from hinfer.quant.apply import quantize_model
from hinfer.sharding import rank_config
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.shard_layout import tensor_slice


def load_rank_model(path: Path, cfg: ModelConfig, ecfg: EngineConfig, recipe, tp: TensorParallel,
                    device: torch.device) -> Qwen35ForCausalLM:  # fmt: skip
    """`cfg` is the whole model's config, `ecfg` resolved. Plain tensors are read slice by slice (this rank's bytes
    only); quantized checkpoints are read whole and dequantized before the cut, then every rank quantizes its
    shard with `recipe` (as `--weights fp8|int4` does on one GPU)."""
    dtype = torch.bfloat16 if ecfg.dtype == "bf16" else torch.float32
    ckpt = HFCheckpoint(path)
    net = Qwen35ForCausalLM(rank_config(cfg, tp.size), dtype=dtype, device=device, with_mtp=False, tp=tp)
    parts = ckpt.iter_slices(lambda name: tensor_slice(name, cfg, tp.size, tp.rank), dtype,
                             skip=lambda name: name.startswith("mtp."))  # no MTP head: --spec is one-rank only
    load_weights(net, ((n, t.to(device)) for n, t in parts), str(path))
    if recipe != "bf16":
        quantize_model(net, recipe)
    return net
