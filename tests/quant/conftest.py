"""tests/quant: Triton kernels run in Triton's CPU interpreter when there is no GPU (on a GPU they run compiled
at the same tiny shapes).

As in tests/ops/conftest.py: TRITON_INTERPRET must be set before any hinfer.ops.triton module is imported
(triton 3.6 picks the interpreter when a kernel is defined). hinfer imports those modules lazily, at the first
Triton dispatch, so setting it while collecting this directory is early enough. Interpreter fixes, all idempotent
(the first shared with tests/ops): numpy >= 2.4 scalar indexing; bf16 `tl.dot` (triton 3.6's interpreter
multiplies the raw uint16 storage of bf16 operands; we convert them to fp32 first); fp32 -> bf16/fp8 rounding
(the interpreter truncates; the GPU and torch round to nearest even).
"""

from __future__ import annotations

import os

import torch


def _fix_interpreter_index_for_numpy_2_4() -> None:
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_hinfer_fixed", False):
        return

    def patched(tensor, scope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._hinfer_fixed = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def _fix_interpreter_bf16_dot() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "_hinfer_fixed", False):
        return

    def as_f32(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        data = interpreter._convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, as_f32(a), as_f32(b), d, input_precision, max_num_imprecise_acc)

    create_dot._hinfer_fixed = True  # type: ignore[attr-defined]
    builder.create_dot = create_dot


def _fix_interpreter_float_rounding() -> None:
    """fp32 -> bf16 / fp8e4nv in triton 3.6's interpreter truncates (and fp8 mis-rounds across binades, e.g.
    127.5 -> 64); the GPU rounds to nearest even. Use torch's conversion, which does too."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._convert_float
    if getattr(original, "_hinfer_fixed", False):
        return
    targets = {tl.bfloat16: torch.bfloat16, tl.float8e4nv: torch.float8_e4m3fn}

    def convert(data, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype in targets:
            t = torch.from_numpy(np.ascontiguousarray(data).view(np.float32)).to(targets[output_dtype])
            bits = np.uint16 if output_dtype == tl.bfloat16 else np.uint8
            return t.view(torch.int16 if bits is np.uint16 else torch.uint8).numpy().view(bits)
        return original(data, input_dtype, output_dtype, rounding_mode)

    convert._hinfer_fixed = True  # type: ignore[attr-defined]
    interpreter._convert_float = convert


if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    for fix in (_fix_interpreter_index_for_numpy_2_4, _fix_interpreter_bf16_dot, _fix_interpreter_float_rounding):
        try:
            fix()
        except (ImportError, AttributeError):  # triton absent or its interpreter changed: the tests will say
            pass
