"""The contiguous-pages prefill path's host side (its FlashAttention-2 call runs on the GPU only:
tests/gpu/test_norm_attention_kernels.py)."""

from __future__ import annotations

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.ops.triton.attention import _flash_prefills
from hinfer.ops.triton.attention_flash import cache_rows, contiguous_run, flash_prefill_enabled


def test_contiguous_run_finds_consecutive_pages_only():
    assert contiguous_run([7, 8, 9, 10], 4) == 7
    assert contiguous_run([7, 8, 9, 3], 3) == 7  # pages past the tokens' last do not count
    assert contiguous_run([7, 8, 10], 3) == -1
    assert contiguous_run([9, 8], 2) == -1
    assert contiguous_run([5], 1) == 5
    assert contiguous_run([], 0) == -1
    assert contiguous_run([4, 5], 3) == -1  # fewer pages than the tokens need


def test_cache_rows_is_a_view_of_consecutive_pages():
    g = torch.Generator().manual_seed(0)
    cache = torch.randn(6, 4, 2, 8, generator=g)  # [P, page, Hkv, D]
    rows = cache_rows(cache, 2, 10)
    assert rows.shape == (10, 2, 8) and rows.data_ptr() == cache[2].data_ptr()
    assert torch.equal(rows, torch.cat([cache[2], cache[3], cache[4, :2]]))


def test_switch_and_host_pages(monkeypatch):
    monkeypatch.delenv("HINFER_PREFILL_FLASH", raising=False)
    assert not flash_prefill_enabled()
    monkeypatch.setenv("HINFER_PREFILL_FLASH", "1")
    assert flash_prefill_enabled()
    chunks = [SeqChunk(token_ids=[1] * 5, cached_len=3, page_ids=[4, 5], gdn_slot=1)]
    batch = build_forward_batch(chunks, 4, "cpu")
    assert batch.page_ids_cpu == [[4, 5]]
    q = torch.zeros(5, 2, 8, dtype=torch.bfloat16)
    kc = torch.zeros(8, 4, 1, 8, dtype=torch.bfloat16)
    # off the GPU the Triton prefill kernel (interpreted) keeps every sequence
    assert not _flash_prefills(q, kc, kc, torch.empty_like(q), batch, 0, 0.1)
