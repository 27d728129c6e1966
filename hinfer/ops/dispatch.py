"""Choose the Triton body or the torch reference body of an op.

Triton runs for CUDA tensors. `HINFER_TRITON=1` forces Triton on CPU tensors too (CI runs the kernels under
`TRITON_INTERPRET=1` at tiny shapes); `HINFER_TRITON=0` forces the reference everywhere.
"""

from __future__ import annotations

import functools
import os

import torch


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def use_triton(x: torch.Tensor) -> bool:
    flag = os.environ.get("HINFER_TRITON")
    if flag == "0":
        return False
    if flag == "1":
        return triton_available()
    return x.is_cuda and triton_available()
