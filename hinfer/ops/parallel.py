"""Tensor-parallel collectives the model calls: the sum of row-split projections, the gather of vocab-split logits.

One process per rank (hinfer/engine/tp/ starts them): `TensorParallel` names this process's rank, the number of
ranks and the torch.distributed process group the collectives run on (NCCL on GPUs, gloo on the CPU). At size 1
(`SINGLE`) every call returns its input untouched, so the single-process model runs exactly as without it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1
    group: Any = None  # torch.distributed ProcessGroup (None: the default group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum over ranks, in place: every rank ends with the same values (the collective broadcasts its
        result), so the replicated residual stream stays identical on every rank."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """[..., C] on every rank -> [..., size * C], rank r's columns at [r * C, (r + 1) * C)."""
        if self.size == 1:
            return x
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x, group=self.group)
        return torch.cat(parts, dim=-1)

    def time_all_reduce(self, numel: int, dtype: torch.dtype, count: int, device: torch.device) -> float:
        """Seconds for `count` back-to-back all-reduces of `numel` values, after one untimed (the first sets the
        communicator's channels up). Every rank must make the same call (`hinfer bench` times a step's
        collectives and the group's bandwidth this way)."""
        x = torch.zeros(numel, dtype=dtype, device=device)
        self.all_reduce(x)
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(count):
            self.all_reduce(x)
        _sync(device)
        return time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


SINGLE = TensorParallel()
