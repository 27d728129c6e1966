"""The int4 routed experts' words stored stripe by stripe when served on a GPU (HINFER_EXPERTS_WORDS, default
stripes): each 16-row stripe's 128-groups one after another, gate and up rows paired (hinfer.quant.int4_mma_layout
.stripe_experts). The tensor-core decode kernels' warps then read one 512-byte run a load instead of 16 runs of
64 bytes (the dense int4 kernel streams the same bytes 1.56x faster in such runs, bench/RESULTS.md), and the grouped
prefill kernels find every word by its row (moe_gemm._stripe_words). Same bytes, same values, outputs bit for bit.
Measured end to end (H100, bench/RESULTS.md 2026-12-07 16:44-16:56): the 35B-A3B int4 at one / eight lanes 509 /
1,799 -> 522 / 1,909 tok/s on the stripes' own tiles, its 8K prefill 35.0K -> 36.0K tok/s; the 122B-A10B 280 / 780
-> 287 / 842."""

from __future__ import annotations

import logging
import os
import time

import torch
from torch import nn

from hinfer.quant.experts import Int4ExpertsWeight

log = logging.getLogger("hinfer")
ORDERS = ("rows", "stripes", "gate_up")


def experts_words() -> str:
    """HINFER_EXPERTS_WORDS: `stripes` (the default, both projections), `gate_up` (stripes for the gate_up only) or
    `rows` (as loaded, to compare)."""
    v = os.environ.get("HINFER_EXPERTS_WORDS", "stripes").strip()
    if v not in ORDERS:
        raise ValueError(f"HINFER_EXPERTS_WORDS must be one of {', '.join(ORDERS)}, got {v!r}")
    return v


@torch.no_grad()
def stripe_int4_experts(model: nn.Module) -> int:
    """Store every SparseMoE's int4 experts of `model` (decoder layers and MTP head) by stripes, when its weights
    sit on a GPU and HINFER_EXPERTS_WORDS says so; after the shared experts are folded in. -> how many."""
    from hinfer.model.qwen3_5 import SparseMoE

    words = experts_words()
    if words == "rows" or not any(t.is_cuda for t in model.buffers()):
        return 0
    projections = (("experts_gate_up", True), ("experts_down", False))[: 1 if words == "gate_up" else 2]
    t0, n = time.monotonic(), 0
    for moe in (m for m in model.modules() if isinstance(m, SparseMoE)):
        for name, gate_up in projections:
            w = getattr(moe, name)
            if isinstance(w, Int4ExpertsWeight) and w.words == "rows":
                n += w.to_stripes(gate_up).words == "stripes"
    if n:
        log.info("int4 experts: %d projections stored by stripes in %.1f s", n, time.monotonic() - t0)
    return n
