"""The fp8 tensor-core kernel's pieces on the CPU (hinfer/ops/triton/linear_fp8_mma.py; its inline PTX has no
interpreter, tests/gpu/test_fp8_mma.py runs it): the e4m3 -> bf16 bit conversion on every code, the K order its
loads and PRMTs give both operands (the kernel's reshapes and permutes replayed on index arrays), the torch twin
against the W8A16 reference, and where the dispatch sends fp8 rows."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.linear_fp8_mma import (
    A_PERM,
    B_PERM,
    dequantize_words,
    emulate_fp8_mma,
    fp8_mma_fits,
    real_k,
)
from hinfer.quant.fp8 import quantize_fp8

E4M3 = torch.float8_e4m3fn


def test_every_e4m3_code_converts_exactly():
    """Each of the 254 finite codes (subnormals, both zeros) in each byte position of a word becomes its value."""
    codes = torch.arange(256, dtype=torch.uint8)
    finite = codes[(codes & 0x7F) != 0x7F]  # 0x7f / 0xff are NaN in e4m3fn; the quantizer never writes them
    for shift in range(4):
        w = finite.roll(shift).view(-1, 254 // 2)[:, :124].contiguous()  # rows of whole words, every position
        got = dequantize_words(w.view(E4M3))
        want = w.view(E4M3).float()
        assert torch.equal(got, want)
    sub = torch.tensor([1, 2, 7, 0x81, 0x87, 0, 0x80, 8], dtype=torch.uint8).view(1, 8).view(E4M3)
    assert torch.equal(dequantize_words(sub), sub.float())  # 2^-9 .. 7 * 2^-9, signed, and the first normal


def test_real_k_covers_each_group_once_in_the_loads_order():
    """Lane t's k16 step kt reads the 4 bytes 64 (kt // 4) + 16 t + 4 (kt % 4) + (0..3), byte j = 2 k0 + k3."""
    kt, k3, t, k0 = torch.meshgrid(torch.arange(8), torch.arange(2), torch.arange(4), torch.arange(2), indexing="ij")
    r = real_k(kt, t, k3, k0)
    assert sorted(r.flatten().tolist()) == list(range(128))
    word = 64 * (kt // 4) + 16 * t + 4 * (kt % 4)
    assert torch.equal(r - word, 2 * k0 + k3)


@pytest.mark.parametrize("block_n", [16, 64])
def test_a_operand_reshape_puts_each_byte_at_its_row_and_k(block_n):
    """The kernel's words [S, r3, lane, h, w] (row 16 S + 8 r3 + g, bytes 64 h + 16 t + 4 w + j) unpacked to
    elements e = 2 k3 + k0 (byte j = 2 k0 + k3), then reshape / A_PERM / reshape: [row, k'] holds row, real_k(k')."""
    s = block_n // 16
    S, r3, lane, h, w, e = torch.meshgrid(torch.arange(s), torch.arange(2), torch.arange(32), torch.arange(2),
                                          torch.arange(4), torch.arange(4), indexing="ij")  # fmt: skip
    g, t, k3, k0 = lane // 4, lane % 4, e // 2, e % 2
    row = 16 * S + 8 * r3 + g
    kk = 64 * h + 16 * t + 4 * w + 2 * k0 + k3
    label = row * 1000 + kk
    got = label.reshape(s, 2, 8, 4, 2, 4, 2, 2).permute(*A_PERM.value).reshape(block_n, 128)
    rows, kp = torch.meshgrid(torch.arange(block_n), torch.arange(128), indexing="ij")
    want = rows * 1000 + real_k(kp // 16, (kp % 8) // 2, (kp % 16) // 8, kp % 2)
    assert torch.equal(got, want)


@pytest.mark.parametrize("block_m", [8, 32])
def test_b_operand_prmt_and_reshape_follow_the_same_k(block_m):
    """x words [n, t, h, j] (word 32 h + 8 t + j: K offsets 2 (32 h + 8 t + j) + (0, 1)) through the two PRMTs
    (out 2 w = the low halves of words 2 w, 2 w + 1; out 2 w + 1 their high halves), then B_PERM: [k', n]."""
    n, t, h, j, half = torch.meshgrid(torch.arange(block_m), torch.arange(4), torch.arange(2), torch.arange(8),
                                      torch.arange(2), indexing="ij")  # fmt: skip
    vals = n * 1000 + 2 * (32 * h + 8 * t + j) + half  # [n, t, h, j, half]: the value's row and K offset
    w2 = vals.reshape(block_m, 4, 2, 4, 2, 2)  # [n, t, h, w, word 2 w + k0, half k3]
    lo, hi = w2[..., 0], w2[..., 1]  # the halves of words 2 w + k0, k0 along the last dim
    prmt = torch.stack([lo, hi], dim=-2)  # out word 2 w + k3 = (half k3 of word 2 w, half k3 of word 2 w + 1)
    got = prmt.reshape(block_m, 4, 2, 4, 2, 2).permute(*B_PERM.value).reshape(128, block_m)
    kp, cols = torch.meshgrid(torch.arange(128), torch.arange(block_m), indexing="ij")
    want = cols * 1000 + real_k(kp // 16, (kp % 8) // 2, (kp % 16) // 8, kp % 2)
    assert torch.equal(got, want)


@pytest.mark.parametrize("scheme", ["channel", "block"])
@pytest.mark.parametrize("m", [1, 5, 16])
def test_twin_matches_the_w8a16_reference(scheme, m):
    seed = fixed_test_seed()
    g = torch.Generator().manual_seed(seed)
    n, k = 256, 384
    w = quantize_fp8((torch.randn(n, k, generator=g) * k**-0.5).bfloat16(), scheme)
    x = (torch.randn(m, k, generator=g) + 0.1).bfloat16()
    want = x.float() @ w.dequantize(torch.float32).t()
    got = emulate_fp8_mma(x, w.weight, w.scale, w.block is not None)
    # fp32 sums in another order: 1e-5 of the row's magnitude covers it (measured ~1e-7), seed printed on failure
    assert (got - want).abs().max() <= 1e-5 * want.abs().max(), f"seed {seed}"


def test_dispatch_keeps_cpu_rows_off_the_kernel(monkeypatch):
    from hinfer.quant.fp8 import _mma_takes

    w = quantize_fp8(torch.randn(128, 256).bfloat16())
    monkeypatch.setenv("HINFER_FP8_MMA", "1")
    assert not _mma_takes(w, torch.randn(1, 256).bfloat16())
    monkeypatch.setenv("HINFER_FP8_MMA", "sometimes")
    from hinfer.ops.dispatch import fp8_decode_mma

    with pytest.raises(ValueError, match="HINFER_FP8_MMA"):
        fp8_decode_mma()


@pytest.mark.parametrize("config", ["qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-122b-a10b"])
def test_heuristic_tiles_fit_every_dense_shape(config):
    """The fp8 projections of each packaged config take the kernel at 1..64 rows with its heuristic tile."""
    from hinfer.config import load_model_config
    from hinfer.fixtures import config_dir
    from hinfer.ops.triton.tiles.linear import fp8_mma_config

    c = load_model_config(config_dir(config))
    h, hd = c.hidden_size, c.head_dim
    kd, vd = c.linear_num_key_heads * c.linear_key_head_dim, c.linear_num_value_heads * c.linear_value_head_dim
    inter = c.shared_expert_intermediate_size if c.num_experts else c.intermediate_size
    shapes = [(c.num_attention_heads * hd * 2 + 2 * c.num_key_value_heads * hd, h), (2 * kd + 2 * vd, h),
              (h, c.num_attention_heads * hd), (h, vd), (2 * inter, h), (h, inter)]  # fmt: skip
    for n, k in shapes:
        for m in (1, 2, 8, 17, 32, 64):
            cfg = fp8_mma_config(m, n, k, sms=132)
            assert fp8_mma_fits(cfg, m, n, k), (n, k, m, cfg)
