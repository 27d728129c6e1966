"""The cuDNN prefill path's split and merge on the CPU: the parts computed by their torch body (`part_ref`) in
place of cuDNN, read from shuffled pages in every KV format, against the paged reference (the GPU test runs the
cuDNN parts: tests/gpu/test_norm_attention_kernels.py)."""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.engine.memory_plan import CUDNN_BLOCK, CUDNN_MIN_Q, CUDNN_QUANTUM
from hinfer.ops.attention import paged_attention_ref
from hinfer.ops.kv_cache import allocate_kv, read_kv, write_kv
from hinfer.ops.triton import attention as ta
from hinfer.ops.triton import attention_cudnn as ac
from hinfer.ops.triton.attention import _cudnn_prefills
from hinfer.ops.triton.attention_cudnn import (
    BLOCK,
    MIN_Q,
    QUANTUM,
    PartSpan,
    cudnn_prefill,
    cudnn_prefill_enabled,
    part_plan,
    part_ref,
    plan_shapes,
    warm_plans,
)
from hinfer.ops.triton.kv_read import read_kv_heads
from hinfer.ops.triton.parts_merge import merge_part, merge_part_ref

PAGE, H, HKV, D = 16, 4, 2, 64
FORMATS = {"bf16": (torch.bfloat16,) * 2, "fp8": (torch.float8_e4m3fn,) * 2, "int8": (torch.int8,) * 2,
           "k8v4": (torch.int8, torch.uint8), "int4": (torch.uint8,) * 2}  # fmt: skip


def _read(cache: torch.Tensor, pages: torch.Tensor, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
    """Tokens [start, stop) of a sequence on `pages` by the torch body, [stop - start, Hkv, D]."""
    p0 = start // PAGE
    return read_kv(cache, pages[p0 : -(-stop // PAGE)], stop - p0 * PAGE, dtype)[start - p0 * PAGE :]


def _cache(pages: int, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    rows = allocate_kv(1, pages, PAGE, HKV, D, dtype, "cpu")[1][0]
    n = pages * PAGE
    x = (torch.rand(n, HKV, 1, generator=g) * 3 + 0.05) * torch.randn(n, HKV, D, generator=g)
    write_kv(rows, torch.arange(n), x.to(torch.bfloat16) if dtype == torch.bfloat16 else x)
    return rows


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("cached,n,block", [(0, 40, 64), (100, 37, 64), (130, 50, 32), (64, 16, 64), (247, 21, 64)])
def test_parts_merge_to_the_paged_reference(fmt, cached, n, block):
    seed = 1234
    g = torch.Generator().manual_seed(seed)
    random.seed(seed)
    need = -(-(cached + n) // PAGE)
    pages = list(range(1, need + 1))
    random.shuffle(pages)
    batch = build_forward_batch([SeqChunk(token_ids=[1] * n, cached_len=cached, page_ids=pages, gdn_slot=1)],
                                PAGE, "cpu")  # fmt: skip
    kc, vc = (_cache(need + 1, dt, g) for dt in FORMATS[fmt])
    q = (2 * torch.randn(n, H, D, generator=g)).to(torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    cudnn_prefill(q, kc, vc, batch.page_table[0], cached, out, D**-0.5, part=part_ref, block=block, quantum=8)
    want = paged_attention_ref(q.float(), kc, vc, batch, D**-0.5)  # keys / values read in the model dtype
    err = ((out.float() - want).norm() / want.norm()).item()
    # bf16 parts (each rounded once) merged in fp32: measured <= 5.8e-3 over these cases
    assert err < 1e-2, f"{fmt} cached={cached} n={n} block={block} seed={seed} rel {err:.2e}"


def test_switch_and_short_chunks_stay_on_triton(monkeypatch):
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")
    assert not cudnn_prefill_enabled(torch.device("cpu"))  # off the GPU: the Triton kernel (interpreted)
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "0")
    assert not cudnn_prefill_enabled(torch.device("cuda"))
    monkeypatch.delenv("HINFER_PREFILL_CUDNN")
    chunks = [SeqChunk(token_ids=[1] * 5, cached_len=3, page_ids=[4, 5], gdn_slot=1)]
    batch = build_forward_batch(chunks, 4, "cpu")
    q = torch.zeros(5, 2, 8, dtype=torch.bfloat16)
    kc = torch.zeros(8, 4, 1, 8, dtype=torch.bfloat16)
    assert not _cudnn_prefills(q, kc, kc, torch.empty_like(q), batch, 0, 0.1)


def test_a_refused_shape_leaves_prefill_to_triton(monkeypatch):
    """cuDNN raising on a chunk: the call reports it did not run (the Triton kernel writes every row) and the path
    stays off for the process."""
    monkeypatch.setattr(ac, "_failed", False)
    monkeypatch.setattr(ta, "cudnn_prefill_enabled", lambda device: not ac._failed)
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")

    def refuse(*args, **kwargs):
        raise RuntimeError("cuDNN Frontend error: no valid engine configs")

    monkeypatch.setattr(ta, "cudnn_prefill", refuse)
    batch = build_forward_batch([SeqChunk(token_ids=[1] * MIN_Q, cached_len=0, page_ids=[1, 2], gdn_slot=1)],
                                MIN_Q, "cpu")  # fmt: skip
    q = torch.zeros(MIN_Q, 2, 8, dtype=torch.bfloat16)
    kc = torch.zeros(3, MIN_Q, 1, 8, dtype=torch.bfloat16)
    assert not _cudnn_prefills(q, kc, kc, torch.empty_like(q), batch, 0, 0.1)
    assert ac._failed and not ta.cudnn_prefill_enabled(torch.device("cuda"))


def test_the_plan_counts_the_same_block():
    assert (CUDNN_BLOCK, CUDNN_MIN_Q, CUDNN_QUANTUM) == (BLOCK, MIN_Q, QUANTUM)  # memory_plan stays torch-free: a copy of the constants


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("start,stop", [(0, 70), (37, 130), (16, 16)])
def test_kernel_reads_back_as_the_torch_body_bit_for_bit(fmt, start, stop):
    """read_kv_heads (one pass through load_tile) equals read_kv (codes times scales in fp32, rounded once) on
    shuffled pages, every format, spans starting mid-page."""
    g = torch.Generator().manual_seed(99)
    pages = torch.randperm(10, generator=g)[:9].to(torch.int32) + 1
    for dt in FORMATS[fmt]:
        cache = _cache(11, dt, g)
        got = read_kv_heads(cache, pages, start, stop, torch.bfloat16, D)
        want = _read(cache, pages.long(), start, stop, torch.bfloat16).transpose(0, 1)
        assert got.shape == (HKV, stop - start, D) and got.is_contiguous()
        assert torch.equal(got, want), f"{fmt} {dt} [{start}, {stop})"


def test_long_chunks_on_cudnn_the_rest_on_triton(monkeypatch):
    """A decode lane, two long chunks and a short one between them: the long ones by parts (their torch body in
    cuDNN's place), the lane and the short chunk on the Triton kernels (interpreted), every row against the
    paged reference."""
    monkeypatch.setattr(ta, "cudnn_prefill_enabled", lambda device: True)
    monkeypatch.setattr(ac, "cudnn_part", part_ref)
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")  # every long chunk, whatever its shapes
    seed = 4321
    g = torch.Generator().manual_seed(seed)
    cached, q_lens = [50, 100, 20, 0], [1, MIN_Q + 6, 37, MIN_Q + 76]
    need = [-(-(c + n) // PAGE) for c, n in zip(cached, q_lens)]
    pool = (torch.randperm(sum(need), generator=g) + 1).tolist()
    chunks, i = [], 0
    for c, n, p in zip(cached, q_lens, need):
        chunks.append(SeqChunk(token_ids=[1] * n, cached_len=c, page_ids=pool[i : i + p], gdn_slot=1))
        i += p
    batch = build_forward_batch(chunks, PAGE, "cpu")
    kc, vc = (_cache(sum(need) + 1, torch.bfloat16, g) for _ in range(2))
    q = (2 * torch.randn(batch.num_tokens, H, D, generator=g)).to(torch.bfloat16)
    assert ta._cudnn_prefills(q, kc, kc, torch.empty_like(q), batch, 1, D**-0.5) == {1, 3}
    assert ta._runs([2, 5, 6, 7, 9]) == [(2, 3), (5, 8), (9, 10)]
    out = ta.paged_attention(q, kc, vc, batch, D**-0.5)
    want = paged_attention_ref(q.float(), kc.float(), vc.float(), batch, D**-0.5)
    start = 0
    for b, n in enumerate(q_lens):
        rows = slice(start, start + n)
        err = ((out[rows].float() - want[rows]).norm() / want[rows].norm()).item()
        assert err < 1e-2, f"sequence {b} seed={seed} rel {err:.2e}"  # bf16 rounding: measured <= 2.3e-3
        start += n


def test_part_plan_covers_the_keys_once_in_bounded_shapes():
    """Every key before the chunk's end in exactly one part, the causal one last; over every page-aligned prefix
    up to 200K and the server's 2K chunks (or a last chunk of any length), the (queries, keys) shapes cuDNN sees
    stay a small set: its plans are built once each."""
    assert part_plan(0, 2048) == [PartSpan(0, 2048, True)]
    assert part_plan(70000, 2048) == [PartSpan(0, 32768, False), PartSpan(32768, 65536, False),
                                      PartSpan(65536, 69632, False), PartSpan(69632, 69888, False),
                                      PartSpan(69888, 72048, True, 112)]  # fmt: skip
    shapes = set()
    for cached in range(0, 200_000, 64):
        for n in (2048, 1024 + cached % 1024):
            spans = part_plan(cached, n)
            assert [s.causal for s in spans] == [False] * (len(spans) - 1) + [True]
            assert all(a.stop == b.start for a, b in zip(spans, spans[1:])) and spans[0].start == 0
            assert spans[-1].stop == cached + n and spans[-1].lead < QUANTUM
            rows = -(-(spans[-1].lead + n) // QUANTUM) * QUANTUM
            shapes |= {(rows if s.causal else -(-n // QUANTUM) * QUANTUM, rows if s.causal else s.stop - s.start)
                       for s in spans}  # fmt: skip
    assert len(shapes) <= 60, len(shapes)


@pytest.mark.parametrize("chunk,max_context", [(2048, 200_000), (1024, 40_000), (1536, 5000)])
def test_plan_shapes_hold_every_shape_the_parts_bring(chunk, max_context):
    """plan_shapes(n) covers every (queries, keys, causal) shape cudnn_prefill gives cuDNN for a chunk of n tokens
    at any prefix below max_context, and names each once; over chunks of MIN_Q..chunk tokens they stay a bounded
    set (the server warms the full chunk's at startup)."""
    seen, named = set(), set()
    for n in sorted({chunk, MIN_Q, MIN_Q + 300, chunk - 1}):
        want = plan_shapes(n, max_context)
        assert len(set(want)) == len(want)
        got = set()
        for cached in range(0, max_context - n, 37):  # any length (a previous turn's answer is cached too)
            for s in part_plan(cached, n):
                rows = -(-(s.lead + n) // QUANTUM) * QUANTUM
                got.add((rows, rows if s.causal else s.stop - s.start, s.causal))
        assert got == set(want), sorted(got ^ set(want))
        seen |= got
        named |= set(want)
    assert len(plan_shapes(chunk, max_context)) <= 12
    assert len({s for n in range(MIN_Q, chunk + 1) for s in plan_shapes(n, max_context)}) <= 60


def test_warm_plans_runs_each_shape_as_laid_out_at_run_time(monkeypatch):
    monkeypatch.setattr(ac, "_planned", set())
    calls = []
    monkeypatch.setattr(ac, "cudnn_part", lambda q, k, v, causal, scale: calls.append(
        (q.shape, k.shape, q.is_contiguous() and k.is_contiguous() and v is k, causal, scale)))  # fmt: skip
    n, _ = warm_plans(H, HKV, D, torch.bfloat16, torch.device("cpu"), 1024, 3000, 0.125)
    shapes = plan_shapes(1024, 3000)
    assert n == len(shapes) == len(calls)
    assert [(c[0][2], c[1][2], c[3]) for c in calls] == shapes
    assert all(c[0][:2] == (1, H) and c[1][:2] == (1, HKV) and c[0][3] == c[1][3] == D for c in calls)
    assert all(c[2] and c[4] == 0.125 for c in calls)
    assert warm_plans(H, HKV, D, torch.bfloat16, torch.device("cpu"), MIN_Q - 1, 3000, 0.125)[0] == 0
    assert ac._planned == set(shapes)


def test_by_default_only_planned_shapes_go_to_cudnn(monkeypatch):
    """The default mode: after startup planned a full chunk's shapes, a full chunk after any prefix goes to cuDNN;
    a shorter last chunk of a length not planned stays on the Triton kernel (no request waits for a plan); `1`
    takes it, `0` and short chunks take nothing; a bad value is refused."""
    monkeypatch.setattr(ac, "_planned", set())
    monkeypatch.setattr(ac, "cudnn_part", lambda q, k, v, causal, scale: None)
    monkeypatch.delenv("HINFER_PREFILL_CUDNN", raising=False)
    chunk, max_context = 2048, 200_000
    assert ac.cudnn_mode() == "planned" and not ac.cudnn_takes(0, chunk)
    warm_plans(H, HKV, D, torch.bfloat16, torch.device("cpu"), chunk, max_context, 0.125)
    for cached in (0, 16, 255, 256, 4096, 70000, 131072 + 48, max_context - chunk):
        assert ac.cudnn_takes(cached, chunk), cached
        assert set(ac.part_shapes(cached, chunk)) <= set(plan_shapes(chunk, max_context))
    assert not ac.cudnn_takes(4096, 1500) and not ac.cudnn_takes(0, MIN_Q - 1)
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")
    assert ac.cudnn_takes(4096, 1500) and not ac.cudnn_takes(0, MIN_Q - 1)
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "0")
    assert not cudnn_prefill_enabled(torch.device("cuda"))
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "yes")
    with pytest.raises(ValueError, match="HINFER_PREFILL_CUDNN"):
        ac.cudnn_mode()


def test_merge_kernel_matches_the_torch_body():
    """One pass (interpreted here) against merge_part_ref's four, a part whose rows are a strided slice (the
    padded query rows dropped), log-sum-exps far apart in both directions: fp32 within 2e-6 relative."""
    g = torch.Generator().manual_seed(5)
    acc = torch.randn(3, 37, 64, generator=g)
    lacc = torch.randn(3, 37, generator=g) * 20
    part = torch.randn(3, 48, 64, generator=g).to(torch.bfloat16)[:, 5:42]
    lse = torch.randn(3, 48, generator=g)[:, 5:42] * 20
    want_acc, want_l = acc.clone(), lacc.clone()
    merge_part_ref(want_acc, want_l, part, lse)
    merge_part(acc, lacc, part, lse)
    torch.testing.assert_close(acc, want_acc, rtol=2e-6, atol=2e-6)
    torch.testing.assert_close(lacc, want_l, rtol=2e-6, atol=2e-6)
