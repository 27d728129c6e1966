"""Next-token logits at every position of one prompt, through a private state: parity checks, numerics, tests."""

from __future__ import annotations

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import RESERVED_SLOTS, ModelState, StateShape


@torch.inference_mode()
def prompt_logits(
    model: Qwen35ForCausalLM, ids: list[int], page_size: int = 16, kv_dtype: torch.dtype | None = None,
    v_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """fp32 logits [len(ids), V]: one prefill of `ids` on a fresh state on the model's device (KV in the model's
    dtype unless `kv_dtype` is given, V in `v_dtype` when it differs (k8v4); MTP KV rows when the model has
    the head)."""
    cfg, dtype, dev = model.cfg, model.embed_tokens.dtype, model.embed_tokens.device
    pages = -(-len(ids) // page_size)
    mtp = cfg.mtp_num_hidden_layers if model.mtp is not None else 0
    shape = StateShape(1 + pages, page_size, 1 + RESERVED_SLOTS, kv_dtype or dtype, dtype, mtp_layers=mtp,
                       v_dtype=v_dtype)
    state = ModelState(cfg, shape, dev)
    state.reset_slots([RESERVED_SLOTS])
    chunk = SeqChunk(list(ids), 0, list(range(1, 1 + pages)), RESERVED_SLOTS, all_logits=True)
    batch = build_forward_batch([chunk], page_size, dev)
    return model.compute_logits(model(batch, state)[batch.logits_indices])
