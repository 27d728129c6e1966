"""The table `hinfer bench --spec-serving` prints from its result (spec_serving.py)."""

from __future__ import annotations

from hinfer.bench.prefix_ttft_report import met


def _steps(phase: dict) -> str:
    s = phase.get("spec")
    if not s:
        return "-"
    return (f"{s['verify_steps']:.0f} verify / {s['plain_steps']:.0f} plain, "
            f"{s['accepted']:.0f}/{s['drafted']:.0f} accepted")


def spec_serving_table(result: dict) -> str:
    meta = result["meta"]
    w = meta["workload"]
    plain, spec = result["servers"]
    layers = meta["layers"] or "all"
    lines = [f"Serving with and without --spec mtp: {meta['model']} ({layers} layers, {meta['weights']}) on "
             f"{meta['gpu']}; streaming chat clients, greedy, {w['request_tokens']} tokens per answer; "
             f"{w['warmup_s']:g} s warm-up, then output tok/s over {w['window_s']:g} s (server counter)",
             "", "| clients | plain tok/s | spec tok/s | spec / plain | target | spec server's steps in the "
             "window |", "|---|---|---|---|---|---|"]  # fmt: skip
    target = meta["target_ratio"]
    for r, sp in zip(result["ratios"], spec["phases"]):
        verdict = met(r["ratio"], target, at_most=False)
        lines.append(f"| {r['clients']} | {r['plain_tok_s']:,.1f} | {r['spec_tok_s']:,.1f} | "
                     f"{r['ratio']:.3f} | >= {target:.2f}: {verdict} | {_steps(sp)} |")  # fmt: skip
    diffs = result["greedy_first_difference"]
    same = sum(d is None for d in diffs)
    failed = [k for k, ok in result["checks"].items() if not ok]
    parts = [d for d in result.get("greedy_parting", []) if d is not None]
    where = "; ".join(f"token {d['token']}: " + (f"among the plain server's top choices, {d['gap']:.3f} nats below its "
                                                 "first" if d["gap"] is not None else "not in its top choices")
                      for d in parts)  # fmt: skip
    lines += ["", f"greedy answers identical on both servers: {same} of {len(diffs)}"
              + ("" if same == len(diffs) else f" (first differing characters: {diffs}; parting at {where})"),
              f"startup: plain {plain['startup_s']:.0f} s, spec {spec['startup_s']:.0f} s; whole run "
              f"{meta['wall_s']:.0f} s",
              "checks: " + ("all passed" if not failed else "FAILED " + ", ".join(failed))]  # fmt: skip
    return "\n".join(lines)
