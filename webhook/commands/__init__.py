"""One module per ``gpu-webhook`` command, found by ``webhook.cli`` at start-up."""

import os
import sys

USAGE_ERROR = 2
DEFAULT_RULES = "rules"
RULES_ENV = "GPU_WEBHOOK_RULES"


def fail(command: str, message: str) -> int:
    """Report unusable input the same way for every command: one line, exit code 2."""
    print(f"gpu-webhook {command}: {message}", file=sys.stderr)
    return USAGE_ERROR


def rules_directory(given: str | None) -> tuple[str, str]:
    """The rule directory to read, and why that one, for a message when it is missing."""
    if given:
        return given, "--rules"
    if os.environ.get(RULES_ENV):
        return os.environ[RULES_ENV], f"${RULES_ENV}"
    return DEFAULT_RULES, "default"
