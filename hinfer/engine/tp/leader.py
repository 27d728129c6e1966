"""Rank 0 of a tensor-parallel engine: it starts the other ranks, and its state and runner send them every change
before making it to rank 0's own shard.

The scheduler, prefix cache and sampler run here only. What touches the model's per-rank memory goes through
LeaderState (a new sequence's zeroed GDN slot, a prefix-cache checkpoint copied in or out), LeaderRunner (a
forward step over the scheduled SeqChunks, one prompt's logits, the decode graphs' capture) and LeaderHostTier
(a host-RAM row written or read back); each sends the command first, so every rank applies the same changes in the
same order and meets the others in the model's collectives. Sampling reads the gathered full-vocabulary logits on
rank 0.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from hinfer.batch import SeqChunk
from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.host_tier import HostTier, tier_tensors
from hinfer.engine.runner import ModelRunner
from hinfer.engine.tp.group import chunks_to, connect, disconnect, launcher_rank, local_port, rank_device
from hinfer.errors import HinferError
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.state import ModelState, StateShape

log = logging.getLogger("hinfer.tp")


class TensorParallelError(HinferError):
    """A rank could not start (its own message, prefixed with its rank), or a step failed half-way."""


class Ranks:
    """Rank 0's handle on the group: its TensorParallel, the command channel, the processes it spawned."""

    def __init__(self, n: int, path: Path | None, cfg: ModelConfig, ecfg: EngineConfig, recipe) -> None:
        """Spawn ranks 1..n-1 (unless a launcher started them) and join them; each starts loading its shard (of
        the checkpoint at `path`, or random with no path)."""
        self.procs: list[subprocess.Popen] = []
        init = "env://"
        if launcher_rank(n) is None:
            init = local_port()
            for r in range(1, n):
                self.procs.append(_spawn((r, n, init, path, cfg, ecfg, recipe)))
        self.device = rank_device(ecfg.device, 0)
        try:
            self.tp, self.channel = connect(0, n, init, self.device)
        except BaseException:  # a rank that never came (it failed to start: its own output says why)
            for p in self.procs:
                p.kill()
            raise
        self._open = True
        self.broken: str | None = None  # why the ranks are out of step (a step failed half-way)
        atexit.register(self.close)

    def send(self, *command) -> None:
        if self.broken:
            raise TensorParallelError(f"the ranks are out of step since a step failed ({self.broken}); restart")
        try:
            self.channel.send(*command)
        except Exception as e:  # a rank is gone (its connection closed): nothing can run across the ranks now
            self.broken = f"{command[0]}: {e}"
            raise TensorParallelError(f"a tensor-parallel rank did not take the {command[0]!r} command ({e}); "
                                      "restart") from e  # fmt: skip

    @contextmanager
    def step(self, *command) -> Iterator[None]:
        """Send a command, then run rank 0's own part: an error in between leaves the other ranks inside the
        model's collectives, so later steps are refused instead of hanging."""
        self.send(*command)
        try:
            yield
        except BaseException as e:
            self.broken = f"{command[0]}: {e}"
            raise

    def time_all_reduce(self, numel: int, dtype: torch.dtype, count: int) -> float:
        """Seconds rank 0 takes for `count` all-reduces of `numel` values, every rank taking part."""
        self.send("time_all_reduce", numel, dtype, count)
        return self.tp.time_all_reduce(numel, dtype, count, self.device)

    def ready(self, error: BaseException | None) -> None:
        """After loading: every rank's outcome; raises rank 0's own error, or the first other rank's."""
        statuses = self.channel.statuses(None if error is None else f"rank 0: {error}")
        if error is not None or any(statuses):
            self.close(stop=False)  # the followers saw the errors and left
            if error is not None:
                raise error
            raise TensorParallelError(next(s for s in statuses if s))
        log.info("tensor parallel: %d ranks ready (%s)", self.tp.size, self.device)

    def close(self, stop: bool = True) -> None:
        """Tell the followers to stop, wait for them, leave the group. Idempotent (also run at exit)."""
        if not self._open:
            return
        self._open = False
        atexit.unregister(self.close)
        try:
            if stop and not self.broken:
                self.channel.send("stop")
        except Exception as e:  # a follower already gone: the others see its connection close
            log.warning("tensor parallel: could not tell every rank to stop (%s)", e)
        finally:
            disconnect()
            for p in self.procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


def _spawn(args: tuple) -> subprocess.Popen:
    """A fresh Python process running follower.main on `args` (pickled on its stdin). Not multiprocessing's spawn:
    that re-imports the caller's main module, which a script without a __main__ guard cannot survive."""
    root = str(Path(__file__).resolve().parents[3])  # this very package (hinfer/engine/tp/), wherever it was found
    env = os.environ | {"PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.Popen([sys.executable, "-c", "from hinfer.engine.tp.follower import main; main()"],
                         stdin=subprocess.PIPE, env=env)  # fmt: skip
    assert p.stdin is not None
    p.stdin.write(pickle.dumps(args))
    p.stdin.close()
    return p


class LeaderState(ModelState):
    """Rank 0's ModelState: slot changes made outside a forward step are sent to the followers first."""

    def __init__(self, cfg: ModelConfig, shape: StateShape, device: torch.device, ranks: Ranks) -> None:
        super().__init__(cfg, shape, device)
        self.ranks = ranks
        ranks.send("state", shape)

    def reset_slots(self, slots: list[int]) -> None:
        if slots:
            self.ranks.send("reset_slots", slots)
        super().reset_slots(slots)

    def copy_slots(self, src: list[int], dst: list[int]) -> None:
        if src:
            self.ranks.send("copy_slots", src, dst)
        super().copy_slots(src, dst)

    def fill_random(self) -> None:
        self.ranks.send("fill_random")
        super().fill_random()


class LeaderHostTier(HostTier):
    """Rank 0's host-RAM tier of the prefix cache: names, rows and evictions are decided here; every copy is sent
    to the other ranks first, whose tier of the same kind copies the same rows of their own shard."""

    def __init__(self, kind: str, state: ModelState, rows: int, ranks: Ranks) -> None:
        super().__init__(*tier_tensors(state, kind), rows)
        self.kind, self.ranks = kind, ranks

    def copy_out(self, row: int, i: int) -> None:
        self.ranks.send("host_copy_out", self.kind, row, i)
        super().copy_out(row, i)

    def copy_in(self, rows: list[int], targets: list[int]) -> None:
        self.ranks.send("host_copy_in", self.kind, rows, targets)
        super().copy_in(rows, targets)


class LeaderRunner(ModelRunner):
    """Rank 0's ModelRunner: each forward is described to the followers (the same SeqChunks) before it runs."""

    runs_ahead = False  # the followers are sent host token ids: every step's tokens are read first

    def __init__(self, model: Qwen35ForCausalLM, state: LeaderState, sampler, ranks: Ranks) -> None:
        super().__init__(model, state, sampler)
        self.ranks = ranks

    def host_tier(self, kind: str, rows: int) -> HostTier:
        self.ranks.send("host_tier", kind, rows)
        return LeaderHostTier(kind, self.state, rows, self.ranks)

    def capture_graphs(self, max_lanes: int, max_context: int, capture: bool = True) -> None:
        """Every rank builds the same graph sets in the same order (their warm-up runs are collectives too, and
        set the communicator up before any capture); a step's chunks then pick the same graph on every rank."""
        with self.ranks.step("capture_graphs", max_lanes, max_context, capture):
            super().capture_graphs(max_lanes, max_context, capture)

    def forward_logits(self, seq_chunks: list[SeqChunk]) -> torch.Tensor:
        with self.ranks.step("forward", chunks_to(seq_chunks, torch.device("cpu"))):
            return super().forward_logits(seq_chunks)

    def prompt_logits(self, ids: list[int], page_size: int) -> torch.Tensor:
        with self.ranks.step("prompt_logits", ids, page_size):
            return super().prompt_logits(ids, page_size)

    @property
    def broken(self) -> str | None:
        return self.ranks.broken

    def close(self) -> None:
        self.ranks.close()
