"""One int4 GEMV launch at a 27B shape, for Nsight Compute (stall reasons, issue slots, bandwidth):

    ncu --kernel-name regex:int4_gemv --launch-skip 3 --launch-count 1 --section SpeedOfLight \\
        --section WarpStateStats --section SchedulerStats python bench/profile_int4_gemv.py [N K]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from hinfer.ops.linear import linear
    from hinfer.quant import quantize_int4

    n, k = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (34816, 5120)
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_int4((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16(), zero_point=True)
    x = torch.randn(1, k, generator=g, device="cuda").bfloat16()
    for _ in range(5):
        linear(x, w)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
