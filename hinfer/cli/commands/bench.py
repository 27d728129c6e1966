"""`hinfer bench`: throughput on the real engine path, each decode figure beside its floor (a CUDA GPU; --device cpu
runs the same pipeline on a tiny config as a smoke test)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hinfer.cli.engine_args import add_engine_args, engine_config_from_args
from hinfer.errors import ConfigError
from hinfer.quant.recipes import RECIPES


def _sampling_modes(text: str) -> list[str]:
    from hinfer.bench.measure import SAMPLING

    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in SAMPLING]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"sampling modes are {', '.join(SAMPLING)}; got {text!r}")
    return modes


def _ints(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        if not part:
            continue
        mult = 1024 if part.endswith("K") else 1
        out.append(int(part.rstrip("K")) * mult)
    return [x for x in out if x > 0]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="measure prefill and decode throughput against the memory floor (CUDA)",
        description="Prefill tok/s and decode tok/s at several lane counts and context depths on the engine's own "
        "path (CUDA graphs, sampler). Each decode figure is printed beside its floor: bytes a step must move "
        "(weights, KV at that depth, GDN state) over the copy bandwidth measured in the same run. With a config "
        "(a folder with config.json, or a packaged name like qwen3.6-27b) the weights are random at the real "
        "shapes, generated on the GPU (quantized formats layer by layer); with a checkpoint they are loaded. With --spec "
        "mtp it also times speculative rounds for each --spec-k. --device cpu runs the whole pipeline on the CPU "
        "reference ops (a smoke test for tiny configs; its figures mean nothing).",
    )
    p.add_argument("model", help="checkpoint dir, config dir/file, or packaged config name (qwen3.6-27b, ...)")
    p.add_argument("--quant", dest="bench_weights", choices=list(dict.fromkeys(["bf16", "fp8", "int4", *RECIPES])),
                   default=None, metavar="FORMAT|RECIPE",
                   help="weight format to run, or a named recipe of one (random/loaded bf16 weights are converted in "
                   "place; default bf16; --weights bf16|fp8|int4 says the same): %(choices)s")
    p.add_argument("--concurrency", type=_ints, default=None,
                   help="lane counts, e.g. 1,2,4,8 (default 1,2,4,8; with --structured 8)")
    p.add_argument("--depths", type=_ints, default=[1024, 32768, 131072], help="decode context depths, e.g. 1K,32K,128K")
    p.add_argument("--prefill", type=_ints, default=[1024, 8192, 32768], help="prefill lengths (empty: skip)")
    p.add_argument("--prefill-repeats", type=int, default=2,
                   help="timed runs of each prefill length, the best counts (default 2), after an untimed "
                        "warm-up run for each new chunk size")
    p.add_argument("--steps", type=int, default=None,
                   help="timed decode steps per point or window (default 64; with --structured 256)")
    p.add_argument("--layers", type=int, default=None, help="keep only the first N layers (quick checks)")
    p.add_argument("--vs-hf", action="store_true", help="also time Hugging Face transformers on the same shapes")
    p.add_argument("--spec-k", type=_ints, default=[1, 2, 3, 4, 5],
                   help="with --spec mtp: the draft counts K to time speculative rounds at (default 1,2,3,4,5)")
    p.add_argument("--acceptance", type=lambda t: [float(x) for x in t.split(",") if x.strip()], default=[3.2],
                   help="with --spec mtp: acceptance lengths (tokens per round, bonus included) to project tok/s "
                        "from; default 3.2, the published figure for these models at K=3 (random weights' own "
                        "acceptance is meaningless)")
    p.add_argument("--sampling", type=_sampling_modes, default=["greedy"], metavar="MODE[,MODE...]",
                   help="decode rows with every lane sampling this way (default greedy): greedy; qwen (temperature "
                        "1, top_k 20, top_p 0.95: the Qwen3.5 / 3.6 generation_config, what the server applies to "
                        "fields a request leaves out); top-p (temperature 0.7, top_p 0.95: the whole vocabulary "
                        "sorted); full (temperature 1, no filter). Each mode is a row per depth and lane count")
    p.add_argument("--forced-acceptance", type=lambda t: [float(x) for x in t.split(",") if x.strip()], default=[],
                   metavar="P[,P...]",
                   help="with --spec mtp: also run the engine end to end on greedy requests whose drafts are the "
                        "target's recorded continuation with probability P (a wrong token otherwise; the MTP head "
                        "still runs), and report tok/s beside plain decoding at that acceptance")
    g = p.add_argument_group("agent", "--agent: multi-turn conversations with the prefix cache on and off "
                             "(docs/prefix-cache.md)")
    g.add_argument("--agent", action="store_true",
                   help="run the multi-turn agent benchmark instead of the throughput sweep")
    g.add_argument("--conversations", type=int, default=4, help="conversations in flight at once (default 4)")
    g.add_argument("--turns", type=int, default=20, help="turns per conversation (default 20)")
    g.add_argument("--target-context", type=lambda t: _ints(t)[0], default=32768,
                   help="tokens of a conversation's last prompt + answer, e.g. 32K (default 32K)")
    g.add_argument("--user-tokens", type=_ints, default=[200, 1000], metavar="MIN,MAX",
                   help="length range of each new user message (default 200,1000)")
    g.add_argument("--answer-tokens", type=int, default=128, help="tokens of every answer (default 128)")
    g.add_argument("--agent-modes", type=lambda t: [m.strip() for m in t.split(",") if m.strip()],
                   default=["on", "off"], metavar="on,off", help="prefix cache settings to run (default on,off)")
    g.add_argument("--agent-seed", type=int, default=0, help="seed of the random user messages (default 0)")
    t = p.add_argument_group("prefix-ttft", "--prefix-ttft N: time to first token of a conversation's second "
                             "turn from the prefix cache in GPU memory and host RAM, and decode with the cache on "
                             "and off (docs/prefix-cache.md)")
    t.add_argument("--prefix-ttft", type=lambda t: _ints(t)[0], default=None, metavar="TOKENS",
                   help="run this benchmark on a turn-1 history of TOKENS random tokens, e.g. 32K")
    t.add_argument("--new-tokens", type=int, default=200, help="tokens turn 2 adds to the history (default 200)")
    t.add_argument("--repeats", type=int, default=None,
                   help="TTFT samples per case and decode windows per mode and lane count; medians (default 5; "
                        "with --structured 3)")
    t.add_argument("--decode-prompt", type=int, default=1000,
                   help="prompt tokens of each decoding lane (default 1000; --structured too); lanes from "
                        "--concurrency, timed steps per window from --steps")
    t.add_argument("--ttft-seed", type=int, default=0, help="seed of the random prompts (default 0)")
    s = p.add_argument_group("structured", "--structured: decode with every lane constrained by a JSON schema vs "
                             "unconstrained and half constrained (docs/structured-output.md); lanes from "
                             "--concurrency, windows from --steps, --repeats, prompts from --decode-prompt")
    s.add_argument("--structured", action="store_true",
                   help="run the structured-output decode benchmark instead of the throughput sweep")
    v = p.add_argument_group("spec-serving", "--spec-serving: two `hinfer serve` processes on the same "
                             "checkpoint, plain then --spec mtp, under the same streaming chat load at each "
                             "--concurrency (client count, default 1,8); output tok/s of each and the ratio "
                             "(docs/speculative.md). A config MODEL gets random weights written once to a "
                             "temporary folder (--layers N: the first N)")
    v.add_argument("--spec-serving", action="store_true",
                   help="run the serving check of speculative decoding instead of the throughput sweep")
    v.add_argument("--request-tokens", type=int, default=256,
                   help="max_tokens of every request; ignore_eos makes every answer this long (default 256)")
    v.add_argument("--warmup", type=float, default=10.0, metavar="S",
                   help="seconds of load before each timed window, and at least every client's first answer "
                        "(default 10)")
    v.add_argument("--window", type=float, default=20.0, metavar="S",
                   help="seconds of each timed window (default 20)")
    vi = p.add_argument_group("vision", "--vision: the vision tower's time per image, and the time to first token "
                              "of a prompt with one image beside the same text without it (docs/vision.md); "
                              "samples from --repeats")
    vi.add_argument("--vision", action="store_true",
                    help="run the vision benchmark instead of the throughput sweep (random vision weights at the "
                         "config's vision_config shapes, or the checkpoint's)")
    vi.add_argument("--image-sizes", type=_ints, default=[512, 1024, 2048], metavar="SIDE[,SIDE...]",
                    help="square image sides timed through the encoder (default 512,1024,2048)")
    vi.add_argument("--ttft-image", type=int, default=1024, metavar="SIDE",
                    help="side of the TTFT prompt's image (default 1024)")
    vi.add_argument("--text-tokens", type=int, default=100,
                    help="text tokens of the TTFT prompt, around the image (default 100)")
    p.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for the JSON results")
    add_engine_args(p)
    p.set_defaults(func=run, prefill_chunk=8192)


def bench_weights(args: argparse.Namespace) -> str:
    """The format to run: --quant, or the engine's --weights (the same thing here, so `--weights int4` never
    quietly runs bf16); both given must agree."""
    quant, weights = args.bench_weights, args.weights
    if weights in (None, "auto"):
        return quant or "bf16"
    if quant is not None and quant != weights:
        raise ConfigError(f"--quant {quant} and --weights {weights} disagree: give one of them")
    return weights


def fill_defaults(args: argparse.Namespace) -> None:
    """Flags the benchmarks share, left unset: each benchmark's own default (--structured wants 8 lanes and
    longer windows, to time a long constrained answer; --spec-serving 1 and 8 clients)."""
    if args.spec_serving and args.concurrency is None:
        args.concurrency = [1, 8]  # client counts: one stream, and a batch of eight
    for name, default, structured in (("concurrency", [1, 2, 4, 8], [8]), ("steps", 64, 256), ("repeats", 5, 3)):
        if getattr(args, name) is None:
            setattr(args, name, structured if args.structured else default)


def run(args: argparse.Namespace) -> int:
    args.bench_weights = bench_weights(args)
    if sum(map(bool, (args.agent, args.prefix_ttft, args.structured, args.spec_serving, args.vision))) > 1:
        raise SystemExit("--agent, --prefix-ttft, --structured, --spec-serving and --vision are separate benchmarks: "
                         "pick one")
    fill_defaults(args)
    if args.tensor_parallel > 1 and any((args.spec_serving, args.agent, args.prefix_ttft, args.structured,
                                         args.vision)):  # fmt: skip
        raise SystemExit("--tensor-parallel: the throughput sweep only (decode, prefill and the step's all-reduces); "
                         "the other benchmarks run one process (docs/tensor-parallel.md)")
    if args.spec_serving:
        return run_spec_serving(args)
    if args.agent:
        return run_agent(args)
    if args.prefix_ttft:
        return run_prefix_ttft(args)
    if args.structured:
        return run_structured(args)
    if args.vision:
        return run_vision(args)
    from hinfer.bench.run import BenchSpec, run_bench, table

    spec = BenchSpec(
        model=args.model, weights=args.bench_weights, concurrency=args.concurrency, depths=args.depths,
        prefill=args.prefill, prefill_repeats=args.prefill_repeats, steps=args.steps, layers=args.layers,
        vs_hf=args.vs_hf, out_dir=args.out,
        draft_tokens=args.spec_k, acceptance=args.acceptance, forced_acceptance=args.forced_acceptance,
        sampling=args.sampling, max_context=args.max_context,
    )  # fmt: skip
    rows = run_bench(spec, engine_config_from_args(args))
    print(table(rows))
    return 0


def run_agent(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from hinfer.bench.agent import MODES, AgentSpec, agent_table, run_agent_bench
    from hinfer.bench.agent_workload import AgentWorkload

    if len(args.user_tokens) != 2 or args.user_tokens[0] > args.user_tokens[1]:
        raise SystemExit("--user-tokens takes MIN,MAX")
    if not args.agent_modes or set(args.agent_modes) - set(MODES):
        raise SystemExit("--agent-modes takes on, off or on,off")
    workload = AgentWorkload(conversations=args.conversations, turns=args.turns, target_context=args.target_context,
                             user_tokens=(args.user_tokens[0], args.user_tokens[1]), answer_tokens=args.answer_tokens,
                             seed=args.agent_seed)  # fmt: skip
    spec = AgentSpec(model=args.model, weights=args.bench_weights, workload=workload, modes=args.agent_modes,
                     layers=args.layers, out_dir=args.out, command=shlex.join(["hinfer", *sys.argv[1:]]))
    print(agent_table(run_agent_bench(spec, engine_config_from_args(args))))
    return 0


def run_prefix_ttft(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from hinfer.bench.prefix_ttft import PrefixTtftSpec, run_prefix_ttft
    from hinfer.bench.prefix_ttft_report import ttft_table

    if args.repeats < 1 or args.new_tokens < 1 or args.decode_prompt < 1 or args.steps < 1:
        raise SystemExit("--repeats, --new-tokens, --decode-prompt and --steps must be >= 1")
    spec = PrefixTtftSpec(model=args.model, history_tokens=args.prefix_ttft, new_tokens=args.new_tokens,
                          repeats=args.repeats, concurrency=args.concurrency, decode_prompt=args.decode_prompt,
                          decode_steps=args.steps, weights=args.bench_weights, layers=args.layers,
                          seed=args.ttft_seed, out_dir=args.out, command=shlex.join(["hinfer", *sys.argv[1:]]))
    print(ttft_table(run_prefix_ttft(spec, engine_config_from_args(args))))
    return 0


def run_structured(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from hinfer.bench.structured import StructuredSpec, run_structured
    from hinfer.bench.structured_report import structured_table

    spec = StructuredSpec(model=args.model, lanes=args.concurrency, prompt_tokens=args.decode_prompt,
                          steps=args.steps, repeats=args.repeats, weights=args.bench_weights, layers=args.layers,
                          out_dir=args.out, command=shlex.join(["hinfer", *sys.argv[1:]]))  # fmt: skip
    print(structured_table(run_structured(spec, engine_config_from_args(args))))
    return 0


def run_spec_serving(args: argparse.Namespace) -> int:
    import shlex
    import signal
    import sys

    from hinfer.bench.spec_serving import SpecServingSpec, run_spec_serving
    from hinfer.bench.spec_serving_report import spec_serving_table

    # a timeout's SIGTERM unwinds like Ctrl-C, so the server child is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    spec = SpecServingSpec(model=args.model, clients=args.concurrency, request_tokens=args.request_tokens,
                           warmup_s=args.warmup, window_s=args.window, max_context=args.max_context,
                           weights=args.bench_weights, layers=args.layers, out_dir=args.out,
                           command=shlex.join(["hinfer", *sys.argv[1:]]))  # fmt: skip
    print(spec_serving_table(run_spec_serving(spec, engine_config_from_args(args))))
    return 0


def run_vision(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from hinfer.bench.vision import VisionSpec, run_vision
    from hinfer.bench.vision_report import vision_table

    spec = VisionSpec(model=args.model, sizes=args.image_sizes, ttft_size=args.ttft_image,
                      text_tokens=args.text_tokens, repeats=args.repeats, weights=args.bench_weights,
                      layers=args.layers, out_dir=args.out, command=shlex.join(["hinfer", *sys.argv[1:]]))
    print(vision_table(run_vision(spec, engine_config_from_args(args))))
    return 0
