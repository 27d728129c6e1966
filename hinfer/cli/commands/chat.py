"""`hinfer chat`: a multi-turn conversation in the terminal, streamed token by token."""

from __future__ import annotations

import argparse
import sys

from hinfer.cli.engine_args import add_engine_args, check_max_context, engine_config_from_args
from hinfer.cli.sampling_args import add_sampling_args, sampling_from_args
from hinfer.errors import HinferError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chat",
        help="talk to a model in the terminal",
        description="A multi-turn chat in the terminal with the model's chat template; replies stream as they are "
        "generated. Type /image PATH to attach an image to your next message (models with a vision tower), "
        "/reset to start over, /quit (or Ctrl-D) to leave. With no --model, the built-in demo model runs (random "
        "weights: its words are random).",
    )
    p.add_argument("--model", default=None, help="checkpoint directory (default: the built-in demo model)")
    p.add_argument("--system", default=None, help="system message")
    p.add_argument("--no-thinking", action="store_true", help="render the template with enable_thinking=false")
    p.add_argument("--show-thinking", action="store_true", help="print the reasoning text too (hidden by default)")
    add_sampling_args(p)
    add_engine_args(p)
    p.set_defaults(func=run, max_tokens=1024, temperature=0.7)


def run(args: argparse.Namespace) -> int:
    check_max_context(args, args.model)  # before the heavy imports: a bad flag fails at once
    from hinfer.engine.protocol import GenerationRequest
    from hinfer.llm import LLM

    llm = LLM(args.model or "demo", engine_config=engine_config_from_args(args))
    if args.model is None:
        print("(demo model: random weights, so the words are random)", file=sys.stderr)
    system = [{"role": "system", "content": args.system}] if args.system else []
    history: list[dict] = []
    images: list[dict] = []  # attached with /image, sent with the next message
    turn = 0
    while True:
        try:
            line = input("\n> ")
        except EOFError:
            return 0
        if line.strip() in ("/quit", "/exit"):
            return 0
        if line.strip() == "/reset":
            history, images = [], []
            continue
        if line.startswith("/image "):
            images.append({"type": "image", "image": line[len("/image ") :].strip()})
            continue
        content = images + [{"type": "text", "text": line}] if images else line
        try:
            ids, inputs = llm.encode_with_images(system + history + [{"role": "user", "content": content}],
                                                 enable_thinking=not args.no_thinking)  # fmt: skip
        except (OSError, ValueError, HinferError) as e:  # an unreadable image file, a model without vision
            print(f"error: {e}", file=sys.stderr)
            images = []
            continue
        history.append({"role": "user", "content": content})
        images = []
        rid = f"chat-{turn}"
        turn += 1
        llm.core.add(GenerationRequest(rid, ids, sampling_from_args(args), images=inputs))
        reply, thinking = "", not args.no_thinking
        while llm.core.has_work:
            for ev in llm.core.step():
                reply += ev.text
                text = ev.text
                if thinking and "</think>" in reply:  # the template opened <think>: hide it unless asked
                    thinking = False
                    text = reply.split("</think>", 1)[1].lstrip("\n") if not args.show_thinking else text
                if args.show_thinking or not thinking:
                    sys.stdout.write(text)
                    sys.stdout.flush()
        answer = reply.split("</think>", 1)[-1].strip()
        history.append({"role": "assistant", "content": answer})
        print()
