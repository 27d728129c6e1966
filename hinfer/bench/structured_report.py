"""The table `hinfer bench --structured` prints from its result (structured.py)."""

from __future__ import annotations

import json

from hinfer.bench.prefix_ttft_report import met

LABELS = {"free": "unconstrained", "json": "every lane a JSON schema", "mixed": "half the lanes a JSON schema"}


def structured_table(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    w = meta["workload"]
    lines = ["JSON schema of the constrained lanes (minItems: the tokens a lane makes, so no answer completes "
             "inside a window):", json.dumps(result["schema"], indent=1), "",
             f"Decode with structured output: {w['prompt_tokens']}-token prompts, greedy, "
             f"{meta['tokens_per_request']} tokens per request in a window ({meta['warmup_steps']} untimed + "
             f"{w['steps']} timed steps); medians of {w['repeats']} windows", "",
             "| lanes | mode | constrained | tok/s | ms/step | vs unconstrained | tokens per request in a window | "
             "grammar host "
             "ms/step (fill + apply + accept) | fill us per mask |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        g = r["grammar_host_ms_per_step"]
        host = "-" if r["constrained_lanes"] == 0 else (f"{g['total']:.3f} ({g['fill']:.3f} + {g['apply']:.3f} + "
                                                        f"{g['accept']:.3f})")  # fmt: skip
        per_mask = f"{r['fill_us_per_mask']:.1f}" if r["constrained_lanes"] else "-"
        lines.append(f"| {r['lanes']} | {LABELS[r['mode']]} | {r['constrained_lanes']} | {r['tok_s']:,.1f} | "
                     f"{r['ms_per_step']:.2f} | {r['vs_free']:.3f} ({100 * r['overhead']:+.1f}% overhead) | "
                     f"{', '.join(map(str, r['tokens_per_request']))} | {host} | {per_mask} |")  # fmt: skip
    target = result["target_overhead"]
    json_rows = [r for r in rows if r["mode"] == "json"]
    at8 = [r for r in json_rows if r["lanes"] == 8] or json_rows[-1:]
    failed = [k for k, ok in result["checks"].items() if not ok]
    lines.append("")
    if at8:
        r = at8[0]
        lines.append(f"target (27B shapes on an H200): decode overhead at 8 lanes with a JSON schema <= "
                     f"{100 * target:.0f}%: {100 * r['overhead']:.1f}% at {r['lanes']} lanes "
                     f"({met(r['overhead'], target)})")  # fmt: skip
    lines += ["checks: " + ("all passed" if not failed else "FAILED " + ", ".join(failed)),
              f"a constrained answer starts: {result['sample'][:240]!r}"]  # fmt: skip
    return "\n".join(lines)
