"""``gpu-webhook``: one entry point, one module per command under ``webhook.commands``.

Each command module exposes ``register(subparsers)`` and sets ``handler`` on its parser;
the handler returns the exit code. Commands stay thin: they parse, call the library, print.

Only the module of the command being run is imported: the others appear in
``gpu-webhook --help`` by their line in ``webhook.commands.SUMMARIES``. Importing every
command's engine, cluster client, schema validator and server was most of the start-up of
each command (``gpu-webhook --version`` took thirty times the interpreter's own start), and
``check`` runs once per file in pre-commit hooks and CI loops.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import webhook.commands
from webhook import __version__
from webhook.commands import SUMMARIES


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or with ``command`` that one's in full and the others as
    their summary. A module without a summary (a command added without one) is imported
    and registered in full either way, so it is never missing from the parser."""
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Kubernetes admission webhook for GPU workloads.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        if command is None or name == command or name not in SUMMARIES:
            importlib.import_module(f"webhook.commands.{name}").register(sub)
        else:
            sub.add_parser(name, help=SUMMARIES[name])
    return parser


def command_modules() -> list[str]:
    """The command modules' names, sorted: the order of ``gpu-webhook --help``."""
    return sorted(info.name for info in pkgutil.iter_modules(webhook.commands.__path__))


def named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option, since the
    top level's only options (``-h``, ``--version``) take no value."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    # No command named: the summaries are enough for argparse's usage error.
    parser = build_parser(named_command(arguments) or "")
    args = parser.parse_args(arguments)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0
    return code
