"""`hinfer generate`: one prompt in, completion out (chat template applied unless --raw)."""

from __future__ import annotations

import argparse
import sys
import time

from hinfer.cli.engine_args import add_engine_args, check_max_context, engine_config_from_args
from hinfer.cli.sampling_args import add_sampling_args, sampling_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="generate a completion for one prompt",
        description="Generate a completion for one prompt with the chat template applied (unless --raw). "
        "With --demo, a built-in tiny random-weight model runs (its words are random).",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help="checkpoint directory (Hugging Face layout)")
    src.add_argument("--demo", action="store_true", help="use the built-in demo model (random weights; default)")
    p.add_argument("--prompt", required=True, help="the user message (or raw text with --raw)")
    p.add_argument("--system", default=None, help="system message (chat mode)")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    p.add_argument("--no-thinking", action="store_true", help="render the template with enable_thinking=false")
    add_sampling_args(p)
    add_engine_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_max_context(args, args.model)  # before the heavy imports: a bad flag fails at once
    from hinfer.llm import LLM

    ecfg = engine_config_from_args(args)
    t0 = time.monotonic()
    llm = LLM(args.model or "demo", engine_config=ecfg)
    load_s = time.monotonic() - t0
    if args.raw:
        prompt: str | list[dict] = args.prompt
        kwargs = {}
    else:
        prompt = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.prompt}
        ]
        kwargs = {"enable_thinking": not args.no_thinking}
    if args.model is None:
        print("(demo model: random weights, so the words are random)", file=sys.stderr)
    t1 = time.monotonic()
    out = llm.generate(prompt, sampling_from_args(args), **kwargs)[0]
    dt = time.monotonic() - t1
    print(out.text)
    n = len(out.token_ids)
    print(
        f"[{n} tokens in {dt:.2f} s, {n / max(dt, 1e-9):.1f} tok/s; prompt {len(out.prompt_token_ids)} tokens; "
        f"finish {out.finish_reason}; load {load_s:.1f} s]",
        file=sys.stderr,
    )
    return 0

