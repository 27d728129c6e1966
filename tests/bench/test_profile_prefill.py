"""bench/profile_prefill.py sorts the kernels of a prefill by kind from their names alone (the profiler gives no
module): every kernel a prefill launches lands in its kind, so that a rename cannot quietly move time to "other"."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "profile_prefill.py"


@pytest.mark.parametrize("name,kind", [
    ("_prefill_kernel", "attention"), ("_merge_kernel", "attention"), ("_read_kv_kernel", "attention"),
    ("_qk_norm_rope_write_kernel", "attention"), ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "attention"),
    ("_prep_kernel", "gdn"), ("_state_kernel", "gdn"), ("_out_kernel", "gdn"), ("_conv_kernel", "gdn"),
    ("_gating_kernel", "gdn"), ("_act_quant_kernel", "quantize / dequantize"),
    ("_int4_mma_dequant_coalesced_kernel", "quantize / dequantize"), ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA", "gemm"),
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128", "gemm"), ("_gemm_kernel", "gemm"),
    ("_norm_kernel", "norm / activation"), ("_silu_mul_kernel", "norm / activation"),
    ("void at::native::elementwise_kernel<128, 4>", "copies / elementwise"), ("something_new", "other"),
])  # fmt: skip
def test_kernel_kinds(name, kind):
    assert runpy.run_path(str(SCRIPT))["kind_of"](name) == kind


def test_our_prefill_kernels_have_a_kind():
    """The Triton kernels of the prefill path, by the names they are defined with."""
    kind_of = runpy.run_path(str(SCRIPT))["kind_of"]
    from hinfer.ops.triton import (
        attention_prefill,
        gdn_chunk,
        gdn_conv,
        kv_read,
        linear_gemm,
        norm,
        parts_merge,
    )

    for mod in (attention_prefill, gdn_chunk, gdn_conv, kv_read, linear_gemm, norm, parts_merge):
        kernels = [k for k in vars(mod) if k.endswith("_kernel") and hasattr(getattr(mod, k), "fn")]
        assert kernels, mod.__name__
        for k in kernels:
            assert kind_of(k) != "other", (mod.__name__, k)
