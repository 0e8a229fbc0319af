"""Each output format's escape, for any text: what comes out is one line where it must be,
holds nothing the format cannot carry, parses back with a real parser, and starts no GitHub
workflow command."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostiletext import ANY_TEXT, RAW_CONTROL, runner_lines, starts_workflow_command
from webhook.reports.escape import (
    for_github_data,
    for_github_property,
    for_terminal,
    for_terminal_lines,
    for_xml,
    for_yaml_comment,
    terminal_text,
)

# No timing in a property: a loaded CI machine must not fail one.
UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@UNTIMED
@given(ANY_TEXT)
def test_a_name_for_the_terminal_is_one_line_of_no_control_and_no_workflow_command(text):
    shown = for_terminal(text)

    assert len(runner_lines(shown)) == 1
    assert not RAW_CONTROL.search(shown)
    assert not re.search("[\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]", shown)
    assert not starts_workflow_command(shown)
    shown.encode()  # no lone surrogate: stdout can write it


@UNTIMED
@given(ANY_TEXT)
def test_escaping_for_the_terminal_twice_changes_nothing_more(text):
    assert for_terminal(for_terminal(text)) == for_terminal(text)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("train-0", "train-0", id="a-plain-name-unchanged"),
        pytest.param("naïve 模型 \U0001f600", "naïve 模型 \U0001f600", id="unicode-unchanged"),
        pytest.param("a\nb", "a\\nb", id="newline-written-as-backslash-n"),
        pytest.param("a\rb\tc", "a\\rb\\tc", id="cr-and-tab"),
        pytest.param("\x1b[31mred", "\\x1b[31mred", id="esc"),
        pytest.param("\x9b2J", "\\x9b2J", id="c1-csi"),
        pytest.param("a\u202eb", "a\\u202eb", id="bidi-override"),
        pytest.param("\ud800", "\\ud800", id="lone-surrogate"),
        pytest.param("::warning ::x", "\\x3a:warning ::x", id="leading-workflow-command"),
        pytest.param("  ::error::x", "  \\x3a:error::x", id="after-white-space"),
        pytest.param("a ::x", "a ::x", id="mid-line-colons-are-no-command"),
        pytest.param("x ##[error]y", "x ##\\x5berror]y", id="legacy-command-anywhere"),
    ],
)
def test_what_the_terminal_shows_of_a_name(text, shown):
    assert for_terminal(text) == shown


@UNTIMED
@given(st.lists(ANY_TEXT, min_size=1, max_size=5))
def test_a_report_keeps_its_own_lines_and_no_more(lines):
    text = terminal_text(lines)

    assert runner_lines(text) == [*map(for_terminal, lines), ""]


@UNTIMED
@given(ANY_TEXT)
def test_several_lines_keep_their_newlines_and_escape_the_rest(text):
    shown = for_terminal_lines(text)

    assert runner_lines(shown) == [for_terminal(line) for line in text.split("\n")]


@UNTIMED
@given(ANY_TEXT, ANY_TEXT)
def test_a_yaml_comment_ends_where_its_writer_ends_it(text, value):
    stream = f"---\n# {for_yaml_comment(text)}\nkey: {yaml.safe_dump(value).strip()}\n"

    assert list(yaml.safe_load_all(stream)) == [{"key": value}]


@UNTIMED
@given(ANY_TEXT)
def test_xml_text_and_attributes_parse_back(text):
    element = ET.Element("case", name=for_xml(text, one_line=True), message=for_xml(text))
    element.text = for_xml(text)

    parsed = ET.fromstring(ET.tostring(element, encoding="unicode"))

    assert parsed.get("name") == for_xml(text, one_line=True)
    assert not re.search("[\x00-\x1f\x7f-\x9f]", parsed.get("name", ""))


@pytest.mark.parametrize("text", ["a", "é \U0001f600 <&>\"'", "tab\tand\nnewline"])
def test_xml_keeps_what_it_can_carry(text):
    assert for_xml(text) == text


def runner_unescape(value: str, *, property: bool) -> str:
    """What the runner reads back (``UnescapeString`` with the toolkit's mappings)."""
    pairs = [("%0D", "\r"), ("%0A", "\n")]
    if property:
        pairs += [("%3A", ":"), ("%2C", ",")]
    for escaped, char in [*pairs, ("%25", "%")]:
        value = value.replace(escaped, char)
    return value


@UNTIMED
@given(ANY_TEXT)
def test_a_workflow_command_message_is_one_line_of_no_control(text):
    line = f"::error file=a.yaml::{for_github_data(text)}"

    assert runner_lines(line) == [line]
    assert not RAW_CONTROL.search(line)
    assert "##[" not in line


PRINTABLE = st.text(st.characters(categories=["L", "N", "P", "S", "Zs"])).filter(
    lambda t: "##[" not in t
)


@UNTIMED
@given(PRINTABLE, st.lists(PRINTABLE, max_size=3))
def test_the_runner_reads_a_printable_message_back_as_it_was_newlines_included(text, more):
    message = "\n".join([text, *more])

    assert runner_unescape(for_github_data(message), property=False) == message


@UNTIMED
@given(ANY_TEXT)
def test_a_workflow_command_property_holds_no_separator(text):
    value = for_github_property(text)

    assert not set(value) & {":", ",", "\r", "\n"}
    assert not RAW_CONTROL.search(value)
    assert runner_unescape(value, property=True) == runner_unescape(
        for_github_data(text), property=False
    )
