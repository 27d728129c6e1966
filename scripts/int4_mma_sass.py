"""Compile the Gluon int4 mma kernel for sm_90 (no GPU needed) and count SASS instructions per weight in its
main loop.

    PYTHONPATH=$PWD python scripts/int4_mma_sass.py                 # default tiles
    PYTHONPATH=$PWD python scripts/int4_mma_sass.py --block-n 256 --zero --dump /tmp/mma.sass
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import triton

from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources
from hinfer.ops.triton.linear_int4_mma import int4_mma_variant


def sass_of(kernel) -> str:
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout


def loops(sass: str) -> list[tuple[int, collections.Counter]]:
    """(instruction count, opcode counts) of every backward-branch loop of the SASS listing."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    where = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, text) in enumerate(ins):
        m = re.search(r"BRA .*?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in where:
            c = collections.Counter()
            for _, t in ins[where[int(m.group(1), 16)] : i + 1]:
                op = t.split()[1] if t.startswith("@") else t.split()[0]
                c[op.split(".")[0]] += 1
            out.append((sum(c.values()), c))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--block-m", type=int, default=8)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--split-k", type=int, default=1)
    ap.add_argument("--zero", action="store_true", help="asymmetric (zero points)")
    ap.add_argument("--fma-offset", action="store_true", help="subtract 128 + z per weight (bf16x2 fma) instead")
    ap.add_argument("--dump", help="write the SASS here")
    a = ap.parse_args(argv)
    _, fn, sig, cex, warps = int4_mma_variant(a.block_n, a.block_m, a.split_k, a.warps, a.zero, not a.fma_offset)
    k = compile_gluon_sm90(fn, sig, cex, warps)
    sass = sass_of(k)
    if a.dump:
        open(a.dump, "w").write(sass)
    weights = a.block_n * 256 // (32 * warps)  # per thread per loop iteration (two 128-groups)
    print(resources(k), f"weights per thread per iteration {weights}")
    for n, c in loops(sass):
        print(f"loop: {n} instructions, {n / weights:.2f} per weight: {sorted(c.items(), key=lambda x: -x[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
