"""The table `hinfer bench --vision` prints from its result (vision.py)."""

from __future__ import annotations

LABELS = {"image": "text + one image", "text": "the text alone", "same_length": "text of the image prompt's length"}


def vision_table(result: dict) -> str:
    meta, w = result["meta"], result["meta"]["workload"]
    lines = [f"Vision tower ({meta['vision_params'] / 1e6:,.1f}M parameters, {meta['vision_dtype']}, "
             f"{meta['vision_weights']} weights); medians of {w['repeats']}", "",
             "| image | patches | tokens | encode ms | from device pixels ms | FLOP floor ms | ratio | TFLOP/s | "
             "preprocess ms (host) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in result["encoder"]:
        lines.append(f"| {r['size']}x{r['size']} | {r['patches']:,} | {r['tokens']:,} | {r['encode_ms']:,.2f} | "
                     f"{r['encode_device_pixels_ms']:,.2f} | {r['floor_ms']:,.2f} | {r['ratio']:.0%} | "
                     f"{r['tflop_s']:,.1f} | {r['preprocess_ms']:,.1f} |")  # fmt: skip
    ttft = result["ttft"]
    img = ttft["image"]
    lines += ["", f"Time to first token ({meta['model']}, {meta['weights']} language model, {meta['layers']} layers): "
              f"{w['text_tokens']} text tokens and one {img['image_size']}x{img['image_size']} image "
              f"({img['image_tokens']:,} tokens; its host preprocessing, {img['preprocess_ms']:,.1f} ms, comes "
              "before the engine and is not counted)", "",
              "| prompt | tokens | TTFT median ms | min ms | max ms |", "|---|---|---|---|---|"]  # fmt: skip
    for key, label in LABELS.items():
        t = ttft[key]
        lines.append(f"| {label} | {t['prompt_tokens']:,} | {1e3 * t['ttft_median_s']:,.1f} | "
                     f"{1e3 * t['ttft_min_s']:,.1f} | {1e3 * t['ttft_max_s']:,.1f} |")  # fmt: skip
    failed = [k for k, ok in result["checks"].items() if not ok]
    lines += ["", f"the image costs {img['image_cost_ms']:,.1f} ms over text of the same length (encoder, naming its "
              f"pages by content, image positions); {img['over_text']:.1f}x the text alone",
              "checks: " + ("all passed" if not failed else "FAILED " + ", ".join(failed))]  # fmt: skip
    return "\n".join(lines)
