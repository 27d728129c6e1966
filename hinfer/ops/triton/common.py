"""What every Triton kernel module shares: the interpreter check, the round-to-nearest casts that Triton's CPU
interpreter gets wrong, the quantization group the kernels take and the SM count their grids are sized by.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# int4 group and fp8 scale block along K of every quantized kernel: a K step stays inside one group.
# hinfer/quant/int4.py (GROUP) and tiles/linear.py (QGROUP) spell the same number for the linear kernels.
GROUP = 128


DECODE_ROWS = 64  # launches over more token rows (prefill) keep PDL off: long kernels, nothing to overlap


def pdl_kwargs(x: torch.Tensor, rows: int = 0) -> dict:
    """Programmatic dependent launch (Hopper and later; on by default since it measured 3-9% faster decode,
    bench/RESULTS.md; HINFER_PDL=0 turns it off): the kernel's PDL constexpr and launch option, for a kernel that
    calls pdl_start before it touches anything a previous kernel may write or read (activations, outputs,
    scratch). `rows`: the launch's token rows (off past DECODE_ROWS). The switch is read at every launch, so a
    test can flip it."""
    on = (x.is_cuda and rows <= DECODE_ROWS and os.environ.get("HINFER_PDL", "1") != "0"
          and _sm_major(x.device.index) >= 9)  # fmt: skip
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}


@functools.cache
def _sm_major(device_index: int | None) -> int:
    return torch.cuda.get_device_capability(device_index)[0]


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """Wait for the previous kernel's results, then let the next kernel launch, so its launch and prologue (e.g.
    its weight loads) overlap this kernel. The trigger fires once every program of this kernel has started, so
    the successor never starves it. A no-op without PDL."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


def num_sms(device_index: int | None = None) -> int:
    """Streaming multiprocessors of a GPU (None: the current one); 4 without CUDA, so the interpreter keeps
    split-K exercised with small grids."""
    if not torch.cuda.is_available():
        return 4
    return _sms(torch.cuda.current_device() if device_index is None else device_index)


@functools.cache
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


_counter_sets: dict[tuple[str, torch.device], torch.Tensor] = {}


def zeroed_counters(kind: str, n: int, device: torch.device) -> torch.Tensor:
    """`n` int32 arrival counters for the kernels of one `kind` (a set per kind and device), zeroed, and left
    zeroed by those kernels (the last program of a group resets its own). Allocated on first use, which must be
    eager, not inside a CUDA-graph capture: the engine runs its warm-up steps before capturing."""
    buf = _counter_sets.get((kind, device))
    if buf is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"hinfer {kind}: run one eager decode step before CUDA-graph capture (its arrival "
                               "counters are allocated on first use)")  # fmt: skip
        buf = _counter_sets[(kind, device)] = torch.zeros(n, dtype=torch.int32, device=device)
    return buf


def interpreted(kernel: object) -> bool:
    """True when `kernel` runs in Triton's CPU interpreter (TRITON_INTERPRET=1 when it was defined)."""
    return not isinstance(kernel, triton.runtime.jit.JITFunction)


@triton.jit
def cast(x, dt: tl.constexpr, EMU: tl.constexpr):
    """fp32 x -> dt, round to nearest even. The interpreter truncates fp32 -> bf16, so under EMU the bits are
    rounded first (GPU builds pass EMU=False and get the hardware conversion)."""
    if EMU:
        if dt == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            x = u.to(tl.float32, bitcast=True)
    return x.to(dt)


@triton.jit
def round_to(x, dt: tl.constexpr, EMU: tl.constexpr):
    """fp32 x rounded to dt (round to nearest even) and back to fp32."""
    return cast(x, dt, EMU).to(tl.float32)
