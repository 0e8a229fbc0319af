"""One module per ``gpu-webhook`` command, found by ``webhook.cli`` at start-up."""

from __future__ import annotations

import os
import sys
from typing import Any

from webhook.engine.policy import Policy, PolicyError
from webhook.files.rulefiles import load_policy

USAGE_ERROR = 2
DEFAULT_RULES = "rules"


def fail(command: str, message: str) -> int:
    """Report unusable input the same way for every command: one line, exit code 2."""
    print(f"gpu-webhook {command}: {message}", file=sys.stderr)
    return USAGE_ERROR


def add_rules_option(parser: Any) -> None:
    parser.add_argument(
        "--rules",
        default=os.environ.get("GPU_WEBHOOK_RULES", DEFAULT_RULES),
        metavar="DIR",
        help="rule file directory (default: $GPU_WEBHOOK_RULES or ./rules)",
    )


def add_timeout_option(parser: Any) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="read timeout for each API request (default 30)",
    )


def rules_or_fail(command: str, directory: str) -> Policy | int:
    """The policy in ``directory``, or the exit code after saying why it is unusable."""
    try:
        return load_policy(directory)
    except PolicyError as exc:
        return fail(command, f"the rules in {directory} are not usable:\n{exc}")
