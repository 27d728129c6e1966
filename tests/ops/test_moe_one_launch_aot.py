"""The one-launch int4 experts kernel (hinfer/ops/triton/moe_int4_one.py) goes through Triton's whole sm_90 pipeline
at the 35B-A3B shape, and its down jobs really wait for their pair's act rows: the poll of the arrival counter
survives compilation as volatile loads (one before the loop, one in it), followed by the acquire fence (an atomic
whose result goes unused is dropped by the compiler, so the fence is explicit), and a poll that runs too long
traps (a kernel error, not a hung GPU). The down weights go to shared
memory in 16-byte copies (with an expert's offset the compiler cannot prove a multiple of 16 words it copies 4
bytes at a time). In a child process (the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


def test_one_launch_kernel_compiles_and_waits(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [v for v in res.stdout.splitlines() if v.startswith("compiled")]
    assert len(lines) == 2, res.stdout  # the experts' words as rows and as stripes
    for line in lines:
        fields = dict(item.split("=") for item in line.split()[2:])
        assert int(fields["volatile"]) >= 2, line
        assert int(fields["fence"]) == 1 and int(fields["trap"]) == 1, line
        assert int(fields["regs"]) <= 128, line
        assert int(fields["copies16"]) > 0 and int(fields["copies4"]) == 0, line


def _compile() -> None:
    import re

    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources
    from hinfer.ops.triton.moe_int4_one import one_launch_variant

    for words in ("rows", "stripes"):
        _, fn, sig, cex, warps = one_launch_variant(2048, 512, 8, zero=True, pdl=True, words=words)
        k = compile_gluon_sm90(fn, sig, cex, warps)
        ptx = k.asm["ptx"]
        res = resources(k)
        copies = {n: len(re.findall(rf"cp\.async\.\w+\.shared\.global \[[^]]*\], \[[^]]*\], {n}\b", ptx))
                  for n in ("0x4", "0x10")}  # fmt: skip
        print(f"compiled {words} regs={res['regs']} stack={res['stack']} volatile={ptx.count('ld.volatile.global')} "
              f"fence={ptx.count('fence.acq_rel.gpu')} trap={ptx.count('trap;')} copies4={copies['0x4']} "
              f"copies16={copies['0x10']}")  # fmt: skip
