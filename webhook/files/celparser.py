"""celpy's CEL parser, loaded from lark's cache under the user's cache directory (issue 36).

Building the LALR tables of celpy's grammar takes about 0.2 s, loading them from lark's
cache about 0.01 s: most of what a ``check`` that evaluates a DRA selector pays for CEL. The
engine reads no file, so this shell module gives it a loader
(``cel.values.use_parser_loader``), run once, just before the first selector is
compiled; a command that evaluates none never gets here.

The cache is ``$XDG_CACHE_HOME/gpu-webhook/`` (default ``~/.cache/gpu-webhook/``), one file
per lark and celpy version. lark stores a digest of the grammar and options in it and
rebuilds on any mismatch or unreadable file; where the directory cannot be written (a
read-only root file system) no cache is used and celpy builds its parser as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def cache_file() -> Path | None:
    """Where the parser is cached, or None when that directory cannot be written."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    directory = Path(base) / "gpu-webhook"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(directory, os.W_OK):
        return None
    from importlib import metadata

    versions = f"lark{metadata.version('lark')}-celpy{metadata.version('cel-python')}"
    return directory / f"cel-parser-{versions}.cache"


def load_cached_parser() -> None:
    """Install celpy's parser singleton (``CELParser.CEL_PARSER``) built through lark's
    cache, with exactly the options ``CELParser.__init__`` uses (celpy 0.5), so that the
    trees are the ones celpy's own parser makes (``tests/files/test_celparser.py``)."""
    from importlib import resources

    from celpy.celparser import CELParser
    from lark import Lark, Tree

    path = cache_file()
    if path is None or CELParser.CEL_PARSER is not None:
        return
    try:
        grammar = resources.files("celpy").joinpath("cel.lark").read_text(encoding="utf-8")
        CELParser.CEL_PARSER = Lark(
            grammar,
            parser="lalr",
            start="expr",
            debug=True,
            g_regex_flags=re.M,
            lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
            propagate_positions=True,
            maybe_placeholders=False,
            priority="invert",
            tree_class=Tree,
            cache=str(path),
        )
    except OSError:
        CELParser.CEL_PARSER = None  # celpy builds its own


def register() -> None:
    from webhook.engine.resources.cel.values import use_parser_loader

    use_parser_loader(load_cached_parser)
