"""Tensor parallelism's arithmetic: what each of N ranks holds. Torch-free (the memory plan reads it too).

Megatron-style splits (docs/tensor-parallel.md):
- attention: query heads split; KV heads split when N divides them, else (N a multiple of them) each rank keeps
  the one KV head its query heads read, so a KV head is replicated N / n_kv times;
- Gated DeltaNet: key heads and value heads split alike, so value head h still reads key head h // (HV/HK) on
  its own rank; the conv channels ([q | k | v]) and the recurrent state follow the heads;
- MLP, shared expert and every routed expert: the intermediate dim split (gate/up rows, down columns);
- embedding and lm_head: the vocabulary in N equal blocks of rows (the last padded with zero rows);
- the rest (norms, the MoE router, q/k norms, the GDN output norm) replicated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hinfer.config import EngineConfig, ModelConfig
from hinfer.errors import ConfigError


@dataclass(frozen=True)
class Span:
    """Rows [start, stop) of a rank."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def check_tensor_parallel(cfg: ModelConfig, n: int) -> None:
    """ConfigError naming every shape that does not split over n ranks."""
    if n == 1:
        return
    nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    bad = [f"{name} {v}" for name, v in (
        ("num_attention_heads", nq), ("linear_num_key_heads", cfg.linear_num_key_heads),
        ("linear_num_value_heads", cfg.linear_num_value_heads), ("intermediate_size", cfg.intermediate_size),
        ("moe_intermediate_size", cfg.moe_intermediate_size),
        ("shared_expert_intermediate_size", cfg.shared_expert_intermediate_size),
    ) if v % n]  # fmt: skip
    if nkv % n and n % nkv:
        bad.append(f"num_key_value_heads {nkv} (neither divides the other)")
    if bad:
        raise ConfigError(f"--tensor-parallel {n}: {', '.join(bad)} cannot be split over {n} ranks")


def rank_config(cfg: ModelConfig, n: int) -> ModelConfig:
    """The shapes one of n ranks holds (the same for every rank): heads and intermediate dims divided by n."""
    if n == 1:
        return cfg
    if cfg.tensor_parallel != 1:
        raise ValueError("rank_config takes the whole model's config")
    check_tensor_parallel(cfg, n)
    return replace(
        cfg,
        num_attention_heads=cfg.num_attention_heads // n,
        num_key_value_heads=max(1, cfg.num_key_value_heads // n),
        linear_num_key_heads=cfg.linear_num_key_heads // n,
        linear_num_value_heads=cfg.linear_num_value_heads // n,
        intermediate_size=cfg.intermediate_size // n,
        moe_intermediate_size=cfg.moe_intermediate_size // n,
        shared_expert_intermediate_size=cfg.shared_expert_intermediate_size // n,
        tensor_parallel=n,
    )


def split(total: int, n: int, rank: int) -> Span:
    """Rank `rank`'s equal share of `total` (n divides it)."""
    per = total // n
    return Span(rank * per, (rank + 1) * per)


def kv_heads(cfg: ModelConfig, n: int, rank: int) -> Span:
    """The KV heads rank `rank` holds: its share when n divides them, else the one its query heads read."""
    nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    if nkv % n == 0:
        return split(nkv, n, rank)
    first_q = split(nq, n, rank).start
    head = first_q // (nq // nkv)
    return Span(head, head + 1)


def vocab_rows(vocab: int, n: int) -> int:
    """Rows of each rank's embedding / lm_head block: ceil(vocab / n)."""
    return -(-vocab // n)


def vocab_span(vocab: int, n: int, rank: int) -> Span:
    """The token ids rank `rank` embeds and scores (the last block may be short: its padding rows are zero)."""
    rows = vocab_rows(vocab, n)
    return Span(min(vocab, rank * rows), min(vocab, (rank + 1) * rows))


def rank_settings(ecfg: EngineConfig) -> EngineConfig:
    """What an engine split over ranks runs: eager steps unless HINFER_TP_GRAPHS=1 (CUDA graphs holding the
    collectives are not verified on GPUs yet: docs/tensor-parallel.md); one process is unchanged. The vision tower,
    when on, is rank 0's alone; the host-RAM tiers hold each rank's shard (--host-cache-gib, --host-kv-gib per rank)."""
    if ecfg.tensor_parallel == 1:
        return ecfg
    graphs = ecfg.cuda_graphs and os.environ.get("HINFER_TP_GRAPHS", "0") == "1"
    return replace(ecfg, cuda_graphs=graphs)
