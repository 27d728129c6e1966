"""How the tests run Triton kernels: compiled where torch sees a GPU, in Triton's CPU interpreter otherwise.

tests/conftest.py calls `configure()` before it imports anything else, so the whole process runs one way.
It has to be that early: triton 3.6 picks the interpreter when a @triton.jit function is *defined*
(triton/runtime/jit.py reads TRITON_INTERPRET in `jit`), never at launch. Two sets of functions are defined
that way: triton.language's own helpers (tl.sum, tl.max, tl.cdiv: at `import triton`) and our kernels (when a
hinfer.ops.triton module is imported). A process set up for one way cannot switch, so no test sets
TRITON_INTERPRET or re-imports kernel modules; what needs the other way (the sm_90 compile checks) runs in a
child process (the `compiled_child` fixture).

Under the interpreter, three of its faults are patched (idempotent, test-only): numpy >= 2.4 scalar indexing;
bf16 `tl.dot` (it multiplies the raw uint16 storage of bf16 operands; they are converted to fp32 first);
fp32 -> bf16 / fp8 rounding (it truncates; the GPU and torch round to nearest even).
"""

from __future__ import annotations

import os

import torch


def configure() -> bool:
    """Set this process up; True when kernels run in the interpreter (no GPU)."""
    gpu = torch.cuda.is_available()
    if gpu:
        os.environ.pop("TRITON_INTERPRET", None)  # the GPU tests must get compiled kernels
    else:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton
    except ImportError:  # no triton: the kernel tests skip or fail on their own
        return not gpu
    if isinstance(triton.language.standard.sum, triton.runtime.jit.JITFunction) != gpu:
        raise RuntimeError("triton was imported before tests/conftest.py set TRITON_INTERPRET (by a plugin?)")
    if gpu:
        return False
    for fix in (_fix_index_for_numpy_2_4, _fix_bf16_dot, _fix_float_rounding):
        try:
            fix()
        except AttributeError:  # the interpreter changed: the kernel tests will say what broke
            pass
    return True


def _fix_index_for_numpy_2_4() -> None:
    """int(array) of a 1-element array, which numpy >= 2.4 rejects (loops with runtime bounds fail)."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_hinfer_fixed", False):
        return

    def patched(tensor, scope) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._hinfer_fixed = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def _fix_bf16_dot() -> None:
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


def _fix_float_rounding() -> None:
    """fp32 -> bf16 / fp8e4nv truncates (and fp8 mis-rounds across binades, e.g. 127.5 -> 64); use torch's
    conversion, which rounds to nearest even like the GPU."""
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
