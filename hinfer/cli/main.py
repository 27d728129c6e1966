"""`hinfer` command line: one module per subcommand in hinfer/cli/commands/, each with
`register(subparsers)` that adds its parser and sets `func=run(args) -> int`."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from hinfer.errors import HinferError

# Order of appearance in --help; modules found but not listed come after.
ORDER = ["serve", "generate", "chat", "batch", "bench", "plan", "convert", "inspect", "synth"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hinfer",
        description="hinfer: a fast inference engine for the Qwen3.5 hybrid model family on one Hopper GPU.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import hinfer.cli.commands as pkg

    names = [m.name for m in pkgutil.iter_modules(pkg.__path__)]
    for name in sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
        importlib.import_module(f"hinfer.cli.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HinferError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
