"""`hinfer batch`: a JSONL file of requests in OpenAI's Batch API format answered offline, through the same routes
the server answers (hinfer/server/batch_file.py), into a JSONL file in the Batch API's output format."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from hinfer.cli.engine_args import add_engine_args, check_max_context, engine_config_from_args
from hinfer.errors import ConfigError

log = logging.getLogger("hinfer.batch")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "batch",
        help="answer a JSONL file of API requests offline (OpenAI Batch API format)",
        description="Read requests, one JSON object a line: {\"custom_id\", \"method\": \"POST\", \"url\": "
        "\"/v1/chat/completions\" (or /v1/completions, /v1/responses, /v1/messages), \"body\": {...}}; answer them "
        "through the server's own routes, as many at once as the engine has lanes, and write one line each, in "
        "the input's order: {\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\", \"body\"}, "
        "\"error\"}. See docs/usage.md.",
    )
    p.add_argument("input", metavar="INPUT", help="the requests, JSONL ('-' for standard input)")
    p.add_argument("output", metavar="OUTPUT", help="where the answers go, JSONL ('-' for standard output)")
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="checkpoint directory in Hugging Face layout, or a .hinfer artifact (default: the demo "
                        "model, whose words are random)")
    p.add_argument("--served-model-name", default=None, metavar="NAME",
                   help="the model name the requests' bodies give (default: the checkpoint folder's name, or "
                        "'demo')")
    p.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="requests in flight at once (default: --max-concurrency, the engine's lanes)")
    add_engine_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hinfer.engine.factory import create_engine
    from hinfer.server import create_app

    check_max_context(args, args.model)
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    lines = sys.stdin.read().splitlines() if args.input == "-" else _read(args.input)
    ecfg = engine_config_from_args(args)
    engine, tokenizer, default_name = create_engine(args.model or "demo", ecfg)
    app = create_app(engine, tokenizer, model_name=args.served_model_name or default_name, webui=False)
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    total = sum(1 for line in lines if line.strip())
    step = max(1, total // 20)

    def progress(done: int) -> None:
        if done % step == 0 or done == total:
            log.info("batch: %d of %d answered", done, total)

    try:
        summary = asyncio.run(_run(app, engine, lines, out, args.concurrency or ecfg.max_concurrency, progress))
    finally:
        if out is not sys.stdout:
            out.close()
        engine.close()
    log.info("batch: %d requests in %.1f s, %d answered 200, %d not", summary.lines, summary.seconds, summary.ok,
             summary.failed)
    return 0 if summary.failed == 0 else 1


async def _run(app, engine, lines, out, concurrency, progress):
    """The batch, then the engine's thread stopped (in the same event loop)."""
    from hinfer.server.batch_file import run_batch

    try:
        return await run_batch(app, lines, out.write, concurrency, progress)
    finally:
        await engine.stop()


def _read(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such input file: {path}")
    return p.read_text(encoding="utf-8").splitlines()
