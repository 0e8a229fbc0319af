"""Colour for people at a terminal, never for pipes, files or anyone who set ``NO_COLOR``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

_CODES = {"green": "32", "red": "31", "yellow": "33", "bold": "1", "dim": "2"}


class Paint:
    """``paint("red", text)``: the text in that colour, or unchanged when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(
        cls,
        stream: TextIO,
        environ: Mapping[str, str] | None = None,
        *,
        no_color: bool = False,
    ) -> Paint:
        # https://no-color.org: any non-empty NO_COLOR turns colour off; so does --no-color.
        env = os.environ if environ is None else environ
        if no_color or env.get("NO_COLOR") or env.get("TERM") == "dumb":
            return cls(enabled=False)
        isatty = getattr(stream, "isatty", None)
        return cls(enabled=bool(isatty and isatty()))

    def __call__(self, colour: str, text: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\033[{_CODES[colour]}m{text}\033[0m"
