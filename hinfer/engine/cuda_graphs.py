"""CUDA-graph decode: one captured forward (+ logits) per lane-count bucket, sharing one memory pool.

A decode step of B lanes copies its metadata into static buffers (padded to the bucket size; padded lanes point
at the reserved scratch page 0 and slot 0), replays the graph, and returns the logits of the B real lanes.
Kernels read lengths from device tensors, so one capture serves every context length.
"""

from __future__ import annotations

import logging
import time

import torch

from hinfer.engine.forward_batch import ForwardBatch, SeqChunk
from hinfer.engine.state import ModelState
from hinfer.model.qwen3_5 import Qwen35ForCausalLM

log = logging.getLogger("hinfer.graphs")

BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
WIDTH_CLASSES = (4096, 32768)  # context lengths (tokens) with their own narrower graphs, besides max_context


class DecodeGraphs:
    def __init__(self, model: Qwen35ForCausalLM, state: ModelState, max_lanes: int, max_pages_per_seq: int) -> None:
        self.model, self.state = model, state
        self.device = state.k_cache.device
        self.buckets = [b for b in BUCKETS if b < max_lanes] + [max_lanes]
        n, self.width = max(self.buckets), max_pages_per_seq
        # Static inputs live in two device tensors (int64 and int32 fields) staged from two pinned host tensors:
        # two H2D copies per step. numpy views make the host-side writes cheap.
        self._i64 = _Packed({"input_ids": n, "positions": n, "slot_mapping": n, "gdn_slots": n}, torch.int64, self.device)
        self._i32 = _Packed({"q_lens": n, "cu_q_lens": n + 1, "cached_lens": n, "page_table": n * self.width},
                            torch.int32, self.device)  # fmt: skip
        self.logits_indices = torch.arange(n, dtype=torch.int64, device=self.device)
        self._rows: list[object] = [None] * n  # page list object staged in each page-table row
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}

    def _batch(self, b: int) -> ForwardBatch:
        a, c = self._i64.dev, self._i32.dev
        return ForwardBatch(
            input_ids=a["input_ids"][:b],
            positions=a["positions"][:b],
            q_lens=c["q_lens"][:b],
            cu_q_lens=c["cu_q_lens"][: b + 1],
            cached_lens=c["cached_lens"][:b],
            page_table=c["page_table"].view(-1, self.width)[:b],
            slot_mapping=a["slot_mapping"][:b],
            gdn_slots=a["gdn_slots"][:b],
            logits_indices=self.logits_indices[:b],
            page_size=self.state.page_size,
            q_lens_cpu=[1] * b,
            cached_lens_cpu=[0] * b,
        )

    def _stage(self, chunks: list[SeqChunk], b: int) -> None:
        """Write the real lanes' metadata into the static buffers; padded lanes use scratch page 0 / slot 0."""
        a, c, ps, n = self._i64.host, self._i32.host, self.state.page_size, len(chunks)
        pos = [ch.cached_len for ch in chunks]
        a["input_ids"][:n] = [ch.token_ids[0] for ch in chunks]
        a["positions"][:n] = pos
        a["slot_mapping"][:n] = [ch.page_ids[p // ps] * ps + p % ps for ch, p in zip(chunks, pos)]
        a["gdn_slots"][:n] = [ch.gdn_slot for ch in chunks]
        for k in ("input_ids", "positions", "slot_mapping", "gdn_slots"):
            a[k][n:] = 0
        c["q_lens"][:] = 1
        c["cu_q_lens"][:] = range(len(c["cu_q_lens"]))
        c["cached_lens"][:n] = pos
        c["cached_lens"][n:] = 0
        table = c["page_table"].reshape(-1, self.width)
        for i, ch in enumerate(chunks):
            if self._rows[i] is not ch.page_ids:  # a lane's pages are fixed for its life: restage on change only
                ids = ch.page_ids[: self.width]  # the runner picks a width that covers the pages in use
                table[i, : len(ids)] = ids
                table[i, len(ids) :] = 0
                self._rows[i] = ch.page_ids
        for i in range(n, b):
            if self._rows[i] is not None:
                table[i] = 0
                self._rows[i] = None
        self._i64.upload()
        self._i32.upload()

    @torch.inference_mode()
    def capture(self) -> None:
        t0 = time.monotonic()
        pool = torch.cuda.graph_pool_handle()
        for b in sorted(self.buckets, reverse=True):
            batch = self._batch(b)
            self._stage([], b)
            for _ in range(2):  # warm up: Triton autotune/compile outside the capture
                self.model.compute_logits(self.model(batch, self.state)[batch.logits_indices])
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = self.model.compute_logits(self.model(batch, self.state)[batch.logits_indices])
            self.graphs[b], self.outputs[b] = g, out
        torch.cuda.synchronize()
        log.info("captured %d decode graphs (lanes %s) in %.1f s", len(self.graphs), self.buckets,
                 time.monotonic() - t0)  # fmt: skip

    def bucket(self, n: int) -> int | None:
        return next((b for b in self.buckets if b >= n), None)

    def run(self, chunks: list[SeqChunk]) -> torch.Tensor:
        """Logits [len(chunks), V] of one decode step."""
        b = self.bucket(len(chunks))
        assert b is not None and b in self.graphs
        self._stage(chunks, b)
        self.graphs[b].replay()
        return self.outputs[b][: len(chunks)]


class _Packed:
    """Named int fields packed in one pinned host tensor and one device tensor of the same layout."""

    def __init__(self, sizes: dict[str, int], dtype: torch.dtype, device: torch.device) -> None:
        total = sum(sizes.values())
        self._host = torch.zeros(total, dtype=dtype, pin_memory=torch.cuda.is_available())
        self._dev = torch.zeros(total, dtype=dtype, device=device)
        arr = self._host.numpy()
        self.host, self.dev, off = {}, {}, 0
        for name, size in sizes.items():
            self.host[name] = arr[off : off + size]
            self.dev[name] = self._dev[off : off + size]
            off += size

    def upload(self) -> None:
        self._dev.copy_(self._host, non_blocking=True)
