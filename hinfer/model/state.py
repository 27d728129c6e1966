"""ModelState: all per-sequence memory of the model, allocated once and indexed by page and slot.

- Paged KV for every full-attention layer (and the MTP layer): k/v [n_kv_layers, num_pages, page_size, n_kv,
  hd / pack] in the --kv-dtype format (hinfer.kv_format: int8 / int4 pages carry scales after the token rows).
- Gated DeltaNet state per GDN layer and slot: conv [n_gdn, n_slots, conv_dim, kernel-1] (model dtype),
  recurrent ssm [n_gdn, n_slots, HV, K, V] (fp32).

Page 0 and slot 0 are reserved scratch: padded lanes of a CUDA-graph batch read and write them, so real
sequences never see their garbage. The engine's allocators (engine/free_list.py, engine/prefix_cache.py)
never hand them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hinfer.config import ModelConfig
from hinfer.kv_format import cache_format_of
from hinfer.ops.kv_cache import allocate_kv, kv_scales

RESERVED_PAGES = 1
RESERVED_SLOTS = 1


@dataclass(frozen=True)
class StateShape:
    num_pages: int  # including the reserved scratch page
    page_size: int
    num_slots: int  # lane slots, including the reserved scratch slot
    kv_dtype: torch.dtype
    dtype: torch.dtype  # model activation dtype (conv state)
    mtp_layers: int = 0  # extra KV layers for the MTP head
    checkpoint_slots: int = 0  # prefix-cache GDN checkpoints: slots [num_slots, num_slots + checkpoint_slots)
    host_checkpoints: int = 0  # rows of the host-memory tier for spilled checkpoints (host_tier.py)
    host_kv_pages: int = 0  # rows of the host-memory tier for spilled KV pages (host_tier.py)
    v_dtype: torch.dtype | None = None  # V's storage when it differs from K's (k8v4: uint8 int4 pairs)

    @property
    def v_cache_dtype(self) -> torch.dtype:
        return self.v_dtype or self.kv_dtype

    @property
    def total_slots(self) -> int:
        return self.num_slots + self.checkpoint_slots

    @property
    def checkpoint_slot_ids(self) -> range:
        return range(self.num_slots, self.total_slots)

    def kv_bytes(self, cfg: ModelConfig) -> int:
        layers = len(cfg.attn_layers) + self.mtp_layers
        n_kv, hd = cfg.num_key_value_heads, cfg.head_dim
        per_page = sum(cache_format_of(str(dt)).page_bytes(self.page_size, n_kv, hd)
                       for dt in (self.kv_dtype, self.v_cache_dtype))  # fmt: skip
        return layers * self.num_pages * per_page

    def gdn_bytes(self, cfg: ModelConfig, slots: int | None = None) -> int:
        """Lane slots (or `slots`) in every GDN layer; checkpoint_bytes counts the prefix-cache ones."""
        n = len(cfg.gdn_layers) * (self.num_slots if slots is None else slots)
        conv = cfg.gdn_conv_dim * (cfg.linear_conv_kernel_dim - 1) * _itemsize(self.dtype)
        ssm = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
        return n * (conv + ssm)

    def checkpoint_bytes(self, cfg: ModelConfig) -> int:
        return self.gdn_bytes(cfg, self.checkpoint_slots)


def _itemsize(dt: torch.dtype) -> int:
    return torch.empty((), dtype=dt).element_size()


class ModelState:
    def __init__(self, cfg: ModelConfig, shape: StateShape, device: torch.device | str) -> None:
        self.cfg = cfg
        self.shape = shape
        self.page_size = shape.page_size
        n_kv_layers = len(cfg.attn_layers) + shape.mtp_layers
        kv = (n_kv_layers, shape.num_pages, shape.page_size, cfg.num_key_value_heads, cfg.head_dim)
        # k_pages: whole pages (int8 / int4 scales after the token rows); k_cache: the token rows the ops take
        self.k_pages, self.k_cache = allocate_kv(*kv, shape.kv_dtype, device)
        self.v_pages, self.v_cache = allocate_kv(*kv, shape.v_cache_dtype, device)
        n_gdn = len(cfg.gdn_layers)
        self.conv_state = torch.zeros(
            (n_gdn, shape.total_slots, cfg.gdn_conv_dim, cfg.linear_conv_kernel_dim - 1), dtype=shape.dtype, device=device
        )
        self.ssm_state = torch.zeros(
            (n_gdn, shape.total_slots, cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim),
            dtype=torch.float32,
            device=device,
        )
        # model layer index -> index into the KV or GDN tensors
        self.kv_index = {layer: i for i, layer in enumerate(cfg.attn_layers)}
        self.gdn_index = {layer: i for i, layer in enumerate(cfg.gdn_layers)}

    def mtp_kv_index(self, mtp_layer: int) -> int:
        return len(self.cfg.attn_layers) + mtp_layer

    def reset_slots(self, slots: list[int]) -> None:
        """Zero the GDN state of slots about to start a new sequence."""
        if slots:
            idx = torch.tensor(slots, dtype=torch.int64, device=self.conv_state.device)
            self.conv_state.index_fill_(1, idx, 0)
            self.ssm_state.index_fill_(1, idx, 0)

    def fill_random(self) -> None:
        """Random KV and GDN state in every page and slot (benchmarks time a step at depth without prefilling it,
        and never on zeros), one layer at a time to bound temporaries."""
        for t in (self.k_cache, self.v_cache, self.conv_state, self.ssm_state):
            for layer in t:
                if layer.dtype == torch.int8:  # int8 KV: random codes, scales of a unit-range row
                    layer.copy_(torch.randint(-127, 128, layer.shape, device=layer.device, dtype=torch.int8))
                    kv_scales(layer).fill_(1.0 / 127)
                elif layer.dtype == torch.uint8:  # int4 KV: random nibble pairs, unit-range group scales
                    layer.copy_(torch.randint(0, 256, layer.shape, device=layer.device, dtype=torch.uint8))
                    kv_scales(layer).fill_(1.0 / 7)
                elif layer.element_size() == 1:  # fp8: no in-place normal_
                    layer.copy_(torch.randn(layer.shape, device=layer.device, dtype=torch.bfloat16).to(layer.dtype))
                else:
                    layer.normal_(0, 0.05 if t is self.ssm_state else 1.0)

    def copy_slots(self, src: list[int], dst: list[int]) -> None:
        """GDN state (conv + recurrent, every GDN layer) of slot src[i] into dst[i], one gather + scatter per
        tensor: prefix-cache checkpoints saved out of a lane's slot or restored into one. Slots must not overlap."""
        if not src:
            return
        dev = self.conv_state.device
        s = torch.tensor(src, dtype=torch.int64, device=dev)
        d = torch.tensor(dst, dtype=torch.int64, device=dev)
        self.conv_state.index_copy_(1, d, self.conv_state.index_select(1, s))
        self.ssm_state.index_copy_(1, d, self.ssm_state.index_select(1, s))
