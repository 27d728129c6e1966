"""The Gluon fp8 tensor-core kernel on row-major e4m3 weights (hinfer/ops/triton/linear_fp8_mma.py) at the
Qwen3.6-27B shapes against its torch twin and the W8A16 reference; every e4m3 code (subnormals included), split
K, the four-deep loop, block scales, column-slice outputs, NaN-poisoned outputs, and Fp8Weight.matmul's dispatch.

    pytest -m gpu tests/gpu/test_fp8_mma.py -q
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_int4_mma import _fp32_references, _gen, _poisoned  # noqa: F401

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H = 5120
SHAPES = {"qkv": (14336, H), "gdn_in": (16384, H), "gate_up": (34816, H), "o_proj": (H, 6144), "down": (H, 17408)}
MS = (1, 2, 4, 8, 16, 24, 32, 64)


def _check(y: torch.Tensor, want: torch.Tensor) -> None:
    """y within its bf16 rounding of the fp32 sum (half an ulp: 2^-9 relative) plus fp32 reordering (1e-5 of the
    largest output), and bit-equal to the rounded sum almost everywhere."""
    assert torch.isfinite(y).all(), "non-finite (or unwritten) output"
    err = (y.float() - want).abs()
    bound = want.abs() * 2.0**-8 + 1e-5 * want.abs().max()
    assert (err <= bound).all(), f"max error {err.max().item():.3g} over bound at {(err - bound).argmax().item()}"
    assert (y == want.bfloat16()).float().mean() > 0.99


@pytest.mark.parametrize("scheme", ["channel", "block"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_fp8_mma_27b_shapes(name, scheme):
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul
    from hinfer.quant.fp8 import quantize_fp8

    n, k = SHAPES[name]
    g = _gen()
    w = quantize_fp8((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16(), scheme)
    wf = w.dequantize(torch.float32)
    for m in MS:
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        out = _poisoned(m, n)
        fp8_mma_matmul(x, w.weight, w.scale, w.block is not None, out=out)
        _check(out, x.float() @ wf.t())


def test_every_code_including_subnormals():
    """Weights drawn uniformly over the 254 finite byte codes (a quarter of them subnormal or zero at e4m3's
    scale): the bf16 operands the kernel builds must keep them (the twin's conversion is exact on every code)."""
    from hinfer.ops.triton.linear_fp8_mma import emulate_fp8_mma, fp8_mma_matmul

    g = _gen()
    n, k = 1024, 2048
    codes = torch.randint(0, 256, (n, k), generator=g, device="cuda", dtype=torch.int32).to(torch.uint8)
    codes = torch.where((codes & 0x7F) == 0x7F, codes ^ 0x01, codes)  # NaN codes -> 0x7e / 0xfe (448)
    w8 = codes.view(torch.float8_e4m3fn)
    scale = torch.rand(n, generator=g, device="cuda") * 1e-3 + 1e-4
    for m in (1, 8, 33):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        out = fp8_mma_matmul(x, w8, scale, False)
        _check(out, x.float() @ (w8.float() * scale[:, None]).t())
        twin = emulate_fp8_mma(x.cpu(), w8.cpu(), scale.cpu(), False).cuda()
        _check(out, twin)


@pytest.mark.parametrize("block_n,block_m,split,warps,depth", [
    (128, 8, 1, 8, 2), (128, 8, 4, 8, 4), (64, 16, 2, 4, 2), (256, 32, 2, 8, 2), (128, 64, 1, 8, 4),
    (16, 8, 3, 1, 2),
])  # fmt: skip
@pytest.mark.parametrize("blocked", [False, True], ids=["channel", "block"])
def test_tiles(block_n, block_m, split, warps, depth, blocked):
    """Each tile form, with a split that leaves an uneven last slice (7 groups over 3 or 4), rows of x that are
    not a multiple of BLOCK_M, and a column slice of a wider output."""
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.quant.fp8 import quantize_fp8

    g = _gen()
    n, k = 512, 7 * 128
    w = quantize_fp8((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16(),
                     "block" if blocked else "channel")  # fmt: skip
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, depth)
    for m in sorted({1, block_m - 1, block_m + 3, min(64, 2 * block_m)}):
        if not 0 < m <= 64:
            continue
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        wide = _poisoned(m, n + 64)
        fp8_mma_matmul(x, w.weight, w.scale, blocked, out=wide[:, 32 : 32 + n], cfg=cfg)
        _check(wide[:, 32 : 32 + n], x.float() @ w.dequantize(torch.float32).t())
        assert wide[:, :32].isnan().all() and wide[:, 32 + n :].isnan().all()


def test_fp8_weight_matmul_takes_the_kernel(monkeypatch):
    """HINFER_FP8_MMA=1 sends Fp8Weight.matmul's decode rows through the kernel (same W8A16 numbers), 0 keeps the
    skinny kernels; both close to matmul_ref."""
    from hinfer.ops.triton import linear_fp8_mma
    from hinfer.quant.fp8 import quantize_fp8

    g = _gen()
    w = quantize_fp8((torch.randn(1024, 2048, generator=g, device="cuda") * 2048**-0.5).bfloat16())
    calls = []
    real = linear_fp8_mma.fp8_mma_matmul
    monkeypatch.setattr(linear_fp8_mma, "fp8_mma_matmul", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    for mode, want_calls in (("1", 1), ("0", 0)):
        monkeypatch.setenv("HINFER_FP8_MMA", mode)
        calls.clear()
        x = torch.randn(4, 2048, generator=g, device="cuda").bfloat16()
        y = w.matmul(x)
        assert len(calls) == want_calls
        _check(y, x.float() @ w.dequantize(torch.float32).t())


@pytest.mark.parametrize("m", [1, 4, 8, 17])
def test_tail_rows_in_the_same_launch(m):
    """96 bf16 rows beside the fp8 tiles (the GDN in_proj's b / a): the tail's programs write out[:, N:], one row
    at a time or (2-8 rows) the block's rows together."""
    from hinfer.ops.triton.linear_fp8_mma import fp8_mma_matmul
    from hinfer.quant.fp8 import quantize_fp8

    g = _gen()
    n, t, k = 1024, 96, 2048
    head = quantize_fp8((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16())
    tail = (torch.randn(t, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    out = _poisoned(m, n + t)
    fp8_mma_matmul(x, head.weight, head.scale, False, out=out, tail=tail)
    _check(out[:, :n], x.float() @ head.dequantize(torch.float32).t())
    _check(out[:, n:], x.float() @ tail.float().t())


@pytest.mark.parametrize("m", [1, 8, 17])
def test_row_split_weight_takes_one_launch(m, monkeypatch):
    """RowSplitWeight with an fp8 head: one launch up to the tail fusion's 8 rows (HINFER_FUSE_LAUNCHES), the head
    and the tail apart above; the same numbers either way."""
    from hinfer.ops.triton import linear_fp8_mma
    from hinfer.quant.apply import RowSplitWeight
    from hinfer.quant.fp8 import quantize_fp8

    g = _gen()
    n, t, k = 1024, 96, 2048
    head = quantize_fp8((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16())
    tail = (torch.randn(t, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    calls = []
    real = linear_fp8_mma.fp8_mma_matmul
    monkeypatch.setattr(linear_fp8_mma, "fp8_mma_matmul",
                        lambda *a, **kw: calls.append(kw.get("tail") is not None) or real(*a, **kw))  # fmt: skip
    monkeypatch.setenv("HINFER_FP8_MMA", "1")
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    y = RowSplitWeight(head, tail).matmul(x)
    assert calls == [m <= 8]
    _check(y[:, :n], x.float() @ head.dequantize(torch.float32).t())
    _check(y[:, n:], x.float() @ tail.float().t())
