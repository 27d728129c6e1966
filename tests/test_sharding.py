"""Tensor parallelism's arithmetic (hinfer/sharding.py): rank configs, KV heads split or replicated, vocabulary
blocks, the shapes that cannot split."""

from __future__ import annotations

import pytest

from hinfer.config import EngineConfig, load_model_config
from hinfer.errors import ConfigError
from hinfer.fixtures import config_dir
from hinfer.sharding import Span, check_tensor_parallel, kv_heads, rank_config, rank_settings, vocab_span


def _cfg(name: str):
    path = config_dir(name)
    assert path is not None
    return load_model_config(path)


def test_rank_config_divides_heads_and_rows():
    cfg = _cfg("qwen3.6-27b")  # 24 q heads, 4 KV heads, GDN 16 key / 48 value heads, intermediate 17408
    assert rank_config(cfg, 1) is cfg
    r = rank_config(cfg, 4)
    assert (r.num_attention_heads, r.num_key_value_heads) == (6, 1)
    assert (r.linear_num_key_heads, r.linear_num_value_heads, r.intermediate_size) == (4, 12, 4352)
    assert (r.hidden_size, r.vocab_size, r.tensor_parallel) == (cfg.hidden_size, cfg.vocab_size, 4)
    assert rank_config(cfg, 8).num_key_value_heads == 1  # 4 KV heads over 8 ranks: one each, replicated
    with pytest.raises(ValueError):
        rank_config(r, 2)  # a rank config is not split again
    moe = rank_config(_cfg("qwen3.6-35b-a3b"), 2)
    assert (moe.moe_intermediate_size, moe.shared_expert_intermediate_size, moe.num_experts) == (256, 256, 256)


def test_kv_heads_split_or_replicated():
    cfg = _cfg("qwen3.6-27b")
    assert [kv_heads(cfg, 2, r) for r in range(2)] == [Span(0, 2), Span(2, 4)]
    # 8 ranks of 3 query heads; 6 query heads read each KV head, so ranks 2k and 2k+1 keep KV head k
    assert [kv_heads(cfg, 8, r).start for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_vocab_blocks_pad_the_last():
    assert [vocab_span(1001, 2, r) for r in range(2)] == [Span(0, 501), Span(501, 1001)]
    assert [vocab_span(10, 4, r).size for r in range(4)] == [3, 3, 3, 1]


def test_shapes_that_do_not_split():
    check_tensor_parallel(_cfg("qwen3.6-27b"), 1)
    with pytest.raises(ConfigError, match="num_attention_heads 24, linear_num_key_heads 16, linear_num_value_heads 48 "):
        check_tensor_parallel(_cfg("qwen3.6-27b"), 32)
    with pytest.raises(ConfigError, match="num_key_value_heads 4 \\(neither divides the other\\)"):
        check_tensor_parallel(_cfg("qwen3.6-27b"), 6)


def test_rank_settings(monkeypatch):
    one = EngineConfig()
    assert rank_settings(one) is one
    monkeypatch.delenv("HINFER_TP_GRAPHS", raising=False)
    two = rank_settings(EngineConfig(tensor_parallel=2, host_cache_bytes=1 << 30))
    assert (two.vision, two.host_cache_bytes, two.cuda_graphs) == (True, 1 << 30, False)  # host rows per rank
    monkeypatch.setenv("HINFER_TP_GRAPHS", "1")  # the switch that captures them (to be verified on GPUs)
    assert rank_settings(EngineConfig(tensor_parallel=2)).cuda_graphs
    assert not rank_settings(EngineConfig(tensor_parallel=2, cuda_graphs=False)).cuda_graphs
    for bad in (dict(spec="mtp"), dict(lm_head="int4")):
        with pytest.raises(ConfigError, match="--tensor-parallel 2"):
            EngineConfig(tensor_parallel=2, **bad).validate()
