"""One module per ``gpu-webhook`` command, found by ``webhook.cli`` at start-up."""

import sys

USAGE_ERROR = 2


def fail(command: str, message: str) -> int:
    """Report unusable input the same way for every command: one line, exit code 2."""
    print(f"gpu-webhook {command}: {message}", file=sys.stderr)
    return USAGE_ERROR
