"""Text a hostile user puts in names (objects, containers, resources, files, rule
messages), and how a GitHub runner reads a line (actions/runner
src/Runner.Common/ActionCommand.cs: ``TryParseV2`` after ``TrimStart``, ``TryParse``
anywhere; lines split at LF, CR and CRLF), for the escaping tests of every output."""

from __future__ import annotations

import re

from hypothesis import strategies as st

# Pieces a hostile name is made of, beside any character at all (surrogates included).
HOSTILE = [
    "\n", "\r", "\r\n", "\t", "\x00", "\x01", "\x07", "\x0c", "\x1b", "\x1b[31m", "\x1b]0;t\x07",
    "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u2066", "\ufeff", "\ufffe", "\uffff",
    "\ud800", "\udcff", "::", "::warning ::", "##[", "##[error]", "%", "%0A", ":", ",", "---",
    "...", "#", "'", '"', "&", "<", "]]>", " ", "\u3000", "\\x1b", "a", "é", "\U0001f600",
]  # fmt: skip
ANY_TEXT = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE),
        st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp", "Zs", "L", "N", "P", "S"]),
    ),
    max_size=24,
).map("".join)

# What no line of a terminal or CI log may hold: C0 but the writer's newline, DEL, C1.
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def starts_workflow_command(line: str) -> bool:
    """As the runner reads a line (actions/runner src/Runner.Common/ActionCommand.cs):
    ``::`` after leading white space, or ``##[`` anywhere."""
    return line.lstrip().startswith("::") or "##[" in line


def runner_lines(text: str) -> list[str]:
    """Lines as the runner splits a step's output: at LF, CR and CRLF."""
    return re.split("\r\n|\r|\n", text)
