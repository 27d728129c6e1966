"""Norm, qk-norm-rope-write and paged attention Triton kernels vs the reference bodies at 27B shapes (GPU).

hidden 5120; attention H=24, Hkv=4, D=256, R=64, page 64; bf16 activations and KV. Run with `-s` to see the
measured errors. Inputs are fresh random values every run (the seed is in each failure message); outputs
the kernels allocate start as NaN (torch.empty is poisoned), so an unwritten element fails.

Thresholds (bf16; rel = ||out - ref|| / ||ref|| over the whole tensor):
- norms: the kernels mirror the reference's roundings; GPU rsqrt may differ in the last fp32 bit and flip a
  rounding, so elementwise <= 2 bf16 ulp (gated: 4, two roundings in a row) and rel <= 2e-3. The residual
  sum of add_rms_norm and the V cache rows are bit-identical.
- q / k after norm + RoPE: x*cos + rot*sin can cancel, so: rel <= 2e-3, <= 2% of elements differ at all,
  none by more than 2**-6 * max|ref| (a wrong angle or partner would give O(1) errors everywhere).
- attention: against the reference evaluated in fp32 (the bf16 reference rounds its scores to bf16, the
  kernels keep fp32 scores and round only P and the output): rel <= 1e-2 (bf16 output rounding alone is
  ~2e-3); the bf16 reference's own error is printed beside it.
"""

from __future__ import annotations

import contextlib
import importlib
import random

import pytest
import torch

from hinfer.batch import ForwardBatch, SeqChunk, build_forward_batch
from hinfer.ops import attention as ref_attn
from hinfer.ops import norm as ref_norm
from hinfer.ops.kv_cache import allocate_kv, kv_scales, read_kv, write_kv
from hinfer.ops.rope import rope_inv_freq

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

HIDDEN, H, HKV, D, R, PAGE = 5120, 24, 4, 256, 64, 64
HV, VD = 48, 128
EPS = 1e-6
_MODS = ["common", "norm", "attention_common", "attention_rope", "attention_decode", "attention_prefill", "attention"]


@pytest.fixture(scope="module")
def tk():
    """The kernel modules compiled for the GPU (tests/conftest.py leaves TRITON_INTERPRET unset on one)."""
    mods = {name: importlib.import_module(f"hinfer.ops.triton.{name}") for name in _MODS}
    norm = mods["norm"]
    assert not norm.interpreted(norm._norm_kernel), "interpreted on a GPU: tests/triton_interpreter.py"
    return mods


@contextlib.contextmanager
def poisoned_empty():
    real = torch.empty

    def empty(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _check(out: torch.Tensor, want: torch.Tensor, rel: float, what: str, ulps: float | None = None) -> None:
    """rel: bound on ||out - want|| / ||want||. ulps: elementwise |out - want| <= ulps bf16 ulps of want."""
    assert not torch.isnan(out).any(), f"{what}: unwritten (NaN) elements"
    r = _rel(out, want)
    d = (out.double() - want.double()).abs()
    print(f"{what}: rel {r:.2e} max|d| {d.max().item():.2e} differing {(d > 0).double().mean().item():.1e}")
    assert r <= rel, f"{what}: rel {r:.3e} > {rel}"
    if ulps is not None:
        bound = ulps * 2.0**-7 * want.double().abs() + 1e-6
        bad = (d > bound).sum().item()
        assert bad == 0, f"{what}: {bad} elements beyond {ulps} ulp (max |diff| {d.max().item():.3e})"


def _check_rope(out: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """x*cos + rot*sin can cancel, so one ulp in a product is many in the sum; and the GPU's sin/cos differ from
    torch's in the last fp32 bits, which flips the bf16 rounding of ~5% of elements (seen on the H200,
    2026-11-30: 5.2-5.7%, rel 1.1-1.3e-3). So: at most 10% differ at all, none by more than 2 ulp of the max."""
    _check(out, want, 2e-3, what)
    d = (out.double() - want.double()).abs()
    frac = (d > 0).double().mean().item()
    assert frac <= 0.10, f"{what}: {frac:.2%} of elements differ"
    assert d.max().item() <= 2.0**-6 * want.double().abs().max().item(), (
        f"{what}: max |diff| {d.max().item()}"
    )


# ----------------------------------------------------------------------------------------------- norms


@pytest.mark.parametrize("t", [1, 7, 8192])
def test_norms(tk, seed, t):
    tn = tk["norm"]
    x = torch.randn(t, 2 * HIDDEN, device="cuda", dtype=torch.bfloat16)[:, HIDDEN:]  # strided view
    res = 4 * torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = 0.1 * torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16)
    with poisoned_empty():
        y = tn.rms_norm(x, w, EPS)
        y2, r2 = tn.add_rms_norm(x, res, w, EPS)
    _check(y, ref_norm.rms_norm_ref(x, w, EPS), 2e-3, f"rms_norm t={t} seed={seed}", ulps=2)
    y_ref, r_ref = ref_norm.add_rms_norm_ref(x, res, w, EPS)
    assert torch.equal(r2, r_ref), f"residual sum differs, seed={seed}"
    _check(y2, y_ref, 2e-3, f"add_rms_norm t={t} seed={seed}", ulps=2)

    o = torch.randn(t, HV, VD, device="cuda", dtype=torch.bfloat16)
    fused = torch.randn(t, 2 * HV * VD + 96, device="cuda", dtype=torch.bfloat16)
    z = fused[:, HV * VD : 2 * HV * VD].view(t, HV, VD)
    gw = 1 + 0.1 * torch.randn(VD, device="cuda", dtype=torch.bfloat16)
    with poisoned_empty():
        g = tn.gated_rms_norm(o, z, gw, EPS)
    want = ref_norm.gated_rms_norm_ref(o, z, gw, EPS)
    _check(g, want, 2e-3, f"gated_rms_norm t={t} seed={seed}", ulps=4)


@pytest.mark.parametrize(("t", "slots"), [(1, 9), (4, 9), (32, 9), (8, 17)])
def test_add_rms_norm_sums_expert_rows(tk, seed, t, slots):
    """A MoE layer's expert rows [T, k + 1, H] left unsummed (`norm_slots`): the residual takes their fp32 sum in
    slot order, rounded once, bit for bit the reference's (sum_slots_ref, then the plain add)."""
    tn = tk["norm"]
    x = torch.randn(t, slots, HIDDEN, device="cuda", dtype=torch.bfloat16)
    res = 4 * torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = 0.1 * torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16)
    with poisoned_empty():
        y, r = tn.add_rms_norm(x, res, w, EPS)
    y_ref, r_ref = ref_norm.add_rms_norm_ref(x, res, w, EPS)
    assert torch.equal(r, r_ref), f"residual sum differs, t={t} seed={seed}"
    _check(y, y_ref, 2e-3, f"add_rms_norm slots t={t} seed={seed}", ulps=2)


# ------------------------------------------------------------------------------- qk norm + rope + write


@pytest.mark.parametrize("t", [1, 64, 8192])
def test_qk_norm_rope_write(tk, seed, t):
    ta = tk["attention"]
    n_pages = t // PAGE + 8
    qkv = torch.randn(t, H * 2 * D + 2 * HKV * D, device="cuda", dtype=torch.bfloat16)
    q = qkv[:, : H * 2 * D].view(t, H, 2 * D).chunk(2, dim=-1)[0]
    k = qkv[:, H * 2 * D : H * 2 * D + HKV * D].view(t, HKV, D)
    v = qkv[:, H * 2 * D + HKV * D :].view(t, HKV, D)
    qw = 0.2 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    kw = 0.2 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    positions = torch.randint(0, 1_100_000, (t,), device="cuda")  # YaRN's 1M window too
    inv_freq = rope_inv_freq(R, 1e7, device="cuda")
    slots = torch.randperm(n_pages * PAGE, device="cuda")[:t]
    k_cache = torch.randn(n_pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    kc_ref, vc_ref = k_cache.clone(), v_cache.clone()
    k_cache.view(-1, HKV, D)[slots] = float("nan")
    v_cache.view(-1, HKV, D)[slots] = float("nan")
    with poisoned_empty():
        q_out = ta.qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, k_cache, v_cache, slots)
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots)
    _check_rope(q_out, q_ref, f"q t={t} seed={seed}")
    _check_rope(k_cache, kc_ref, f"k cache t={t} seed={seed}")
    assert torch.equal(v_cache, vc_ref), f"v cache differs, seed={seed}"


def test_qk_norm_rope_write_multi_axis(tk, seed):
    """A prefill chunk with image tokens: positions [3, T], each frequency on its stream (interleaved mrope)."""
    from hinfer.ops.rope import mrope_freq_axes

    ta, t = tk["attention"], 1100
    n_pages = t // PAGE + 8
    q = torch.randn(t, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(t, HKV, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(t, HKV, D, device="cuda", dtype=torch.bfloat16)
    qw = 0.2 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    kw = 0.2 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    i = torch.arange(t, device="cuda")
    positions = torch.stack([torch.full_like(i, 60), 60 + i // 32, 60 + i % 32])  # a 32 x 34 grid of patches
    inv_freq = rope_inv_freq(R, 1e7, device="cuda")
    axes = mrope_freq_axes(inv_freq.numel(), (R // 6, R // 6, R // 6))
    slots = torch.randperm(n_pages * PAGE, device="cuda")[:t]
    k_cache = torch.randn(n_pages, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    kc_ref, vc_ref = k_cache.clone(), v_cache.clone()
    with poisoned_empty():
        q_out = ta.qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, k_cache, v_cache, slots, 1.0,
                                      axes)  # fmt: skip
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots, 1.0,
                                            axes)  # fmt: skip
    _check_rope(q_out, q_ref, f"q seed={seed}")
    _check_rope(k_cache, kc_ref, f"k cache seed={seed}")
    assert torch.equal(v_cache, vc_ref), f"v cache differs, seed={seed}"


# ------------------------------------------------------------------------------------ paged attention


def _batch(cached: list[int], q_lens: list[int], extra_pages: int = 0, consecutive: bool = False
           ) -> tuple[ForwardBatch, tuple]:  # fmt: skip
    """Pages handed out shuffled from a pool (page 0 scratch; `consecutive`: in order, as a quiet server's pool
    hands them out); random bf16 caches and queries."""
    need = [(c + n + PAGE - 1) // PAGE for c, n in zip(cached, q_lens)]
    pool = list(range(1, sum(need) + 1))
    if not consecutive:
        random.shuffle(pool)
    chunks, i = [], 0
    for c, n, p in zip(cached, q_lens, need):
        chunks.append(SeqChunk(token_ids=[1] * n, cached_len=c, page_ids=pool[i : i + p], gdn_slot=1))
        i += p
    batch = build_forward_batch(chunks, PAGE, "cuda")
    kc = torch.randn(len(pool) + 1, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    q = 4 * torch.randn(batch.num_tokens, H, D, device="cuda", dtype=torch.bfloat16)  # peaky softmax
    return batch, (q, kc, vc)


def _format_batch(cached: list[int], q_lens: list[int], fmt: str) -> tuple[ForwardBatch, tuple]:
    """_batch's pages and queries with the caches in `fmt` (bf16: _batch's own)."""
    batch, (q, kc, vc) = _batch(cached, q_lens)
    if fmt != "bf16":
        pages = batch.page_table.max().item() + 1
        kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    return batch, (q, kc, vc)


def _ref_format(q_ref: torch.Tensor, kc, vc, batch: ForwardBatch, fmt: str) -> torch.Tensor:
    """The reference reading the caches as stored (bf16 ones in fp32)."""
    kc, vc = (kc.float(), vc.float()) if fmt == "bf16" else (kc, vc)
    return ref_attn.paged_attention_ref(q_ref, kc, vc, batch, D**-0.5)


def _ref32(q, kc, vc, batch) -> torch.Tensor:
    return ref_attn.paged_attention_ref(q.float(), kc.float(), vc.float(), batch, D**-0.5)


def _attn_check(tk, batch, q, kc, vc, what: str) -> None:
    with poisoned_empty():
        out = tk["attention"].paged_attention(q, kc, vc, batch, D**-0.5)
    want = _ref32(q, kc, vc, batch)
    if batch.num_tokens * max(batch.kv_lens_cpu) <= 4096 * 32768:  # the bf16 reference's own error
        print(
            f"{what}: bf16 reference rel {_rel(ref_attn.paged_attention_ref(q, kc, vc, batch, D**-0.5), want):.2e}"
        )
    _check(out, want, 1e-2, what)


@pytest.mark.parametrize("b", [1, 8, 64])
@pytest.mark.parametrize("ctx", [1024, 32768])
def test_decode(tk, seed, b, ctx):
    cached = [ctx - 1] + [random.randrange(ctx // 2, ctx) for _ in range(b - 1)]
    batch, (q, kc, vc) = _batch(cached, [1] * b)
    _attn_check(tk, batch, q, kc, vc, f"decode B={b} ctx={ctx} seed={seed}")


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("b", [1, 8])
def test_decode_on_a_wide_page_table(tk, seed, b, q_len):
    """Short sequences on a server's page-table width (262,144 tokens), as under the graphs: the split count
    follows the width, so most splits hold no keys; they write no partial rows (poisoned here) and the combine
    takes none of them."""
    cached = [random.randrange(100, 2000) for _ in range(b)]
    batch, (q, kc, vc) = _batch(cached, [q_len] * b)
    wide = torch.zeros(b, 262144 // PAGE, dtype=batch.page_table.dtype, device="cuda")
    wide[:, : batch.page_table.shape[1]] = batch.page_table
    batch.page_table = wide
    _attn_check(tk, batch, q, kc, vc, f"decode q={q_len} B={b} on 262,144 tokens of pages, seed={seed}")


@pytest.mark.parametrize("ctx", [1024, 32768])
def test_verify(tk, seed, ctx):
    b = 8
    cached = [random.randrange(ctx // 2, ctx - 4) for _ in range(b)]
    batch, (q, kc, vc) = _batch(cached, [4] * b)
    _attn_check(tk, batch, q, kc, vc, f"verify q=4 B={b} ctx={ctx} seed={seed}")


@pytest.mark.parametrize("cached,q_len", [(0, 8192), (30720, 2048), (32768, 200)])  # the last: split-KV
def test_prefill(tk, seed, cached, q_len, monkeypatch):
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "0")  # the Triton kernel (test_prefill_cudnn: the cuDNN path)
    batch, (q, kc, vc) = _batch([cached], [q_len])
    _attn_check(tk, batch, q, kc, vc, f"prefill cached={cached} q={q_len} seed={seed}")


@pytest.mark.parametrize("cached,q_lens", [([0], [8192]), ([30720], [2048]), ([70000], [1500]),
                                           ([100, 5000, 0], [1, 3000, 1100]), ([5000, 0, 300], [3000, 200, 1500])])  # fmt: skip
def test_prefill_cudnn(tk, seed, cached, q_lens, monkeypatch):
    """HINFER_PREFILL_CUDNN=1: prefill chunks of >= MIN_Q tokens on cuDNN by parts (70,000 cached: three blocks
    of the prefix and the chunk), a decode lane in front and chunks shorter than MIN_Q on the Triton kernels.
    The same reference and bound as the Triton prefill."""
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")
    batch, (q, kc, vc) = _batch(cached, q_lens)
    n_dec = sum(1 for n in q_lens if n <= tk["attention"].DECODE_MAX_Q)
    took = tk["attention"]._cudnn_prefills(q, kc, vc, torch.empty_like(q), batch, n_dec, D**-0.5)
    assert took == {i for i in range(n_dec, len(q_lens)) if q_lens[i] >= 1024}
    _attn_check(tk, batch, q, kc, vc, f"prefill cudnn cached={cached} q={q_lens} seed={seed}")


@pytest.mark.parametrize("fmt", ["fp8", "int8", "k8v4", "int4"])
def test_read_kv_heads_bit_for_bit(seed, fmt):
    """The cuDNN path's read-back kernel equals the torch body (codes times scales in fp32, rounded once) at 27B
    heads on shuffled pages, a span starting and ending mid-page."""
    from hinfer.ops.kv_cache import read_kv
    from hinfer.ops.triton.kv_read import read_kv_heads

    batch, _ = _batch([5000], [1000])
    pages = batch.page_table[0]
    n_pages = pages.max().item() + 1
    for dt in FORMATS[fmt]:
        cache = _format_cache(n_pages, dt)
        got = read_kv_heads(cache, pages, 1234, 5999, torch.bfloat16, D)
        want = read_kv(cache, pages.long(), 5999, torch.bfloat16)[1234:].transpose(0, 1)
        assert torch.equal(got, want), f"{fmt} {dt} seed={seed}"


@pytest.mark.parametrize("fmt", ["fp8", "int8", "k8v4", "int4"])
def test_prefill_cudnn_kv_formats(tk, seed, fmt, monkeypatch):
    """The cuDNN path reading 1-byte and 4-bit caches back in bf16, against the reference reading the same cache,
    rel <= 1e-2 as the Triton prefill."""
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "1")
    batch, (q, _, _) = _batch([40000], [2048])
    pages = batch.page_table.max().item() + 1
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    out = torch.full_like(q, float("nan"))
    assert tk["attention"]._cudnn_prefills(q, kc, vc, out, batch, 0, D**-0.5)
    want = ref_attn.paged_attention_ref(q.float(), kc, vc, batch, D**-0.5)
    _check(out, want, 1e-2, f"prefill cudnn {fmt} seed={seed}")


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "int4"])
@pytest.mark.parametrize("lazy,f16,words", [(True, False, False), (False, True, False), (True, True, False),
                                            (False, False, True), (False, True, True)])  # fmt: skip
@pytest.mark.parametrize("cached,q_len", [(0, 8192), (30720, 2048)])
def test_prefill_tile_forms(tk, seed, fmt, lazy, f16, words, cached, q_len):
    """Prefill with the lazy rescale (the running max moves only past 8, base 2), the f16 form (dots in fp16,
    1-byte caches only) and / or tiles read by words against the reference reading the same cache, rel <= 1e-2
    as the eager bf16 kernel (the queries' 4 x randn make peaky scores)."""
    batch, (q, kc, vc) = _format_batch([cached], [q_len], fmt)
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    with poisoned_empty():
        tk["attention_prefill"].paged_prefill(q, kc, vc, out, *args, 0, 1, q_len, lazy=lazy, f16=f16,
                                              words=words)  # fmt: skip
    want = _ref_format(q.float(), kc, vc, batch, fmt)
    _check(out, want, 1e-2, f"prefill lazy={lazy} f16={f16} words={words} {fmt} cached={cached} q={q_len} seed={seed}")


@pytest.mark.parametrize("b,q_len,ctx", [(1, 1, 1024), (8, 1, 32768), (8, 4, 1024), (1, 1, 40)])
def test_decode_gated(tk, seed, b, q_len, ctx, monkeypatch):
    """The model's sigmoid gate applied by the decode kernel (one split) or the combine (several) equals the
    separate gate kernel on the ungated output bit for bit; the launch fusions off give the same bits."""
    from hinfer.ops.triton.activation import sigmoid_gate

    cached = [random.randrange(ctx // 2, ctx - q_len) for _ in range(b)]
    batch, (q, kc, vc) = _batch(cached, [q_len] * b)
    gate = torch.randn_like(q)
    attn = tk["attention"]
    with poisoned_empty():
        got = attn.paged_attention(q, kc, vc, batch, D**-0.5, gate)
        want = sigmoid_gate(attn.paged_attention(q, kc, vc, batch, D**-0.5), gate)
        monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "0")
        apart = attn.paged_attention(q, kc, vc, batch, D**-0.5, gate)
    assert torch.equal(got, want) and torch.equal(apart, want), f"B={b} q={q_len} ctx={ctx} seed={seed}"


def test_mixed_batch(tk, seed):
    # decode + verify lanes first (decode kernel), then chunks with and without a prefix (prefill kernel)
    batch, (q, kc, vc) = _batch([5000, 70, 3000, 0, 1000], [1, 4, 1, 700, 333])
    _attn_check(tk, batch, q, kc, vc, f"mixed seed={seed}")


def test_decode_cuda_graph_replay(tk, seed):
    """Capture decode at one set of lengths, replay with others written into the same device tensors."""
    ta = tk["attention"]
    b, width = 8, 32768 // PAGE
    cached = [random.randrange(100, 30000) for _ in range(b)]
    batch, (q, kc, vc) = _batch(cached, [1] * b)
    pt = torch.zeros(b, width, dtype=torch.int32, device="cuda")  # static width, as the runner allocates
    pt[:, : batch.page_table.shape[1]] = batch.page_table
    batch.page_table = pt
    ta.paged_attention(q, kc, vc, batch, D**-0.5)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ta.paged_attention(q, kc, vc, batch, D**-0.5)
    new = [random.randrange(0, c) for c in cached]
    batch.cached_lens.copy_(torch.tensor(new, dtype=torch.int32))
    batch.cached_lens_cpu = new  # host mirror for the reference only
    q.copy_(4 * torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    _check(out, _ref32(q, kc, vc, batch), 1e-2, f"graph replay seed={seed}")


# ------------------------------------------------------------------------------------ KV formats


FORMATS = {"fp8": (torch.float8_e4m3fn,) * 2, "int8": (torch.int8,) * 2, "k8v4": (torch.int8, torch.uint8),
           "int4": (torch.uint8,) * 2}


def _queries_as_launched(tk, q: torch.Tensor, batch: ForwardBatch, fmt: str) -> torch.Tensor:
    """The fp32 queries each row is scored with through paged_attention's packaged tiles (cuDNN off): int8 keys
    (int8, k8v4) take int8-rounded rows (queries_int8_ref) where the tile has the q8 form, in decode and in
    one-pass prefill launches (as the wrappers decide), exact rows elsewhere."""
    from triton import cdiv

    from hinfer.ops.triton.tiles.attention import decode_config, prefill_config

    q_ref, q_lens = q.float(), batch.q_lens_cpu
    if fmt not in ("int8", "k8v4"):
        return q_ref
    n_dec = sum(1 for n in q_lens if n <= tk["attention"].DECODE_MAX_Q)
    t_dec = sum(q_lens[:n_dec])
    if n_dec and decode_config(max(q_lens[:n_dec]), H // HKV, D, fmt).q8:
        q_ref[:t_dec] = ref_attn.queries_int8_ref(q[:t_dec])
    if n_dec < len(q_lens):
        rest = q_lens[n_dec:]
        cfg = prefill_config(max(rest), H // HKV, D, fmt)
        kv_max = max(c + n for c, n in zip(batch.cached_lens_cpu[n_dec:], rest))
        programs = H * cdiv(max(rest), cfg.block_m) * len(rest)
        if cfg.q8 and tk["attention_prefill"].prefill_splits(programs, kv_max, cfg.block_n, q.device) == 1:
            q_ref[t_dec:] = ref_attn.queries_int8_ref(q[t_dec:])
    return q_ref


def _format_cache(pages: int, kv_dtype: torch.dtype) -> torch.Tensor:
    """Token rows in `kv_dtype` (int8 / int4: scales after each page's rows) holding random rows of varied
    magnitude, written through the reference quantizer."""
    rows = allocate_kv(1, pages, PAGE, HKV, D, kv_dtype, "cuda")[1][0]
    n = pages * PAGE
    mag = torch.rand(n, HKV, 1, device="cuda") * 3 + 0.05
    x = (mag * torch.randn(n, HKV, D, device="cuda")).to(torch.bfloat16)
    write_kv(rows, torch.arange(n, device="cuda"), x)
    return rows


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("cached,q_lens", [([32767] * 8, [1] * 8), ([20000] * 8, [4] * 8), ([30720], [2048]),
                                           ([5000, 70, 0, 1000], [1, 4, 700, 333])])
def test_attention_kv_formats(tk, seed, fmt, cached, q_lens, monkeypatch):
    """Decode, verify, prefill and mixed batches reading fp8 / int8 / k8v4 / int4 caches in place (the Triton
    kernels; test_prefill_cudnn_kv_formats: the cuDNN path), against the reference reading the same caches (codes
    times scales) in fp32 with the queries as the packaged tiles score them: rel <= 1e-2, as for bf16 caches."""
    monkeypatch.setenv("HINFER_PREFILL_CUDNN", "0")
    batch, (q, _, _) = _batch(cached, q_lens)
    pages = batch.page_table.max().item() + 1
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    with poisoned_empty():
        out = tk["attention"].paged_attention(q, kc, vc, batch, D**-0.5)
    want = ref_attn.paged_attention_ref(_queries_as_launched(tk, q, batch, fmt), kc, vc, batch, D**-0.5)
    _check(out, want, 1e-2, f"{fmt} cached={cached[0]} q={q_lens[0]} seed={seed}")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("cached,q_lens", [([32767] * 8, [1] * 8), ([20000] * 8, [4] * 8), ([131071], [1])])
@pytest.mark.parametrize("f16,words,q8", [(True, False, False), (True, True, False), (False, True, False),
                                         (False, False, False), (False, False, True), (True, False, True)])  # fmt: skip
def test_decode_tile_forms(tk, seed, fmt, cached, q_lens, f16, words, q8):
    """The decode kernel's forms on the packaged tiles otherwise: the f16 form (dots in fp16, int8 / int4 codes
    turned to fp16 by their bits, fp8 converted to fp16) and / or tiles read by words (int4 by their bits; in the
    f16 form int8 tiles and fp8 values through inline PTX) and / or, for int8 keys, the q8 form (queries rounded
    to int8, scores on int8 tensor cores), against the reference reading the same caches: rel
    <= 1e-2; 1.5e-2 for bf16 dots over 128K keys (their bf16 probabilities: int8 / int4 1.01-1.03e-2 on the
    H200, words or not; random values average out of the output faster than the roundings do)."""
    batch, (q, _, _) = _batch(cached, q_lens)
    pages = batch.page_table.max().item() + 1
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    with poisoned_empty():
        tk["attention_decode"].paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens,
                                            batch.max_q_len, f16=f16, words=words, q8=q8)  # fmt: skip
    # the q8 form against the reference scoring with the same int8-rounded queries (its own error against exact
    # queries is a quality question: docs/quantization.md)
    q_ref = ref_attn.queries_int8_ref(q) if q8 and FORMATS[fmt][0] == torch.int8 else q.float()
    want = ref_attn.paged_attention_ref(q_ref, kc, vc, batch, D**-0.5)
    bound = 1e-2 if f16 or cached[0] < 100_000 else 1.5e-2
    _check(out, want, bound, f"{fmt} f16={f16} words={words} q8={q8} cached={cached[0]} q={q_lens[0]} seed={seed}")


@pytest.mark.parametrize("fmt", ["bf16", *FORMATS])
@pytest.mark.parametrize("cached,q_lens", [([32767] * 8, [1] * 8), ([20000] * 8, [4] * 8)])
@pytest.mark.parametrize("stages", [3, 5])
def test_decode_eight_warps(tk, seed, fmt, cached, q_lens, stages):
    """The packaged decode tile's forms on 8 warps (the quantized formats' latency-bound loop: twice the warps an
    SM where registers allow), against the reference reading the same cache, rel <= 1e-2."""
    batch, (q, kc, vc) = _format_batch(cached, q_lens, fmt)
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    with poisoned_empty():
        tk["attention_decode"].paged_decode(q, kc, vc, out, *args, batch.num_seqs, batch.num_tokens,
                                            batch.max_q_len, num_warps=8, num_stages=stages)  # fmt: skip
    want = _ref_format(_queries_as_launched(tk, q, batch, fmt), kc, vc, batch, fmt)
    _check(out, want, 1e-2, f"{fmt} w8 s{stages} cached={cached[0]} q={q_lens[0]} seed={seed}")


@pytest.mark.parametrize("fmt", ["int8", "k8v4"])
@pytest.mark.parametrize("cached,q_len", [(0, 8192), (30720, 2048)])
def test_prefill_q8(tk, seed, fmt, cached, q_len):
    """The prefill kernel's q8 form (int8 keys scored on int8 warpgroup MMA against int8-rounded queries) against
    the reference scoring with the same rounded queries: rel <= 1e-2."""
    batch, (q, _, _) = _batch([cached], [q_len])
    pages = batch.page_table.max().item() + 1
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    out = torch.full_like(q, float("nan"))
    args = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens, D**-0.5)
    with poisoned_empty():
        tk["attention_prefill"].paged_prefill(q, kc, vc, out, *args, 0, 1, q_len, q8=True)
    want = ref_attn.paged_attention_ref(ref_attn.queries_int8_ref(q), kc, vc, batch, D**-0.5)
    _check(out, want, 1e-2, f"prefill q8 {fmt} cached={cached} q={q_len} seed={seed}")


@pytest.mark.parametrize("f16", [True, False])
def test_int4_words_unpack(tk, seed, f16):
    """The int4 tile read a word at a time into fp16 or bf16 (the decode and prefill kernels' path on the GPU)
    equals code - 8 of every nibble in element order, exactly."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    b = torch.randint(0, 256, (64, D // 2), dtype=torch.uint8, device="cuda", generator=g)
    dt = torch.float16 if f16 else torch.bfloat16
    out = torch.full((64, D), float("nan"), dtype=dt, device="cuda")
    tk["attention_common"]._int4_words_check_kernel[(1,)](b, out, D=D, BLOCK_N=64, F16=f16)
    want = torch.stack(((b & 15).long() - 8, (b >> 4).long() - 8), dim=-1).reshape(64, D).to(dt)
    assert torch.equal(out, want), f"seed={seed} max diff {(out.float() - want.float()).abs().max().item()}"


@pytest.mark.parametrize("fp8", [True, False])
def test_byte_words_to_f16(tk, seed, fp8):
    """fp8 values and int8 codes read a word at a time and turned to fp16 by inline PTX (the f16 form's tiles)
    equal torch's conversion of every byte in element order, exactly (fp8: every finite e4m3 value is an
    fp16; int8: every code)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    b = torch.randint(0, 256, (64, D), dtype=torch.uint8, device="cuda", generator=g)
    if fp8:
        b[b.view(torch.float8_e4m3fn).float().isnan()] = 0  # e4m3's two NaN codes
    x = b.view(torch.float8_e4m3fn if fp8 else torch.int8)
    out = torch.full((64, D), float("nan"), dtype=torch.float16, device="cuda")
    tk["attention_common"]._byte_words_check_kernel[(1,)](x, out, D=D, BLOCK_N=64, FP8=fp8)
    want = x.to(torch.float16)
    assert torch.equal(out, want), f"seed={seed} max diff {(out.float() - want.float()).abs().max().item()}"


def _dequantized(cache: torch.Tensor) -> torch.Tensor:
    """Every token row of a scaled cache, codes times scales: [tokens, n_kv, D] fp32."""
    return read_kv(cache, torch.arange(cache.shape[0], device="cuda"), cache.shape[0] * PAGE, torch.float32)


def _steps(cache: torch.Tensor) -> torch.Tensor:
    """The quantization step of every element, [tokens, n_kv, D] like _dequantized (int4: a scale per 64)."""
    s = kv_scales(cache).flatten(0, 1)
    return s[..., None].expand(*s.shape, D) if cache.dtype == torch.int8 else s.repeat_interleave(64, dim=-1)


@pytest.mark.parametrize("fmt", ["int8", "k8v4", "int4"])
@pytest.mark.parametrize("t", [1, 64, 8192])
def test_qk_norm_rope_write_quantized(tk, seed, fmt, t):
    """The write quantizes like the reference: V codes and scales identical (IEEE divisions on both sides); K
    after RoPE differs from the reference in ~5% of bf16 elements (test_qk_norm_rope_write), which may move a
    code by one and a row's scale by a bf16 ulp: dequantized K within one step plus 2 ulp of the max. int4
    keys are rotated (H k, whose every element sums all of k's), and so are the returned queries (H q / D):
    K within one step plus 2 ulp of its row's max; q within rel 3e-3 of the reference's (before the rotation
    the two differ by rel ~1.3e-3, which the orthogonal rotation keeps, plus one more bf16 rounding)."""
    qkv = torch.randn(t, H * 2 * D + 2 * HKV * D, device="cuda", dtype=torch.bfloat16)
    q = qkv[:, : H * 2 * D].view(t, H, 2 * D).chunk(2, dim=-1)[0]
    k = qkv[:, H * 2 * D : H * 2 * D + HKV * D].view(t, HKV, D)
    v = qkv[:, H * 2 * D + HKV * D :].view(t, HKV, D)
    qw = 0.1 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    kw = 0.1 * torch.randn(D, device="cuda", dtype=torch.bfloat16)
    positions = torch.randint(0, 1_048_576, (t,), device="cuda")
    inv_freq = rope_inv_freq(R, 1e7, device="cuda")
    pages = t // PAGE + 2
    slots = torch.randperm(pages * PAGE, device="cuda")[:t]
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    kc_ref, vc_ref = (c._base.clone()[0, :, :PAGE] for c in (kc, vc))
    with poisoned_empty():
        q_out = tk["attention"].qk_norm_rope_write(q, k, v, qw, kw, EPS, positions, inv_freq, kc, vc, slots,
                                                   1.1386)  # fmt: skip
    q_ref = ref_attn.qk_norm_rope_write_ref(q, k, v, qw, kw, EPS, positions, inv_freq, kc_ref, vc_ref, slots,
                                            1.1386)  # fmt: skip
    same_v = torch.equal(vc, vc_ref) and torch.equal(kv_scales(vc), kv_scales(vc_ref))
    assert same_v, f"v differs, seed={seed}"
    step, deq, deq_ref = _steps(kc_ref), _dequantized(kc), _dequantized(kc_ref)
    rotated = fmt == "int4"
    ulps = 2.0**-6 * (deq_ref.abs().amax(-1, keepdim=True) if rotated else deq_ref.abs().amax())
    bad = ((deq - deq_ref).abs() > 1.01 * step + ulps).sum().item()
    assert bad == 0, f"{bad} K elements beyond one step, seed={seed}"
    if rotated:
        _check(q_out, q_ref, 3e-3, f"rotated q t={t} seed={seed}")
    else:
        _check_rope(q_out, q_ref, f"q {fmt} t={t} seed={seed}")


@pytest.mark.parametrize("fmt", ["int8", "k8v4", "int4"])
def test_decode_cuda_graph_replay_quantized(tk, seed, fmt):
    """The int8 / k8v4 / int4 decode path under a CUDA graph: scale pointers are static like the cache's."""
    ta = tk["attention"]
    b = 8
    batch, (q, _, _) = _batch([random.randrange(100, 30000) for _ in range(b)], [1] * b)
    pages = batch.page_table.max().item() + 1
    kc, vc = (_format_cache(pages, dt) for dt in FORMATS[fmt])
    ta.paged_attention(q, kc, vc, batch, D**-0.5)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ta.paged_attention(q, kc, vc, batch, D**-0.5)
    new = [random.randrange(0, c) for c in batch.cached_lens_cpu]
    batch.cached_lens.copy_(torch.tensor(new, dtype=torch.int32))
    batch.cached_lens_cpu = new
    graph.replay()
    torch.cuda.synchronize()
    want = ref_attn.paged_attention_ref(_queries_as_launched(tk, q, batch, fmt), kc, vc, batch, D**-0.5)
    _check(out, want, 1e-2, f"{fmt} graph replay seed={seed}")
