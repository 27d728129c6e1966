"""Where the GPU waits for the host, read from a Chrome trace with Python stacks (`bench/profile_decode.py --trace`).

For every gap on the GPU timeline (no kernel, copy or memset running for more than --min-us), the launch call of
the activity that ends it (matched by correlation id) and the Python frames of our code around that call: the
host work the GPU waited for. Gaps are summed by that innermost project frame and printed per step / round.

    python bench/trace_gaps.py TRACE.json[.gz] --units 5 [--min-us 5] [--frames 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
OURS = ("hinfer/", "bench/")  # frames worth naming: the project's, not torch's


@dataclass
class Gap:
    us: float
    after: str  # the GPU activity before the gap
    before: str  # the one after it
    launch: str  # the call that launched `before`
    frames: tuple[str, ...]  # our innermost Python frames around that call, outermost first


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _frames_at(py: list[dict], starts: list[float], ts: float, keep: int) -> tuple[str, ...]:
    """Our Python frames enclosing time ts (events of one thread, sorted by start), outermost first, last `keep`."""
    out = [e["name"] for e in py[: bisect_right(starts, ts)] if e["ts"] <= ts <= e["ts"] + e.get("dur", 0)
           and any(o in e["name"] for o in OURS)]  # fmt: skip
    return tuple(out[-keep:])


def gaps(events: list[dict], min_us: float = 5.0, keep: int = 3) -> list[Gap]:
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}  # fmt: skip
    py: dict[object, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "python_function":
            py[e["tid"]].append(e)
    for v in py.values():
        v.sort(key=lambda e: e["ts"])
    starts = {t: [e["ts"] for e in v] for t, v in py.items()}
    out: list[Gap] = []
    end, last = None, ""
    for e in gpu:
        if end is not None and e["ts"] - end > min_us:
            r = launches.get(e.get("args", {}).get("correlation"))
            frames = _frames_at(py[r["tid"]], starts[r["tid"]], r["ts"], keep) if r and r["tid"] in py else ()
            out.append(Gap(e["ts"] - end, last, e["name"], r["name"] if r else "?", frames))
        if end is None or e["ts"] + e.get("dur", 0) > end:
            end, last = e["ts"] + e.get("dur", 0), e["name"]
    return out


def table(found: list[Gap], units: int, unit: str = "unit", top: int = 15) -> str:
    by: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])
    for g in found:
        k = (g.frames[-1] if g.frames else f"({g.launch})", g.before[:40])
        by[k][0] += g.us
        by[k][1] += 1
    total = sum(g.us for g in found)
    lines = [f"GPU idle {total / units / 1e3:.3f} ms per {unit} in {len(found) / units:.1f} gaps",
             f"{'launched from':60s} {'next on the GPU':40s} {'us/' + unit:>9s} {'gaps/' + unit:>9s}"]  # fmt: skip
    for (frame, nxt), (us, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{frame[-60:]:60s} {nxt:40s} {us / units:9.1f} {n / units:9.1f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="Chrome trace (.json or .json.gz) written with Python stacks")
    ap.add_argument("--units", type=int, default=5, help="steps or rounds the trace holds (per-unit figures)")
    ap.add_argument("--unit", default="round", help="what a unit is called in the table")
    ap.add_argument("--min-us", type=float, default=5.0, help="smallest idle span counted as a gap")
    ap.add_argument("--frames", type=int, default=3, help="our innermost frames kept per gap")
    ap.add_argument("--list", type=int, default=0, help="also list the N largest single gaps with their frames")
    a = ap.parse_args()
    found = gaps(load(a.trace), a.min_us, a.frames)
    print(table(found, a.units, a.unit))
    for g in sorted(found, key=lambda g: -g.us)[: a.list]:
        print(f"{g.us:8.1f} us  {g.after[:30]} -> {g.before[:30]} via {g.launch}: {' > '.join(g.frames)}")


if __name__ == "__main__":
    main()
