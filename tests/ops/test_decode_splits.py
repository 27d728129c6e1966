"""The decode kernel's split count: a function of static shapes that fills whole waves of programs."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from hinfer.kv_format import BF16, FP8, FP16, INT4, INT8, kv_format_name  # noqa: E402
from hinfer.ops.triton.attention_decode import WAVE_FILL, decode_splits  # noqa: E402

CPU = torch.device("cpu")  # 132 SMs assumed off the GPU


@pytest.mark.parametrize("n_kv", [1, 2, 4, 8])
@pytest.mark.parametrize("per_sm", [1, 2, 3, 4, 8])
def test_splits_fill_their_last_wave(n_kv, per_sm):
    wave = per_sm * 132
    for n_seqs in range(1, 300):
        work = n_seqs * n_kv
        for ctx in (64, 1024, 32768, 131072):
            most = min(-(-ctx // 32), 256)
            s = decode_splits(n_seqs, n_kv, ctx, 32, CPU, per_sm)
            assert 1 <= s <= most
            if work >= wave:
                assert s == 1
                continue
            programs = work * s
            fills = programs >= WAVE_FILL * (-(-programs // wave)) * wave
            assert fills or s == most, (n_seqs, n_kv, ctx, per_sm, s)
            # the fewest such splits: one fewer does not fill its wave
            if fills and s > 1:
                fewer = work * (s - 1)
                assert fewer < WAVE_FILL * (-(-fewer // wave)) * wave


def test_eight_lanes_take_one_wave():
    assert decode_splits(8, 4, 131072, 32, CPU, 3) == 12  # 384 programs on 396 places (13 would be 416)
    assert decode_splits(1, 4, 131072, 32, CPU, 3) == 95


def test_kv_format_names():
    assert kv_format_name(BF16, BF16) == "bf16" and kv_format_name(FP8, FP8) == "fp8"
    assert kv_format_name(INT8, INT4) == "k8v4" and kv_format_name(INT4, INT4) == "int4"
    assert kv_format_name(FP16, FP16) == "fp16"  # no format pairs it: the storage's name
