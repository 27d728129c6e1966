"""fp8 weights at decode sizes (M = 1..16) on the 27B shapes: our W8A16 stream kernel against W8A8 through
cuBLAS (`torch._scaled_mm` rowwise, activations quantized per token by our kernel, included in the time), with
bf16 as the reference line. CUDA-graph replay over rotating weight copies, as bench/linear_kernels.py times.

    python bench/fp8_small_m.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from linear_kernels import SHAPES, _copies, _gen, copy_bandwidth, graph_time  # noqa: E402


def main() -> None:
    from hinfer.ops.linear import linear
    from hinfer.ops.triton.linear_gemm import quantize_act_fp8
    from hinfer.quant import quantize_fp8

    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    g = _gen(3)
    for name, n, k in SHAPES:
        if name == "lm_head":
            continue
        w = (torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16()
        q = quantize_fp8(w, "channel")
        fp8s, bf16s = _copies(q, q.nbytes()), _copies(w, w.numel() * 2)
        for m in (1, 8, 16):
            x = torch.randn(m, k, generator=g, device="cuda").bfloat16()

            def w8a8(qw, x=x):
                xq, xs = quantize_act_fp8(x, None)
                return torch._scaled_mm(xq, qw.weight.t(), scale_a=xs, scale_b=qw.scale.view(1, -1),
                                        out_dtype=torch.bfloat16)

            cells = []
            for label, op, ws, nbytes in (("bf16", lambda ww, x=x: linear(x, ww), bf16s, w.numel() * 2),
                                          ("fp8 w8a16", lambda ww, x=x: linear(x, ww), fp8s, q.nbytes()),
                                          ("fp8 w8a8 cublas", w8a8, fp8s, q.nbytes())):
                try:
                    t = graph_time(op, ws)
                    cells.append(f"{label} {t * 1e6:7.1f} us ({nbytes / t / bw:5.1%})")
                except Exception as e:  # noqa: BLE001
                    cells.append(f"{label} failed: {type(e).__name__}: {str(e)[:60]}")
            print(f"{name:8s} M={m:<3d} " + " | ".join(cells), flush=True)
        del fp8s, bf16s
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
