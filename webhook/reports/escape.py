"""What each output format cannot carry, and how a name is written so that it carries it.

Every name the commands print comes from someone else's manifest, cluster or rule file: an
object's name, a container's, a resource's, a file's path, a rule's message. A name that
holds a newline, an ESC or a ``::warning`` must reach the reader as text, never as a second
YAML document, a terminal command, a broken XML report or a GitHub workflow command. One
helper per format; each writes what it cannot carry as a visible escape (``\\x1b``,
``\\n``, ``\\u2028``), so a reader still sees what was there.

GitHub's runner takes a workflow command from any line of a step's output (stdout and
stderr alike) that starts with ``::`` after leading white space (``ActionCommand.TryParseV2``)
and, in the legacy form, from ``##[command]`` anywhere in a line (``ActionCommand.TryParse``;
both in actions/runner ``src/Runner.Common/ActionCommand.cs``, tried in turn by
``ActionCommandManager.TryProcessCommand``); it splits lines at CR as at LF. So the
terminal's escapes are also a CI log's: a name never starts a line with ``::`` nor holds
``##[``, and no CR or LF of a name survives.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, the bidirectional
# controls that reorder what a terminal shows ("Trojan Source"), lone surrogates (which no
# encoder writes) and the two non-characters YAML and XML refuse.
_ONE_LINE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
# The same, less the line breaks that a multi-line GitHub message keeps (as %0A / %0D).
_MESSAGE = re.compile(
    "[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]"
)
# What XML 1.0 forbids (its Char production: C0 but tab, LF and CR; surrogates; U+FFFE and
# U+FFFF) and what it discourages (DEL, C1), whatever the element or attribute.
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_XML_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# The runner's legacy command prefix, anywhere in a line.
_LEGACY_COMMAND = "##["
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _no_legacy_command(text: str) -> str:
    return text.replace(_LEGACY_COMMAND, "##\\x5b") if _LEGACY_COMMAND in text else text


def _no_workflow_command(text: str) -> str:
    """``text`` that starts no GitHub workflow command wherever it lands in a line."""
    text = _no_legacy_command(text)
    if "::" not in text:
        return text
    stripped = text.lstrip()
    if stripped.startswith("::"):
        text = text[: len(text) - len(stripped)] + "\\x3a" + stripped[1:]
    return text


def for_terminal(text: str) -> str:
    """One line for a terminal or a CI log: no control character (tab and newline
    included: the line is the writer's), no separator, no bidirectional control, no
    workflow command. Idempotent, so a line of escaped names may be escaped again."""
    # Every character _ONE_LINE takes is one str.isprintable refuses (Cc, Cf, Cs, Zl, Zp,
    # Cn): a name with none of them, nearly every name, skips the substitution.
    shown = text if text.isprintable() else _ONE_LINE.sub(_visible, text)
    return _no_workflow_command(shown)


def for_terminal_lines(text: str) -> str:
    """Text of several lines (an error that lists problems): each line as ``for_terminal``
    writes it, the newlines between them kept."""
    return "\n".join(for_terminal(line) for line in text.split("\n"))


def terminal_text(lines: list[str]) -> str:
    """Lines a report built, one element a line, as the terminal gets them: whatever
    newline an element holds came from a name and is written ``\\n``."""
    return "\n".join(map(for_terminal, lines)) + "\n"


def for_yaml_comment(text: str) -> str:
    """The text of a ``#`` comment: one line, whatever YAML would read as a line break
    (LF, CR, NEL, U+2028, U+2029) or refuse as unprintable written as an escape, so the
    comment ends where the writer ends it and no name starts a document or a key."""
    return for_terminal(text)


def for_xml(text: str, *, one_line: bool = False) -> str:
    """Text for an XML 1.0 element or attribute: the characters XML forbids or discourages
    as visible escapes (ElementTree escapes ``<``, ``&`` and quotes itself); with
    ``one_line`` (a test case's name, a failure's message attribute) newlines, CR and tab
    too."""
    return (_XML_LINE if one_line else _XML).sub(_visible, text)


def for_github_data(text: str) -> str:
    """A workflow command's message, as ``@actions/core`` escapes it (``escapeData`` in
    actions/toolkit packages/core/src/command.ts: ``%``, CR, LF); other controls first
    become visible escapes, since the runner writes the message to a log that interprets
    ESC."""
    shown = _no_legacy_command(_MESSAGE.sub(_visible, text))
    return shown.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def for_github_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``): as its message, and
    ``:`` and ``,`` too (``escapeProperty`` in the same file)."""
    return for_github_data(text).replace(":", "%3A").replace(",", "%2C")
