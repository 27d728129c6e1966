"""`hinfer serve`: the OpenAI- and Anthropic-compatible HTTP server (FastAPI + uvicorn)."""

from __future__ import annotations

import argparse
import logging
import os
import socket

from hinfer.cli.engine_args import add_engine_args, check_max_context, engine_config_from_args
from hinfer.errors import ConfigError

log = logging.getLogger("hinfer.serve")

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# HTTP limits (hinfer/server/http_server.py HTTPLimits; kept here so `hinfer --help` does not import uvicorn)
SHUTDOWN_TIMEOUT_S = 30.0
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 60.0
KEEP_ALIVE_S = 15
MAX_CONNECTIONS = 1024
MAX_BODY_BYTES = 32 * 1024 * 1024


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError("must be a number of seconds in (0, 86400]")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("port must be in 0..65535")
    return port


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the OpenAI- and Anthropic-compatible HTTP server",
        description="Serve a model over HTTP: OpenAI /v1/chat/completions, /v1/completions, /v1/responses, "
        "/v1/models and Anthropic /v1/messages (+ /count_tokens), with streaming, tool calls and reasoning; "
        "/health and /metrics (Prometheus). With no MODEL, the built-in demo model runs (random weights: its "
        "words are random). See docs/api.md for what each field does.",
    )
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="checkpoint directory in Hugging Face layout (config.json, *.safetensors, tokenizer); "
                        "omit it to run the demo model")
    p.add_argument("--demo", action="store_true",
                   help="run the built-in demo model (random weights; the default when MODEL is omitted)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for all "
                        "interfaces, then also set --api-key)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require this key from clients, as 'Authorization: Bearer KEY' or 'x-api-key: KEY' "
                        "(default: $HINFER_API_KEY if set, else no key). /health stays open")
    p.add_argument("--cors", default=None, metavar="ORIGINS",
                   help="comma-separated browser origins allowed to call the API (CORS), e.g. "
                        "'http://localhost:3000', or '*' for any (default: none)")
    p.add_argument("--served-model-name", default=None, metavar="NAME[,ALIAS...]",
                   help="the model name clients must send, plus optional aliases, comma-separated (default: "
                        "the checkpoint folder's name, or 'demo'). Aliases help clients that insist on a name, "
                        "e.g. an agent configured for another model")
    p.add_argument("--preserve-thinking", action="store_true",
                   help="keep the reasoning of earlier assistant turns in the prompt (the template's "
                        "preserve_thinking); by default only the current turn's reasoning is kept. A request "
                        "can override it with chat_template_kwargs.preserve_thinking")
    p.add_argument("--compaction-max-tokens", type=int, default=4096, metavar="N",
                   help="tokens a compaction summary may take when the request sets no limit (Codex CLI's remote "
                        "compaction, /v1/responses/compact, Anthropic's compact edit; docs/api.md#compaction)")
    p.add_argument("--allow-special-tokens-in-content", action="store_true",
                   help="let special-token text in client strings (message content, system prompts, tool results, "
                        "tool names and arguments) become control tokens such as <|im_start|>, as plain template "
                        "rendering does. By default such text is encoded as ordinary text, so a client cannot "
                        "forge a system turn; raw /v1/completions prompts are never changed")
    p.add_argument("--tool-call-grammar", action="store_true",
                   help="with tool_choice auto (the default when tools are given), hold every tool call the model "
                        "starts to a valid call of a tool shown (a grammar over the Qwen call format and each "
                        "tool's parameter schema), as tool_choice required / named already are; free text stays "
                        "free. Costs the grammar's host time per step on those requests (docs/structured-output.md)")
    p.add_argument("--shutdown-timeout", type=_seconds, default=SHUTDOWN_TIMEOUT_S, metavar="S",
                   help="on SIGTERM/SIGINT: new and queued requests get 503, running ones get up to S seconds to "
                        "finish, then their streams end with an error event (default %(default)g)")
    p.add_argument("--header-timeout", type=_seconds, default=HEADER_TIMEOUT_S, metavar="S",
                   help="close a connection whose request headers are not complete within S seconds "
                        "(default %(default)g)")
    p.add_argument("--body-timeout", type=_seconds, default=BODY_TIMEOUT_S, metavar="S",
                   help="close a connection whose request body is not complete within S seconds of its headers "
                        "(default %(default)g)")
    p.add_argument("--keep-alive-timeout", type=_positive, default=KEEP_ALIVE_S, metavar="S",
                   help="close an idle keep-alive connection after S seconds (default %(default)d)")
    p.add_argument("--max-connections", type=_positive, default=MAX_CONNECTIONS, metavar="N",
                   help="open connections (streams included) beyond which new requests get a 503 "
                        "(default %(default)d)")
    p.add_argument("--max-body-bytes", type=_positive, default=MAX_BODY_BYTES, metavar="N",
                   help="larger request bodies are answered 413 (default %(default)d = 32 MiB)")
    p.add_argument("--no-webui", action="store_true",
                   help="do not serve the web chat at / (by default the page at http://HOST:PORT/ chats with the "
                        "model through this server's API; it needs no key to load and asks for --api-key when set)")
    p.add_argument("--log-requests", action="store_true",
                   help="log one line per request with its status (by default only error answers are logged)")
    add_engine_args(p)
    p.set_defaults(func=run)


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def run(args: argparse.Namespace) -> int:
    if args.demo and args.model:
        raise ConfigError("give MODEL or --demo, not both")
    check_max_context(args, args.model)
    if args.tensor_parallel > 1 and _launcher_follower(args.tensor_parallel):
        from hinfer.engine.factory import load_model

        load_model(args.model or "demo", engine_config_from_args(args))  # follows rank 0's steps, then exits
        return 0
    from hinfer.server import http_server  # heavy imports only once the flags are known to be good

    sock = http_server.bind_socket(args.host, args.port)  # before the model loads: a busy port fails at once
    try:
        return _serve(args, sock)
    finally:
        sock.close()


def _launcher_follower(n: int) -> bool:
    """Started by torchrun as rank 1..N-1: no socket of its own (rank 0 serves HTTP), only the model's steps."""
    from hinfer.engine.tp.group import launcher_rank

    return bool(launcher_rank(n))


def _serve(args: argparse.Namespace, sock: socket.socket) -> int:
    from hinfer.engine.factory import create_engine
    from hinfer.server import create_app, http_server
    from hinfer.tokenizer import check_checkpoint_template

    if args.model is not None:
        check_checkpoint_template(args.model)  # a broken template is a startup error, before the model loads
    api_key = args.api_key if args.api_key is not None else os.environ.get("HINFER_API_KEY") or None
    names = _split(args.served_model_name)
    ecfg = engine_config_from_args(args)
    engine, tokenizer, default_name = create_engine(args.model or "demo", ecfg)
    tokenizer.check_chat_template()
    model_name = names[0] if names else default_name
    app = create_app(engine, tokenizer, model_name=model_name, model_aliases=names[1:], api_key=api_key,
                     cors=_split(args.cors) or None, preserve_thinking_default=args.preserve_thinking,
                     allow_special_tokens=args.allow_special_tokens_in_content, max_body_bytes=args.max_body_bytes,
                     tool_call_grammar=args.tool_call_grammar, compaction_max_tokens=args.compaction_max_tokens,
                     log_requests=args.log_requests, webui=not args.no_webui)
    port = sock.getsockname()[1]

    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{port}"
    if args.model is None:
        log.info("no MODEL given: serving the demo model (random weights, so its words are random)")
    log.info("serving %r: max context %d tokens, %d lanes, %d queued at most, auth %s%s",
             model_name, engine.max_context, ecfg.max_concurrency, ecfg.max_pending_requests,
             "on" if api_key else "off", f", CORS {args.cors}" if args.cors else "")
    log.info("listening on %s  (OpenAI base_url %s/v1, Anthropic base_url %s)", url, url, url)
    if not args.no_webui:
        log.info("web chat: %s/", url)
    if args.host not in _LOOPBACK and not api_key:
        log.warning("listening on %s without --api-key: anyone who can reach this port can use the model",
                    args.host)
    limits = http_server.HTTPLimits(header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                        keep_alive_s=args.keep_alive_timeout, max_connections=args.max_connections,
                        shutdown_timeout_s=args.shutdown_timeout)
    try:
        http_server.serve(app, sock, app.state.hinfer.drain, limits)
    finally:
        engine.close()  # the engine thread has stopped: tensor parallelism's other ranks leave
    log.info("stopped")
    return 0
