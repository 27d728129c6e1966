"""Regenerate the tables of docs/memory-plan.md from `hinfer plan` (run after changing the plan or recipes).

    python scripts/gen_plan_docs.py > /tmp/tables.md

Prints the summary table, then the full `hinfer plan` outputs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hinfer, whatever is installed

from hinfer.cli.commands.plan import load_config_arg
from hinfer.config import EngineConfig
from hinfer.engine.memory_plan import plan_memory

MODELS = [("27B", "qwen3.6-27b"), ("35B-A3B", "qwen3.6-35b-a3b"), ("122B-A10B", "qwen3.5-122b-a10b")]
MEMS = [("80GB", 80 * 10**9), ("141GB", 141 * 10**9)]
FORMATS = [("bf16", "bf16"), ("fp8", "fp8-default"), ("int4", "int4-default")]


def summary() -> None:
    print("| model | memory | weights | max-context | total needed | verdict | largest --max-context at 8 lanes "
          "| largest --max-concurrency at this context |")
    print("|---|---|---|---:|---:|---|---:|---:|")
    for label, name in MODELS:
        cfg = load_config_arg(name)
        for mem_label, mem in MEMS:
            for fmt_label, fmt in FORMATS:
                for ctx in (65536, 131072):
                    plan = plan_memory(cfg, EngineConfig(max_context=ctx, gpu_memory=mem), weights=fmt,
                                       device_bytes=mem, device_name=mem_label, device="cuda")
                    lim = plan.largest_fit()
                    verdict = "FITS" if plan.fits else "**DOES NOT FIT**"
                    print(f"| {label} | {mem_label} | {fmt_label} | {ctx} | {plan.total / 2**30:.2f} GiB | {verdict} "
                          f"| {lim.max_context} | {lim.max_concurrency} |")


def full() -> None:
    for label, name in MODELS:
        print(f"\n### {label}\n")
        for mem_label, _ in MEMS:
            for fmt_label, _ in FORMATS:
                cmd = ["hinfer", "plan", name, "--gpu-memory", mem_label, "--weights", fmt_label]
                r = subprocess.run([sys.executable, "-m", "hinfer", *cmd[1:]], capture_output=True, text=True,
                                   cwd=Path(__file__).resolve().parents[1])
                print(f"`$ {' '.join(cmd)}` (exit {r.returncode})\n\n```\n{(r.stdout + r.stderr).strip()}\n```\n")


if __name__ == "__main__":
    summary()
    print("\n## Full tables, default flags\n\nEvery model, memory size and weight format at the default flags, as "
          "printed (stderr lines start with `error:`).")
    full()
