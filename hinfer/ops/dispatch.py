"""Choose the Triton body or the torch reference body of an op.

The backend is chosen once, when the model is built (`set_backend`, called by Qwen35ForCausalLM; before that,
the first op call chooses): `HINFER_TRITON=1` forces Triton on CPU tensors too (CI runs the kernels under
`TRITON_INTERPRET=1` at tiny shapes), `HINFER_TRITON=0` forces the reference everywhere, otherwise ("auto")
Triton runs for CUDA tensors.
"""

from __future__ import annotations

import functools
import logging
import os

import torch

log = logging.getLogger("hinfer")

BACKENDS = ("auto", "triton", "reference")
_backend: str | None = None  # None until chosen


@functools.cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def backend_from_env() -> str:
    return {"1": "triton", "0": "reference"}.get(os.environ.get("HINFER_TRITON", ""), "auto")


def set_backend(name: str | None = None) -> str:
    """Choose the backend for every op from now on; None reads HINFER_TRITON. Returns the choice."""
    global _backend
    name = name or backend_from_env()
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r}: expected one of {', '.join(BACKENDS)}")
    if name != _backend:
        log.debug("ops backend: %s%s", name, "" if triton_available() else " (triton is not installed)")
    _backend = name
    return name


def use_triton(x: torch.Tensor) -> bool:
    backend = _backend or set_backend()
    if backend == "reference":
        return False
    if backend == "triton":
        return triton_available()
    return x.is_cuda and triton_available()


@functools.cache
def warn_fallback(op: str, why: str) -> None:
    """A CUDA op that runs its reference body instead of its kernel says so, once per op and reason."""
    log.warning("%s runs its slow reference body on the GPU: %s", op, why)


# the launch-saving fused paths and the most token rows each takes by default (None: any, 0: off).
# Measured on the H200 (bench/RESULTS.md): the experts' slot sum in the down launch helps at one row and costs
# 1-3% at eight (its serial last-program work grows with the rows); the int4 kernel's tail rows, now a block of
# rows at once, gain 2.5% / 3.7% at eight lanes (35B-A3B / 122B-A10B) and cost a 27B MTP round's 4 verified rows
# about 1%, so on up to 8 rows; the router in the norm's launch gains 8% / 3% at 1 / 8 lanes (35B-A3B). The norm in an input projection's launch measured slower
# in both its forms (a prologue pass over K; the rows' rstd after the product) and was removed. A token's route
# in its int4 experts' gate_up launch gains 4% / 3% at one lane (35B-A3B / 122B-A10B), and again in the down
# launch (its weights then ahead of the PDL wait) 0.8% / 0.2%; in the fp8 experts' gate_up launch +2% at one lane
# (35B-A3B, H100); routing two and three tokens there too (a block per pair; int4 with the down's route and slot
# sum) gains 3.9% / 3.2% at two / three lanes (int4) and 1.1% / 1.5% (fp8), and loses 4% / 2% at four lanes and
# 3% on a one-lane MTP round's four tokens (35B-A3B, H100): so up to three. A split decode attention launch
# merging its splits in its last program (no combine launch) measured 2.6% / 3.7% slower at one lane (35B-A3B /
# 27B int4: the merge serialised behind the last split) and was removed. A MoE layer's expert rows summed by the
# next residual add + norm launch (`norm_slots`) instead of the down launch's last program or a sum launch: 35B-A3B
# int4 one lane +2.5%, four / eight lanes +0.5%, the one-lane MTP round -1.4%, 122B-A10B one / eight lanes +1.9% /
# +1.5% (H100); up to 64 rows (decode and verification: a prefill chunk's rows, nine a token, would outlive the
# layer); the fp8 experts' rows likewise
# (`norm_slots_fp8`, instead of the fp8 down launch's last program): 35B-A3B fp8 one / eight lanes +1.3% / +2.5%,
# MTP rounds -1.2% / -4.8% (H100). The route and the alignment of a few tokens' pairs in one launch measured
# slower twice: as one single-program launch (35B-A3B eight lanes 1,896 -> 1,756 tok/s, 122B-A10B with the tail
# rows 792 -> 780, H200), and as the route kernel's last program aligning (35B-A3B int4 four / eight lanes -3.0% /
# -1.3%, fp8 eight lanes -8%, H100); both removed. The int4 experts' down reading its aligned blocks and first
# weights before its PDL wait (`down_early`, where the gate_up does not route: four tokens and up): 35B-A3B four /
# eight lanes +0.6% / +1.4% (rows), +1.9% / +1.1% (stripes), 122B-A10B within 0.3% (H100, 2026-12-07). A token's
# routed experts in one launch (route, gate_up, and down jobs waiting in the grid for their pair's act rows) lost
# to the two launches it replaced: 35B-A3B one lane 523 -> 458 tok/s, a layer 14.3 -> 21.9 us and 16.0 on its best
# tile (H100, 2026-12-07); removed.
FUSIONS: dict[str, int | None] = {"slot_sum": 3, "tail": 8, "gate": None, "norm_linear": 8, "route": 3,
                                  "down_route": 3, "route_fp8": 3, "norm_slots": 64,
                                  "norm_slots_fp8": 64, "down_early": 64}


def launch_fusions(name: str, rows: int) -> bool:
    """Whether an op at `rows` token rows takes a launch-saving fused path: `slot_sum` the slot sum in the int4
    experts' down launch, `tail` the int4 kernel's bf16 tail rows (the GDN in_proj's b / a), `gate` the
    attention output gate in the decode kernels, `norm_linear` a MoE layer's router in its residual-add +
    RMSNorm launch, `route` a token's route in its int4 experts' gate_up launch, `down_route` that token's route
    again in the down launch (with `route`), so that the down's weights go ahead of its PDL wait; `route_fp8` a
    token's route in its fp8 experts' gate_up launch; `norm_slots` a MoE layer's int4 and bf16 expert rows summed
    by the next add + norm launch (one rank), not by the down launch (`slot_sum`) or a sum launch; `norm_slots_fp8`
    the same for the fp8 experts, whose down launch sums the slots otherwise; `down_early` the int4 experts' down
    launch reading its blocks (from moe_align or the route kernel, launches before the gate_up) and issuing its
    first weights before its PDL wait (decode and verification sizes).
    HINFER_FUSE_LAUNCHES: 1 (default) each up to its rows in FUSIONS, 0 none (the separate kernels, to compare or to fall back), or a
    comma list of the names on at any rows. HINFER_FUSION_ROWS (`name=rows,...`) moves FUSIONS' row limits (with
    the default 1; to sweep where a fusion pays). Read at every call, so a test or a bench can flip them."""
    if name not in FUSIONS:
        raise ValueError(f"unknown launch fusion {name!r}: one of {tuple(FUSIONS)}")
    on = os.environ.get("HINFER_FUSE_LAUNCHES", "1").strip()
    if on == "1":
        most = fusion_rows().get(name, FUSIONS[name])
        return most is None or rows <= most
    return on != "0" and name in {v.strip() for v in on.split(",")}


def fusion_rows() -> dict[str, int]:
    """HINFER_FUSION_ROWS as {fusion: most rows}; a name FUSIONS lacks or a value that is not a count is an error."""
    out: dict[str, int] = {}
    for item in filter(None, (v.strip() for v in os.environ.get("HINFER_FUSION_ROWS", "").split(","))):
        name, _, rows = item.partition("=")
        name = name.strip()
        if name not in FUSIONS or not rows.strip().isdigit():
            raise ValueError(f"HINFER_FUSION_ROWS: `name=rows` with a name among {tuple(FUSIONS)}, got {item!r}")
        out[name] = int(rows)
    return out


def int4_decode_a8() -> str:
    """How fragment-ordered int4 weights meet the decode rows (HINFER_INT4_DECODE, read at every call): `tuned`
    (the default): x rounded to int8 per row and 128-group inside the kernel (hinfer/ops/triton/linear_int4_a8.py:
    the int8 MMA, about 60% of the bf16 kernel's instructions a group; Int4Weight.matmul_ref_a8's numerics) at the
    shapes and M buckets where its sweep beat the bf16 kernel (tiles/tuned.py), x as it is elsewhere; `a8` the
    int8 kernel wherever it fits (up to 8 rows); `bf16` never."""
    v = os.environ.get("HINFER_INT4_DECODE", "tuned").strip()
    if v not in ("tuned", "a8", "bf16"):
        raise ValueError(f"HINFER_INT4_DECODE must be `tuned`, `a8` or `bf16`, got {v!r}")
    return v


def fp8_decode_mma() -> str:
    """Where fp8 weights meet 1..64 rows of x on the tensor-core kernel that reads their row-major bytes
    (hinfer/ops/triton/linear_fp8_mma.py; the exact W8A16 product, as the kernels it replaces)
    (HINFER_FP8_MMA, read at every call): `tuned` (the default) at the shapes and M buckets where its sweep beat
    the CUDA-core GEMV / Triton skinny kernel (an `fp8_mma` entry in tiles/tuned.py), `1` wherever it fits, `0`
    never."""
    v = os.environ.get("HINFER_FP8_MMA", "tuned").strip()
    if v not in ("tuned", "1", "0"):
        raise ValueError(f"HINFER_FP8_MMA must be `tuned`, `1` or `0`, got {v!r}")
    return v


def int4_wgmma_rows() -> int | None:
    """Where the int4 warpgroup-MMA kernel takes over from the mma.sync one (fragment-ordered weights, up to 64
    rows of x): None (HINFER_INT4_WGMMA unset or `tuned`, the default) at the shapes and M buckets where its
    sweep won (tiles/tuned.py); 0 never; a row count from that many rows of x at every shape. Read at every
    call."""
    v = os.environ.get("HINFER_INT4_WGMMA", "tuned").strip()
    if v == "tuned":
        return None
    if not v.isdigit():
        raise ValueError(f"HINFER_INT4_WGMMA must be `tuned` or a row count (0: off), got {v!r}")
    return int(v)
