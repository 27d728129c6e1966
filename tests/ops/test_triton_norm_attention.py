"""Triton norm / qk-norm-rope-write / paged attention kernels against their torch reference bodies.

Runs the kernels on CPU tensors in Triton's interpreter at tiny shapes (tests/gpu covers CUDA).
Shapes: H=6, Hkv=2, D=32, R=8, pages of 8/16 handed out out of order. Outputs the
kernels allocate are poisoned (torch.empty -> NaN) so an unwritten element fails the comparison.
fp32 runs must match to ~1e-5; bf16 norms and RoPE match the reference bit for bit (the kernels mirror its
roundings), bf16 attention is compared with the reference evaluated in fp32 (the reference rounds scores
to bf16, the kernels keep them in fp32).
"""

from __future__ import annotations

import contextlib
import random

import pytest
import torch

triton = pytest.importorskip("triton")

from hinfer.batch import ForwardBatch, SeqChunk, build_forward_batch  # noqa: E402
from hinfer.ops import attention as ref_attn  # noqa: E402
from hinfer.ops import norm as ref_norm  # noqa: E402
from hinfer.ops.kv_cache import allocate_kv, kv_scales, read_kv, write_kv  # noqa: E402
from hinfer.ops.rope import rope_inv_freq  # noqa: E402
from hinfer.ops.triton import attention as ta  # noqa: E402
from hinfer.ops.triton import attention_decode as dec  # noqa: E402
from hinfer.ops.triton import attention_prefill as pre  # noqa: E402
from hinfer.ops.triton import norm as tn  # noqa: E402
from hinfer.ops.triton.common import interpreted  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreter")

H, HKV, D, R = 6, 2, 32, 8
EPS = 1e-6


def test_kernels_interpreted():
    assert all(interpreted(k) for k in (tn._norm_kernel, dec._decode_kernel, pre._prefill_kernel))


@contextlib.contextmanager
def poisoned_empty():
    """torch.empty returns NaN-filled floating tensors, so outputs never written by a kernel show up."""
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


def _close(out: torch.Tensor, want: torch.Tensor, atol: float, rtol: float = 0.0, seed: int = -1) -> None:
    assert out.shape == want.shape and out.dtype == want.dtype
    assert not torch.isnan(out).any(), f"unwritten (NaN) elements (seed {seed})"
    torch.testing.assert_close(
        out.float(), want.float(), atol=atol, rtol=rtol, msg=lambda m: f"{m}\n(seed {seed})"
    )


def _tol(dtype: torch.dtype) -> tuple[float, float]:
    # bf16: allow one ulp (rsqrt / sin / cos may differ in the last fp32 bit and flip a rounding)
    return (1e-5, 1e-5) if dtype == torch.float32 else (1e-6, 2**-7)


DTYPES = [torch.float32, torch.bfloat16]


# ----------------------------------------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_strided_and_nd(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(7, 300, generator=g).to(dtype)
    w = (0.1 * torch.randn(96, generator=g)).to(dtype)
    for x in (base[:, 100:196], base[:, :192].reshape(7, 2, 96), base[0, :96]):  # view, 3-D, 1-D
        with poisoned_empty():
            y = tn.rms_norm(x, w, EPS)
        _close(y, ref_norm.rms_norm_ref(x, w, EPS), *_tol(dtype), seed=seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(9, 2 * 160, generator=g).to(dtype)[:, 160:]  # strided view, like a fused GEMM slice
    res = (3 * torch.randn(9, 160, generator=g)).to(dtype)
    w = (0.1 * torch.randn(160, generator=g)).to(dtype)
    with poisoned_empty():
        y, r = tn.add_rms_norm(x, res, w, EPS)
    y_ref, r_ref = ref_norm.add_rms_norm_ref(x, res, w, EPS)
    _close(r, r_ref, 0.0, seed=seed)  # the residual sum is rounded exactly like torch's
    _close(y, y_ref, *_tol(dtype), seed=seed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden,experts", [(1, 160, 33), (3, 96, 9), (8, 200, 17)])
def test_add_rms_norm_linear(dtype, rows, hidden, experts, seed):
    """The router in the norm's launch: normed rows and residual as the fused add + norm (a strided x like a fused
    GEMM slice), logits as the reference linear of the normed rows (one bf16 ulp: the dot's summation order)."""
    from hinfer.ops.triton import norm_linear as tnl

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2 * hidden, generator=g).to(dtype)[:, hidden:]
    res = (3 * torch.randn(rows, hidden, generator=g)).to(dtype)
    w = (0.1 * torch.randn(hidden, generator=g)).to(dtype)
    lin = (torch.randn(experts, hidden, generator=g) / hidden**0.5).to(dtype)
    with poisoned_empty():
        y, r, logits = tnl.add_rms_norm_linear(x, res, w, lin, EPS)
    y_ref, r_ref = ref_norm.add_rms_norm_ref(x, res, w, EPS)
    _close(r, r_ref, 0.0, seed=seed)
    _close(y, y_ref, *_tol(dtype), seed=seed)
    want = (y_ref.float() @ lin.float().T).to(dtype)
    _close(logits, want, *((1e-5, 1e-5) if dtype == torch.float32 else (1e-3, 2**-7)), seed=seed)


def test_add_rms_norm_linear_switch(monkeypatch, seed):
    """ops.norm.add_rms_norm_linear takes the fused launch at decode rows by default (not with the fusions off),
    and gives the separate ops' results either way."""
    from hinfer.ops import dispatch
    from hinfer.ops import norm as ops_norm
    from hinfer.ops.triton import norm_linear as tnl

    monkeypatch.setattr(dispatch, "_backend", "triton")
    g = torch.Generator().manual_seed(seed)
    x, res = torch.randn(2, 64, generator=g), torch.randn(2, 64, generator=g)
    w, lin = 0.1 * torch.randn(64, generator=g), torch.randn(12, 64, generator=g) / 8
    calls = []
    real = tnl.add_rms_norm_linear
    monkeypatch.setattr(tnl, "add_rms_norm_linear", lambda *a: calls.append(1) or real(*a))
    outs = []
    for on in ("0", "1"):
        monkeypatch.setenv("HINFER_FUSE_LAUNCHES", on)
        outs.append(ops_norm.add_rms_norm_linear(x, res, w, lin, EPS))
    assert calls == [1]  # off with 0, on by default at 2 rows
    for a, b in zip(*outs):
        _close(a, b, 1e-5, 1e-5, seed=seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_rms_norm(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t, hv, v = 5, 6, 32
    x = torch.randn(t, hv, v, generator=g).to(dtype)
    fused = torch.randn(t, 2 * hv * v + 10, generator=g).to(dtype)
    z = fused[:, 3 : 3 + hv * v].view(t, hv, v)  # strided view of a fused projection
    w = (1 + 0.1 * torch.randn(v, generator=g)).to(dtype)
    with poisoned_empty():
        y = tn.gated_rms_norm(x, z, w, EPS)
    _close(y, ref_norm.gated_rms_norm_ref(x, z, w, EPS), *_tol(dtype), seed=seed)


# ------------------------------------------------------------------------------- qk norm + rope + write


@pytest.mark.parametrize(
    "dtype,attn_factor", [(torch.float32, 1.0), (torch.bfloat16, 1.0), (torch.bfloat16, 1.1386)]
)
def test_qk_norm_rope_write(dtype, attn_factor, seed):
    g = torch.Generator().manual_seed(seed)
    t, n_pages, page = 11, 12, 16
    qkv = torch.randn(t, H * 2 * D + 2 * HKV * D, generator=g).to(dtype)
    q = qkv[:, : H * 2 * D].view(t, H, 2 * D).chunk(2, dim=-1)[0]  # as the model: q is half of [T, H, 2D]
    k = qkv[:, H * 2 * D : H * 2 * D + HKV * D].view(t, HKV, D)
    v = qkv[:, H * 2 * D + HKV * D :].view(t, HKV, D)
    qw = (0.2 * torch.randn(D, generator=g)).to(dtype)
    kw = (0.2 * torch.randn(D, generator=g)).to(dtype)
    positions = torch.randint(0, 1_100_000, (t,), generator=g)  # long-context angles, YaRN's 1M window too
    positions[0] = 0
    inv_freq = rope_inv_freq(R, 1e7)
    slots = torch.randperm(n_pages * page, generator=g)[:t]
    k_cache = torch.randn(n_pages, page, HKV, D, generator=g).to(dtype)
    v_cache = torch.randn(n_pages, page, HKV, D, generator=g).to(dtype)
    kc_ref, vc_ref = k_cache.clone(), v_cache.clone()
    k_cache.view(-1, HKV, D)[slots] = float("nan")
    v_cache.view(-1, HKV, D)[slots] = float("nan")
    with poisoned_empty():
        q_out = ta.qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, k_cache, v_cache, slots,
                                      attn_factor)
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots,
                                            attn_factor)
    # attn_factor: YaRN's cos/sin scale (1.1386 at factor 4), applied in fp32 before rounding by both. fp32:
    # angles reach 1.1e6 rad here; the kernel reduces them itself while torch's cos/sin reduce exactly, so
    # values differ by up to ~1e-5 absolute (seen 1.3e-5 once in CI at |q| ~ 0.1); bf16 keeps its one-ulp bound
    tol = (5e-5, 1e-4) if dtype == torch.float32 else _tol(dtype)
    _close(q_out, q_ref, *tol, seed=seed)
    _close(k_cache, kc_ref, *tol, seed=seed)
    _close(v_cache, vc_ref, 0.0, seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qk_norm_rope_write_multi_axis(dtype, seed):
    """Image tokens: positions [3, T] (t, h, w), each frequency on its stream (interleaved mrope), as the
    reference."""
    from hinfer.ops.rope import mrope_freq_axes

    g = torch.Generator().manual_seed(seed)
    t, n_pages, page = 9, 4, 16
    q = torch.randn(t, H, D, generator=g).to(dtype)
    k = torch.randn(t, HKV, D, generator=g).to(dtype)
    v = torch.randn(t, HKV, D, generator=g).to(dtype)
    qw = (0.2 * torch.randn(D, generator=g)).to(dtype)
    kw = (0.2 * torch.randn(D, generator=g)).to(dtype)
    positions = torch.stack([torch.full((t,), 40), 40 + torch.arange(t) // 3, 40 + torch.arange(t) % 3])
    positions[:, 0], positions[:, 1] = 3, 4  # two text tokens: the same position on every stream
    inv_freq = rope_inv_freq(R, 1e7)
    axes = mrope_freq_axes(inv_freq.numel(), (R // 6, R // 6, R // 6))
    assert set(axes.tolist()) == {0, 1, 2}
    slots = torch.randperm(n_pages * page, generator=g)[:t]
    k_cache = torch.zeros(n_pages, page, HKV, D).to(dtype)
    v_cache = torch.zeros(n_pages, page, HKV, D).to(dtype)
    kc_ref, vc_ref = k_cache.clone(), v_cache.clone()
    with poisoned_empty():
        q_out = ta.qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, k_cache, v_cache, slots, 1.0,
                                      axes)  # fmt: skip
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots, 1.0,
                                            axes)  # fmt: skip
    _close(q_out, q_ref, *_tol(dtype), seed=seed)
    _close(k_cache, kc_ref, *_tol(dtype), seed=seed)
    one = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions[0], inv_freq, kc_ref.clone(),
                                          vc_ref.clone(), slots)  # fmt: skip
    assert (one - q_ref).abs().max() > 1e-2  # the h / w streams matter


# ------------------------------------------------------------------------------------ paged attention


def _batch(
    cached: list[int], q_lens: list[int], page: int, dtype: torch.dtype, seed: int
) -> tuple[ForwardBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch whose pages are a shuffled pool (page 0 stays scratch), random caches and queries."""
    rng = random.Random(seed)
    need = [(c + n + page - 1) // page for c, n in zip(cached, q_lens)]
    pool = list(range(1, sum(need) + 3))
    rng.shuffle(pool)
    chunks, i = [], 0
    for c, n, p in zip(cached, q_lens, need):
        chunks.append(SeqChunk(token_ids=[1] * n, cached_len=c, page_ids=pool[i : i + p], gdn_slot=1))
        i += p
    batch = build_forward_batch(chunks, page, "cpu")
    g = torch.Generator().manual_seed(seed)
    n_pages = len(pool) + 1
    k_cache = torch.randn(n_pages, page, HKV, D, generator=g).to(dtype)
    v_cache = torch.randn(n_pages, page, HKV, D, generator=g).to(dtype)
    q = (2 * torch.randn(batch.num_tokens, H, D, generator=g)).to(dtype)
    return batch, q, k_cache, v_cache


def _attn_ref(q, k_cache, v_cache, batch):
    """Reference in fp32 (exact fp32 for fp32 inputs; for bf16, the truth the kernel's fp32 softmax targets)."""
    out = ref_attn.paged_attention_ref(q.float(), k_cache.float(), v_cache.float(), batch, D**-0.5)
    return out.to(q.dtype)


def _attn_tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 2e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}


def _run_prefill(q, kc, vc, batch, **cfg):
    out = torch.full_like(q, float("nan"))
    qm = batch.max_q_len
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    pre.paged_prefill(q, kc, vc, out, *args, 0, batch.num_seqs, qm, **cfg)
    return out


@pytest.mark.parametrize(
    "dtype,page,block_n",
    [(torch.float32, 16, 16), (torch.bfloat16, 16, 16), (torch.float32, 8, 16), (torch.float32, 16, 8)],
)
def test_prefill_kernel_varlen(dtype, page, block_n, seed):
    # chunks of several lengths over prefixes 0..40, and single-token sequences between them
    cached, q_lens = [0, 40, 16, 0, 7, 3], [20, 1, 17, 1, 33, 5]
    batch, q, kc, vc = _batch(cached, q_lens, page, dtype, seed=seed)
    out = _run_prefill(q, kc, vc, batch, block_m=16, block_n=block_n)
    _close(out, _attn_ref(q, kc, vc, batch), **_attn_tol(dtype), seed=seed)


@pytest.mark.parametrize("dtype,splits", [(torch.float32, 2), (torch.float32, 5), (torch.bfloat16, 3)])
def test_prefill_kernel_split_kv(dtype, splits, seed):
    """A few new tokens over long cached prefixes, keys cut into splits (combined by the decode kernel's
    combine); splits past a short sequence's keys are empty (lse -inf) and must not count."""
    cached, q_lens = [150, 9, 0, 97], [20, 33, 17, 12]
    batch, q, kc, vc = _batch(cached, q_lens, 16, dtype, seed=seed)
    with poisoned_empty():  # poisons the split partials too: every (row, split) must be written
        out = _run_prefill(q, kc, vc, batch, block_m=16, block_n=16, num_splits=splits)
    _close(out, _attn_ref(q, kc, vc, batch), **_attn_tol(dtype), seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_kernel_lazy_rescale(dtype, seed):
    """The lazy rescale (the max moves only when a block's scores pass it by more than 8, base 2): peaky scores
    (queries 6 x randn: over these sequences a program's key block passes the running max by more than 8 at
    about a third of the blocks, by less at the rest) give the reference's output, as the eager rescale does."""
    cached, q_lens = [150, 9, 0, 97], [20, 33, 17, 12]
    batch, q, kc, vc = _batch(cached, q_lens, 16, dtype, seed=seed)
    q = (3 * q.float()).to(dtype)
    want = _attn_ref(q, kc, vc, batch)
    with poisoned_empty():
        lazy = _run_prefill(q, kc, vc, batch, block_m=16, block_n=16, lazy=True)
        eager = _run_prefill(q, kc, vc, batch, block_m=16, block_n=16, lazy=False)
    _close(lazy, want, **_attn_tol(dtype), seed=seed)
    _close(lazy, eager, **_attn_tol(dtype), seed=seed)


def _run_decode(q, kc, vc, batch, **cfg):
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    dec.paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens, batch.max_q_len, **cfg)
    return out


@pytest.mark.parametrize(
    "dtype,splits,block_n",
    [(torch.float32, 1, 16), (torch.float32, 3, 16), (torch.bfloat16, 4, 16), (torch.float32, 2, 32)],
)
def test_decode_verify_kernel(dtype, splits, block_n, seed):
    # q_len 1..4 (decode and verification); cached 30 + q 4 with 3 splits of 16-token blocks leaves the
    # last split past the causal limit of the first two rows (the -inf guard)
    cached, q_lens = [0, 5, 37, 30, 100, 1], [1, 2, 4, 4, 3, 1]
    batch, q, kc, vc = _batch(cached, q_lens, 16, dtype, seed=seed)
    with poisoned_empty():  # also poisons the split partials: every (row, split) must be written
        out = _run_decode(q, kc, vc, batch, num_splits=splits, block_n=block_n)
    _close(out, _attn_ref(q, kc, vc, batch), **_attn_tol(dtype), seed=seed)


def test_paged_attention_dispatch_mixed_batch(seed):
    # decode lanes first (decode kernel), then chunks (prefill kernel), through the public function
    cached, q_lens = [9, 0, 33, 0, 20], [1, 3, 1, 19, 12]
    batch, q, kc, vc = _batch(cached, q_lens, 16, torch.float32, seed=seed)
    with poisoned_empty():
        out = ta.paged_attention(q, kc, vc, batch, D**-0.5)
    _close(out, _attn_ref(q, kc, vc, batch), **_attn_tol(torch.float32), seed=seed)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("mixed", [False, True])
def test_paged_attention_gated(splits, mixed, seed, monkeypatch):
    """With the model's gate: out * sigmoid(gate). A decode-only batch gets it in the decode kernel's (or the
    combine's) epilogue, a batch with chunks from the separate gate kernel; with the gate computed as
    sigmoid_gate computes it, the two agree with the reference to bf16 rounding, and the fused epilogue equals
    the same launch ungated followed by the reference gate (both round the output and sigmoid(gate) first)."""
    from hinfer.ops.activation import sigmoid_gate_ref

    cached, q_lens = ([9, 0, 33, 0, 20], [1, 3, 1, 19, 12]) if mixed else ([9, 0, 33, 30], [1, 3, 1, 4])
    batch, q, kc, vc = _batch(cached, q_lens, 16, torch.bfloat16, seed=seed)
    gate = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed)).bfloat16()
    monkeypatch.setattr(dec, "decode_splits", lambda *a, **k: splits)
    with poisoned_empty():
        got = ta.paged_attention(q, kc, vc, batch, D**-0.5, gate)
        plain = ta.paged_attention(q, kc, vc, batch, D**-0.5)
    want = sigmoid_gate_ref(_attn_ref(q, kc, vc, batch), gate)
    _close(got, want, **_attn_tol(torch.bfloat16), seed=seed)
    assert torch.equal(got, sigmoid_gate_ref(plain, gate)), f"seed {seed}: the gate's rounding"
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "0")
    _close(ta.paged_attention(q, kc, vc, batch, D**-0.5, gate), want, **_attn_tol(torch.bfloat16), seed=seed)


def test_decode_lengths_are_read_from_device(seed):
    # CUDA-graph contract: same static shapes (B, page-table width, q_max), other lengths in the tensors
    batch, q, kc, vc = _batch([40, 3], [2, 2], 16, torch.float32, seed=seed)
    out1 = _run_decode(q, kc, vc, batch, num_splits=2)
    _close(out1, _attn_ref(q, kc, vc, batch), **_attn_tol(torch.float32), seed=seed)
    batch.cached_lens.copy_(torch.tensor([17, 30], dtype=torch.int32))
    batch.cached_lens_cpu = [17, 30]  # only the reference reads the host mirror
    out2 = _run_decode(q, kc, vc, batch, num_splits=2)
    _close(out2, _attn_ref(q, kc, vc, batch), **_attn_tol(torch.float32), seed=seed)


# ------------------------------------------------------------------------------------ KV formats

# (name, K storage, V storage, head_dim): int4 groups are 64 values, so k8v4 and int4 run at head_dim 64
KV_FORMATS = [("fp8", torch.float8_e4m3fn, torch.float8_e4m3fn, D), ("int8", torch.int8, torch.int8, D),
              ("k8v4", torch.int8, torch.uint8, 64), ("int4", torch.uint8, torch.uint8, 64)]  # fmt: skip


def _format_cache(n_pages: int, page: int, dtype: torch.dtype, d: int, g: torch.Generator) -> torch.Tensor:
    """A token-row view in `dtype` (int8 / int4: scales after each page's rows) holding random values written
    through the reference quantizer, rows of different magnitudes so the scales differ."""
    c = allocate_kv(1, n_pages, page, HKV, d, dtype, "cpu")[1][0]
    mag = torch.rand(n_pages * page, HKV, 1, generator=g) * 3 + 0.05
    x = (mag * torch.randn(n_pages * page, HKV, d, generator=g)).to(torch.bfloat16)
    write_kv(c, torch.arange(n_pages * page), x)
    return c


def _clone_pages(cache: torch.Tensor) -> torch.Tensor:
    """A copy of a token-row view with its whole pages (a plain clone would leave the scales behind)."""
    full = cache._base.clone()
    return full[0, :, : cache.shape[1]]


def _dequantized(cache: torch.Tensor) -> torch.Tensor:
    return read_kv(cache, torch.arange(cache.shape[0]), cache.shape[0] * cache.shape[1], torch.float32)


def _steps(cache: torch.Tensor) -> torch.Tensor:
    """The quantization step of every element of a scaled cache, [tokens, n_kv, D] like _dequantized."""
    s = kv_scales(cache).flatten(0, 1)
    d = cache.shape[-1] * (2 if cache.dtype == torch.uint8 else 1)
    return s[..., None].expand(*s.shape, d) if cache.dtype == torch.int8 else s.repeat_interleave(64, dim=-1)


# fp8 writes are not checked here: the interpreter's fp32/bf16 -> e4m3 conversion is wrong for some values
# (1.9922 -> 1.0, where torch and the GPU's cvt.rn give 2.0); tests/gpu covers them
@pytest.mark.parametrize("name,k_dtype,v_dtype,d", KV_FORMATS[1:])
def test_qk_norm_rope_write_kv_formats(name, k_dtype, v_dtype, d, seed):
    """The fused write quantizes as the reference does. V (no rope) gets the same codes and scales. K after
    rope may differ from the reference by one bf16 ulp (test_qk_norm_rope_write), which can move a code by one
    and its row's scale by 2^-8 relative; so K is compared dequantized, within one step plus one bf16 ulp (int4
    keys, rotated: an ulp of one element reaches every element, so one step plus 2^-6 of the row's largest).
    Rotated queries (int4) are the reference's within the bf16 tolerance."""
    g = torch.Generator().manual_seed(seed)
    t, n_pages, page, dtype = 13, 6, 16, torch.bfloat16
    q = torch.randn(t, H, d, generator=g).to(dtype)
    k = (3 * torch.randn(t, HKV, d, generator=g)).to(dtype)
    v = (torch.rand(t, HKV, 1, generator=g) * torch.randn(t, HKV, d, generator=g)).to(dtype)
    v[3, 1] = 0.0  # an all-zero row: scale 0, codes 0 (int4: stored as 8)
    qw = (0.2 * torch.randn(d, generator=g)).to(dtype)
    kw = (0.2 * torch.randn(d, generator=g)).to(dtype)
    positions = torch.randint(0, 300_000, (t,), generator=g)
    inv_freq = rope_inv_freq(R, 1e7)
    slots = torch.randperm(n_pages * page, generator=g)[:t]
    kc, vc = _format_cache(n_pages, page, k_dtype, d, g), _format_cache(n_pages, page, v_dtype, d, g)
    kc_ref, vc_ref = _clone_pages(kc), _clone_pages(vc)
    q_out = ta.qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, kc, vc, slots)
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots)
    _close(q_out, q_ref, *_tol(dtype), seed=seed)
    assert torch.equal(vc, vc_ref) and torch.equal(kv_scales(vc), kv_scales(vc_ref)), seed
    step, deq, deq_ref = _steps(kc_ref), _dequantized(kc), _dequantized(kc_ref)
    ulps = 2**-6 * deq_ref.abs().amax(-1, keepdim=True) if k_dtype == torch.uint8 else 2**-7 * deq_ref.abs()
    assert ((deq - deq_ref).abs() <= 1.01 * step + ulps).all(), seed
    page_of, row_of = slots[3] // page, slots[3] % page
    assert kv_scales(vc)[page_of, row_of, 1].eq(0).all() and not _dequantized(vc)[slots[3], 1].any()


@pytest.mark.parametrize("name,k_dtype,v_dtype,d", KV_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_kernels_kv_formats(name, k_dtype, v_dtype, d, dtype, seed):
    """Decode (2 splits) and prefill kernels reading fp8 / int8 / k8v4 caches directly, against the reference
    reading the same caches (codes times scales, in fp32): fp32 within 1e-4 (the kernel scales int8 scores and
    probabilities, the reference the rows), bf16 within the bf16 attention tolerance."""
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else _attn_tol(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    for cached, q_lens, decode in (([0, 5, 37, 30, 100, 1], [1, 2, 4, 4, 3, 1], True),
                                   ([0, 40, 16, 7], [20, 1, 17, 33], False)):  # fmt: skip
        batch = _batch(cached, q_lens, 16, dtype, seed=seed)[0]
        q = (2 * torch.randn(batch.num_tokens, H, d, generator=g)).to(dtype)
        n_pages = batch.page_table.max().item() + 1
        kc, vc = _format_cache(n_pages, 16, k_dtype, d, g), _format_cache(n_pages, 16, v_dtype, d, g)
        want = ref_attn.paged_attention_ref(q.float(), kc, vc, batch, d**-0.5).to(dtype)
        out = torch.full_like(q, float("nan"))
        args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, d**-0.5)
        with poisoned_empty():
            if decode:
                dec.paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens, batch.max_q_len,
                                 num_splits=2, block_n=16, q8=False)  # fmt: skip  (exact queries)
            else:
                pre.paged_prefill(q, kc, vc, out, *args, 0, batch.num_seqs, batch.max_q_len,
                                  block_m=16, block_n=16, q8=False)  # fmt: skip
        _close(out, want, **tol, seed=seed)


def _format_case(cached: list[int], q_lens: list[int], k_dtype, v_dtype, d: int, seed: int):
    """(batch, bf16 queries, K and V caches in their formats, the reference reading those caches in bf16)."""
    g = torch.Generator().manual_seed(seed)
    batch = _batch(cached, q_lens, 16, torch.bfloat16, seed=seed)[0]
    q = (2 * torch.randn(batch.num_tokens, H, d, generator=g)).to(torch.bfloat16)
    n_pages = batch.page_table.max().item() + 1
    kc, vc = _format_cache(n_pages, 16, k_dtype, d, g), _format_cache(n_pages, 16, v_dtype, d, g)
    want = ref_attn.paged_attention_ref(q.float(), kc, vc, batch, d**-0.5).to(torch.bfloat16)
    return batch, q, kc, vc, want


@pytest.mark.parametrize("name,k_dtype,v_dtype,d", KV_FORMATS)
def test_decode_kernel_f16_tiles(name, k_dtype, v_dtype, d, seed):
    """The decode kernel with the tile's f16 (dots in fp16; int8 / int4 codes turned to fp16 by their bits under
    1024's exponent, fp8 converted to fp16) against the reference reading the same caches, within the bf16
    attention tolerance; the same launch without it agrees as closely."""
    batch, q, kc, vc, want = _format_case([0, 5, 37, 30, 100, 1], [1, 2, 4, 4, 3, 1], k_dtype, v_dtype, d, seed + 2)
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, d**-0.5)
    outs = []
    for f16 in (True, False):
        out = torch.full_like(q, float("nan"))
        with poisoned_empty():
            dec.paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens, batch.max_q_len,
                             num_splits=2, block_n=16, f16=f16, q8=False)  # fmt: skip
        _close(out, want, **_attn_tol(torch.bfloat16), seed=seed)
        outs.append(out)
    _close(outs[0], outs[1], **_attn_tol(torch.bfloat16), seed=seed)


def test_decode_f16_small_int8_values(seed):
    """int8 values scaled after the dot: in the f16 form the probabilities times a small row's scale (|v| ~ 3e-4:
    scales ~ 2e-6) would sink into fp16's subnormals; they carry 2^8 (and the row sums with them), which keeps
    the output as close to the reference as the bf16 form's (relative L2 <= 2e-3 over 600 spread keys)."""
    g = torch.Generator().manual_seed(seed + 4)
    cached, q_lens = [600, 300], [1, 1]
    batch = _batch(cached, q_lens, 16, torch.bfloat16, seed=seed + 4)[0]
    q = (0.3 * torch.randn(batch.num_tokens, H, D, generator=g)).to(torch.bfloat16)
    n_pages = batch.page_table.max().item() + 1
    kc = allocate_kv(1, n_pages, 16, HKV, D, torch.int8, "cpu")[1][0]
    vc = allocate_kv(1, n_pages, 16, HKV, D, torch.int8, "cpu")[1][0]
    rows = torch.arange(n_pages * 16)
    write_kv(kc, rows, torch.randn(n_pages * 16, HKV, D, generator=g).to(torch.bfloat16))
    write_kv(vc, rows, (3e-4 * torch.randn(n_pages * 16, HKV, D, generator=g)).to(torch.bfloat16))
    want = ref_attn.paged_attention_ref(q.float(), kc, vc, batch, D**-0.5)
    out = _run_decode(q, kc, vc, batch, num_splits=2, f16=True)
    rel = ((out.float() - want).norm() / want.norm()).item()
    print(f"f16 decode, int8 values ~3e-4: rel {rel:.2e}")
    assert rel <= 4e-3, f"rel {rel:.2e} (seed {seed})"


@pytest.mark.parametrize("name,k_dtype,v_dtype,d", [f for f in KV_FORMATS if f[0] in ("int8", "k8v4")])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ["decode", "prefill"])
def test_q8_scores(name, k_dtype, v_dtype, d, dtype, kernel, seed):
    """int8 keys in the q8 form (queries rounded to int8 per row, the scores from the key codes as stored, their
    scales after the dot), decode and verification rows or prefill chunks, against the reference over the same
    caches with the queries rounded the same way (fp32 within 1e-4: the same sums; bf16 within its attention
    tolerance), and within 3e-2 relative L2 of the exact queries' reference (at most 1.4e-2 over 16 seeds: 2 x
    randn queries rounded over only 32 / 64 dimensions)."""
    g = torch.Generator().manual_seed(seed + 5)
    cached, q_lens = ([0, 5, 37, 30, 100, 1], [1, 2, 4, 4, 3, 1]) if kernel == "decode" else \
        ([0, 40, 16, 7], [20, 1, 17, 33])  # fmt: skip
    batch = _batch(cached, q_lens, 16, dtype, seed=seed)[0]
    q = (2 * torch.randn(batch.num_tokens, H, d, generator=g)).to(dtype)
    n_pages = batch.page_table.max().item() + 1
    kc, vc = _format_cache(n_pages, 16, k_dtype, d, g), _format_cache(n_pages, 16, v_dtype, d, g)
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, d**-0.5)
    with poisoned_empty():
        if kernel == "decode":
            dec.paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens, batch.max_q_len,
                             num_splits=2, block_n=16, q8=True)  # fmt: skip
        else:
            pre.paged_prefill(q, kc, vc, out, *args, 0, batch.num_seqs, batch.max_q_len, block_m=16, block_n=16,
                              q8=True)  # fmt: skip
    same = ref_attn.paged_attention_ref(ref_attn.queries_int8_ref(q), kc, vc, batch, d**-0.5)
    exact = ref_attn.paged_attention_ref(q.float(), kc, vc, batch, d**-0.5)
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else _attn_tol(dtype)
    _close(out, same.to(dtype), **tol, seed=seed)
    rel = ((out.float() - exact).norm() / exact.norm()).item()
    assert rel <= 3e-2, f"q8 {kernel} against exact queries: rel {rel:.2e} (seed {seed})"


@pytest.mark.parametrize("f16", [True])  # bf16's form on the GPU (tests/gpu): the interpreter has no bf16 constants
def test_int4_words_unpack(f16, seed):
    """The int4 tile read a word at a time (codes ORed under the exponent where fp16 / bf16 count in ones, two
    values an op, joined back into element order) equals code - 8 of every nibble, element 2j from byte j's low
    nibble, 2j + 1 from its high, exactly."""
    from hinfer.ops.triton.attention_common import _int4_words_check_kernel

    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (16, 32), dtype=torch.uint8, generator=g)
    dt = torch.float16 if f16 else torch.bfloat16
    out = torch.full((16, 64), float("nan"), dtype=dt)
    _int4_words_check_kernel[(1,)](b, out, D=64, BLOCK_N=16, F16=f16)
    want = torch.stack(((b & 15).long() - 8, (b >> 4).long() - 8), dim=-1).reshape(16, 64).to(dt)
    assert torch.equal(out, want), (out - want).abs().max()


@pytest.mark.parametrize("name,k_dtype,v_dtype,d", KV_FORMATS)
def test_prefill_kernel_f16_tiles(name, k_dtype, v_dtype, d, seed):
    """The prefill kernel's f16 form (queries, tiles and probabilities in fp16; the 1-byte codes converted as the
    decode kernel's f16 form does), eager and lazy, against the reference reading the same caches, within the bf16
    attention tolerance."""
    batch, q, kc, vc, want = _format_case([0, 40, 16, 7], [20, 1, 17, 33], k_dtype, v_dtype, d, seed + 3)
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, d**-0.5)
    for lazy in (False, True):
        out = torch.full_like(q, float("nan"))
        with poisoned_empty():
            pre.paged_prefill(q, kc, vc, out, *args, 0, batch.num_seqs, batch.max_q_len, block_m=16, block_n=16,
                              f16=True, lazy=lazy, q8=False)  # fmt: skip  (exact queries: test_q8_scores)
        _close(out, want, **_attn_tol(torch.bfloat16), seed=seed)


# ------------------------------------------------------------------------------------ inside the model


def test_model_forward_with_kernels(seed, monkeypatch):
    """A tiny random Qwen3.5 (2 attention + 2 GDN layers): a prefill chunk, then a mixed step with a decode
    lane and a chunk over a prefix, with only norms and attention on the kernels, against the reference."""
    from hinfer.config import ModelConfig
    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.model.state import ModelState, StateShape
    from hinfer.ops import attention as attn_ops
    from hinfer.ops import norm as norm_ops

    cfg = ModelConfig.from_dict(
        {"model_type": "qwen3_5_text", "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 4,
         "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
         "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": D, "partial_rotary_factor": 0.25,
         "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
         "linear_value_head_dim": 16, "intermediate_size": 96}
    )  # fmt: skip
    model = Qwen35ForCausalLM(cfg, torch.float32, "cpu")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            std = 0.1 if "norm" in name or name.endswith(("A_log", "dt_bias")) else 0.2
            p.copy_(std * torch.randn(p.shape, generator=g))
    page = 16
    ids = torch.randint(0, 64, (60,), generator=g).tolist()
    pages = list(range(1, 9))
    random.Random(seed).shuffle(pages)
    steps = [
        [SeqChunk(ids[:20], 0, pages[:2], 1), SeqChunk(ids[20:27], 0, pages[2:3], 2)],
        [SeqChunk(ids[27:28], 7, pages[2:3], 2), SeqChunk(ids[28:60], 20, pages[:2] + pages[3:5], 1)],
    ]

    def run() -> list[torch.Tensor]:
        state = ModelState(cfg, StateShape(9, page, 3, torch.float32, torch.float32), "cpu")
        with torch.no_grad():
            return [model(build_forward_batch(chunks, page, "cpu"), state) for chunks in steps]

    want = run()
    monkeypatch.setattr(norm_ops, "use_triton", lambda x: True)
    monkeypatch.setattr(attn_ops, "use_triton", lambda x: True)
    got = run()
    for a, b in zip(got, want):
        _close(a, b, atol=1e-4, rtol=1e-4, seed=seed)

