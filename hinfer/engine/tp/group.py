"""Joining the ranks of a tensor-parallel engine, and the channel rank 0 sends its commands on.

Two process groups: the default one (NCCL on GPUs, gloo on the CPU) for the model's all-reduces and logit gathers,
and a gloo group for the commands (small pickled objects on the host), whose waits never time out: a follower
waits for the next step as long as the server idles. A launcher such as torchrun sets RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT; without one, rank 0 spawns the others and they meet on a local port.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from hinfer.batch import SeqChunk
from hinfer.errors import ConfigError
from hinfer.ops.parallel import TensorParallel

NEVER = timedelta(days=3650)  # the command channel's wait: an idle server sends nothing for hours
MEET = timedelta(minutes=10)  # the ranks' meeting, and the model's collectives (a step never waits this long)


def launcher_rank(n: int) -> int | None:
    """This process's rank when a launcher (torchrun) started n processes, else None (rank 0 spawns them)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 or "RANK" not in os.environ:
        return None
    if world != n:
        raise ConfigError(f"--tensor-parallel {n}, but the launcher started WORLD_SIZE={world} processes")
    return int(os.environ["RANK"])


def local_port() -> str:
    """A free TCP port on this host for the ranks to meet at (rank 0 spawning the others)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def rank_device(device: str, rank: int) -> torch.device:
    """The device of a rank: one GPU each (the launcher's LOCAL_RANK, else the rank), or the CPU."""
    if device != "cuda":
        return torch.device(device)
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def chunks_to(chunks: list[SeqChunk], device: torch.device) -> list[SeqChunk]:
    """The chunks with their image embeddings on `device`: rank 0 sends them on the CPU (a pickled CUDA tensor
    would come back on rank 0's device index), each rank takes them to its own."""
    return [c if c.image_embeds is None or c.image_embeds.device == device
            else replace(c, image_embeds=c.image_embeds.to(device)) for c in chunks]  # fmt: skip


class Channel:
    """Rank 0 sends a command (a tuple of picklable values) to every other rank, which receive them in order."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def send(self, *command: Any) -> None:
        dist.broadcast_object_list([command], src=0, group=self.group)

    def receive(self) -> tuple:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def statuses(self, error: str | None) -> list[str | None]:
        """Every rank's error (None: ready), in rank order: ranks load their shards apart, then agree."""
        out: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(out, error, group=self.group)
        return out


_threads: list[int] = []  # the CPU threads this process had before it joined (restored when it leaves)


def connect(rank: int, n: int, init_method: str, device: torch.device) -> tuple[TensorParallel, Channel]:
    """Join the n ranks (blocks until all have): -> the model's TensorParallel and the command channel."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cpu":  # ranks share the cores: spinning threads of one would starve the others' collectives
        _threads.append(torch.get_num_threads())
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=n, timeout=MEET)
    return TensorParallel(rank, n), Channel(dist.new_group(backend="gloo", timeout=NEVER))


def disconnect() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
    if _threads:
        torch.set_num_threads(_threads.pop())
