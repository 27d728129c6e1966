"""Linear kernels at the real Qwen3.6-27B shapes on the GPU: every path vs its reference body, fresh random
inputs each run, NaN-poisoned outputs, CUDA-graph capture of the split-K kernels.

    pytest -m gpu tests/gpu/test_linear_kernels.py -q
"""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H = 5120
SHAPES = {  # name: (N, K)
    "qkv": (14336, H),
    "gdn_in": (16480, H),
    "gdn_in_head": (16384, H),
    "gate_up": (34816, H),
    "o_proj": (H, 6144),
    "down": (H, 17408),
}
LM_HEAD = (248320, H)
DECODE_M = (1, 4, 8, 16, 64)
PREFILL_M = (512, 8192)
REL = 6e-3  # fp32 accumulation everywhere; bf16 output rounding remains


@pytest.fixture(autouse=True)
def _fp32_references():
    """The fp32 reference matmuls must not run in TF32."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _gen() -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(fixed_test_seed())


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(y).all(), "non-finite (or unwritten) output"
    return ((y.float() - ref.float()).norm() / ref.float().norm()).item()


def _weight(n: int, k: int, g: torch.Generator) -> torch.Tensor:
    return (torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16()


def _x(m: int, k: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(m, k, generator=g, device="cuda").bfloat16()


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.float() @ w.float().t()).bfloat16()


@pytest.fixture(scope="module", params=list(SHAPES))
def shape(request):
    return SHAPES[request.param]


def test_fast_int4_unpack_is_available():
    """The inline-PTX unpack compiled and matched the portable one (else int4 runs slower, still correct)."""
    from hinfer.ops.triton.linear_int4 import fast_int4_ok

    assert fast_int4_ok(torch.cuda.current_device())


def test_fast_int4_gemv_is_available():
    """The inline-PTX GEMV (nibble planes, in-place scale loads) compiled and matched the portable one exactly."""
    from hinfer.ops.triton.linear_int4_gemv import fast_gemv_ok

    assert fast_gemv_ok(torch.cuda.current_device())


def test_bf16(shape):
    from hinfer.ops.linear import linear

    n, k = shape
    g = _gen()
    w = _weight(n, k, g)
    for m in DECODE_M[:4] + PREFILL_M:
        x = _x(m, k, g)
        assert _rel(linear(x, w), _ref(x, w)) < REL, m


def test_bf16_lm_head():
    from hinfer.ops.linear import linear

    g = _gen()
    w = _weight(*LM_HEAD, g)
    for m in (1, 8, 16):
        x = _x(m, LM_HEAD[1], g)
        assert _rel(linear(x, w), _ref(x, w)) < REL


@pytest.mark.parametrize("zero_point", [True, False])
def test_int4(shape, zero_point, monkeypatch):
    from hinfer.quant import quantize_int4

    n, k = shape
    g = _gen()
    q = quantize_int4(_weight(n, k, g), zero_point=zero_point)
    wd = q.dequantize(torch.float32)
    for m in DECODE_M + PREFILL_M:
        x = _x(m, k, g)
        ref = (x.float() @ wd.t()).bfloat16()
        for mode in ("dequant", "fp8", "w4a16", "w4a8") if m > 64 else ("decode",):
            monkeypatch.setenv("HINFER_INT4_PREFILL", "dequant" if mode == "decode" else mode)
            refs = {"w4a8": q.matmul_ref_w4a8, "fp8": q.matmul_ref_fp8}
            want = refs[mode](x) if mode in refs else ref
            assert _rel(q.matmul(x), want) < REL, (m, mode)


@pytest.mark.parametrize("scheme", ["channel", "block"])
@pytest.mark.parametrize("decode", ["w8a16", "w8a8"])
def test_fp8(shape, scheme, decode, monkeypatch):
    from hinfer.quant import quantize_fp8

    monkeypatch.setenv("HINFER_FP8_DECODE", decode)
    n, k = shape
    g = _gen()
    q = quantize_fp8(_weight(n, k, g), scheme)
    for m in DECODE_M + PREFILL_M:
        x = _x(m, k, g)
        if m > 64:
            want = q.matmul_ref_w8a8(x)
        else:
            want = q.matmul_ref_w8a8_decode(x) if decode == "w8a8" and m > 1 else q.matmul_ref(x)
        assert _rel(q.matmul(x), want) < REL, m


def test_fp8_block_scaled_mm_if_supported(monkeypatch):
    from hinfer.quant import quantize_fp8
    from hinfer.quant.fp8 import _scaled_mm_block_ok

    if not _scaled_mm_block_ok(torch.cuda.current_device()):
        pytest.skip("torch._scaled_mm has no 1x128 x 128x128 block scaling in this build")
    monkeypatch.setenv("HINFER_FP8_BLOCK_PREFILL", "scaled_mm")
    g = _gen()
    q = quantize_fp8(_weight(*SHAPES["down"], g), "block")
    x = _x(512, SHAPES["down"][1], g)
    assert _rel(q.matmul(x), q.matmul_ref_w8a8(x)) < REL


def test_exact_kernels_match_torch_bit_for_bit():
    """int4 dequantization and fp8 activation quantization are exact twins of their torch bodies. The fp8 codes
    are the round-to-nearest-even of x / scale, as torch computes it on the CPU; the kernel rounds onto the e4m3
    grid itself (e4m3_rne) because the GPU's fp32 -> e4m3 conversion (torch's CUDA one included) has moved
    ~0.2% of the codes that lie on an e4m3 midpoint."""
    from hinfer.ops.triton.linear_gemm import int4_dequantize, quantize_act_fp8
    from hinfer.quant import quantize_act_fp8_ref, quantize_int4

    g = _gen()
    x = _x(300, 17408, g) * 5
    for group in (None, 128):
        q, s = quantize_act_fp8(x, group)
        qr, sr = quantize_act_fp8_ref(x.cpu(), group)
        assert torch.equal(s.cpu(), sr)
        codes, want = q.view(torch.uint8).cpu(), qr.view(torch.uint8)
        print(f"group {group}: {(codes != want).sum().item()} of {codes.numel()} codes differ from the CPU "
              f"reference; torch on the GPU differs in "
              f"{(quantize_act_fp8_ref(x, group)[0].view(torch.uint8).cpu() != want).sum().item()}")
        assert torch.equal(codes, want), "fp8 codes differ from round-to-nearest-even"
    for zp in (True, False):
        w = quantize_int4(_weight(4096, 5120, g), zero_point=zp)
        assert torch.equal(int4_dequantize(w.qweight, w.scales, w.zeros, 5120, torch.bfloat16),
                           w.dequantize(torch.bfloat16))


def test_row_split_in_proj():
    from hinfer.ops.linear import linear
    from hinfer.quant import RowSplitWeight, quantize_int4

    g = _gen()
    n, k = SHAPES["gdn_in"]
    w = _weight(n, k, g)
    rs = RowSplitWeight(quantize_int4(w[:16384]), w[16384:].clone())
    for m in (1, 8, 512):
        x = _x(m, k, g)
        ref = torch.cat([rs.head.matmul_ref(x), _ref(x, w[16384:])], -1)
        assert _rel(linear(x, rs), ref) < REL


def test_cuda_graph_capture_and_replay():
    """Split-K kernels (self-resetting counters) and the int4/fp8/bf16 decode paths replay correctly."""
    from hinfer.ops.linear import linear
    from hinfer.quant import quantize_fp8, quantize_int4

    g = _gen()
    n, k = SHAPES["down"]
    w = _weight(n, k, g)
    weights = [w, quantize_int4(w), quantize_fp8(w, "channel"), quantize_fp8(w, "block")]
    for m in (1, 8):
        x = _x(m, k, g)
        outs = [linear(x, wt) for wt in weights]  # eager warm-up: compile, counters, asm check
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [linear(x, wt) for wt in weights]
        for _ in range(3):
            x.copy_(_x(m, k, g))
            graph.replay()
            torch.cuda.synchronize()
            for wt, y in zip(weights, outs):
                ref = _ref(x, w) if isinstance(wt, torch.Tensor) else wt.matmul_ref(x)
                assert _rel(y, ref) < REL
