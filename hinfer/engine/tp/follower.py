"""Ranks 1..N-1: load this rank's shard, then run the steps rank 0 sends, in its order, until it says stop.

A follower holds no scheduler and no sampler: each command names what rank 0 is about to do to its own shard
(zero or copy GDN slots, one forward step over the same SeqChunks, one prompt's logits, capture the same decode
graphs, copy a host-RAM tier's row), and the follower does it to its shard, meeting rank 0 in every all-reduce and
gather of the model. Entered through main() in a process rank 0 started, or from load_model in a process a
launcher (torchrun) started.
"""

from __future__ import annotations

import logging
import pickle
import signal
import sys
from pathlib import Path

import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.host_tier import HostTier
from hinfer.engine.runner import ModelRunner
from hinfer.engine.tp.group import Channel, chunks_to, connect, disconnect, rank_device
from hinfer.engine.tp.load import load_rank_model
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.serving_layout import lay_out_for_serving
from hinfer.model.state import ModelState

log = logging.getLogger("hinfer.tp")


def main() -> None:
    """Entry of a follower that rank 0 started: follow()'s arguments arrive pickled on stdin."""
    args = pickle.load(sys.stdin.buffer)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank {args[0]} %(levelname)s %(name)s: %(message)s")
    sys.exit(follow(*args))


def follow(rank: int, n: int, init_method: str, path: Path | None, cfg: ModelConfig, ecfg: EngineConfig,
           recipe) -> int:
    """A follower's whole life: join, load (its shard of the checkpoint at `path`, or random weights with no path),
    report, serve, leave. -> exit status (0: rank 0 said stop)."""
    # Ctrl-C reaches every process of the terminal's group: rank 0 drains its requests, then tells this one to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    device = rank_device(ecfg.device, rank)
    tp, channel = connect(rank, n, init_method, device)
    try:
        model, error = None, None
        try:
            model = load_rank_model(path, cfg, ecfg, recipe, tp, device)
        except Exception as e:  # reported to rank 0, which raises it
            error = f"rank {rank}: {e}"
        if any(channel.statuses(error)):
            return 1
        assert model is not None
        serve_steps(model, channel, device)
        return 0
    except Exception as e:  # rank 0 gone (its connection closed), or a step failed here
        log.error("rank %d leaves: %s", rank, e)
        return 1
    finally:
        disconnect()


@torch.inference_mode()
def serve_steps(model: Qwen35ForCausalLM, channel: Channel, device: torch.device) -> None:
    lay_out_for_serving(model, device)  # as make_core does on rank 0
    runner: ModelRunner | None = None
    tiers: dict[str, HostTier] = {}  # the prefix cache's host-RAM tiers: rows of this rank's shard
    while True:
        command, *args = channel.receive()
        if command == "stop":
            return
        if command == "time_all_reduce":  # `hinfer bench`: the collectives alone, in step with rank 0
            model.tp.time_all_reduce(*args, device)
            continue
        if command == "state":  # the pool rank 0 allocated, in this rank's shapes
            runner = ModelRunner(model, ModelState(model.cfg, args[0], device), sampler=None)
            continue
        assert runner is not None, f"{command!r} before the state"
        if command == "forward":  # image embeddings (rank 0 encodes the images) come on the CPU
            runner.forward_logits(chunks_to(args[0], device))
        elif command == "prompt_logits":
            runner.prompt_logits(*args)
        elif command == "reset_slots":
            runner.state.reset_slots(*args)
        elif command == "copy_slots":
            runner.state.copy_slots(*args)
        elif command == "host_tier":
            tiers[args[0]] = runner.host_tier(*args)
        elif command == "host_copy_out":
            tiers[args[0]].copy_out(*args[1:])
        elif command == "host_copy_in":
            tiers[args[0]].copy_in(*args[1:])
        elif command == "capture_graphs":
            runner.capture_graphs(*args)
        elif command == "fill_random":
            runner.state.fill_random()
        else:
            raise ValueError(f"unknown command {command!r} from rank 0")
