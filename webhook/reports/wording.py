"""Words for counts in what commands print."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``1 node``, ``2 nodes``: the nouns the commands count all take an ``s``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
