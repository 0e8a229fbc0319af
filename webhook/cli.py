"""``gpu-webhook``: one entry point, one module per command under ``webhook.commands``.

Each command module exposes ``register(subparsers)`` and sets ``handler`` on its parser;
the handler returns the exit code. Commands stay thin: they parse, call the library, print.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import webhook.commands
from webhook import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Kubernetes admission webhook for GPU workloads.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(webhook.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"webhook.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    return code
