"""tests/ops: run Triton kernels in Triton's CPU interpreter when there is no GPU.

In triton 3.6 `@triton.jit` picks the interpreter when a function is *defined* (it reads TRITON_INTERPRET at
decoration time, triton/runtime/jit.py), never at launch. Two sets of functions are defined that way:
triton.language's own helpers (tl.sum, tl.max, tl.cdiv: decorated at `import triton`) and our kernels
(decorated when hinfer.ops.triton.* is imported). So the variable must be set before both. pytest imports
this conftest before it collects this directory's test modules, which is early enough unless an earlier
directory already imported triton; the test modules here detect that and re-run in a child process (better
still: set it in the root tests/conftest.py, which loads before anything).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
