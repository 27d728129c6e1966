"""Greedy tokens of a checkpoint folder (quantized on load with --weights) and of its .hinfer artifact, each loaded
in its own process (so the two models never share the machine's RAM), then compared.

    python scripts/artifact_equivalence.py SRC_DIR ART.hinfer --weights int4 [--tokens 8] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

PROMPT = [9707, 11, 1879, 0, 358, 1079, 264, 1273]


def _one(path: str, weights: str | None, dtype: str, tokens: int) -> list[int]:
    from hinfer import LLM, SamplingParams

    kw = {"weights": weights} if weights else {}
    llm = LLM(path, device="cpu", dtype=dtype, max_concurrency=1, max_context=256, **kw)
    out = llm.generate(PROMPT, SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    return out[0].token_ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("artifact")
    ap.add_argument("--weights", default="int4", help="format the folder is quantized to on load (default int4)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--one", nargs=2, metavar=("PATH", "WEIGHTS"), help=argparse.SUPPRESS)  # child process mode
    a = ap.parse_args()
    if a.one:
        print(json.dumps(_one(a.one[0], None if a.one[1] == "-" else a.one[1], a.dtype, a.tokens)))
        return 0
    got = {}
    for label, path, w in (("folder", a.src, a.weights), ("artifact", a.artifact, "-")):
        t0 = time.monotonic()
        cmd = [sys.executable, __file__, a.src, a.artifact, "--dtype", a.dtype, "--tokens", str(a.tokens),
               "--one", path, w]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            print(f"{label}: failed\n{res.stderr[-2000:]}")
            return 2
        got[label] = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{label:8s} {got[label]} ({time.monotonic() - t0:.0f} s)", flush=True)
    same = got["folder"] == got["artifact"]
    print("identical" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
