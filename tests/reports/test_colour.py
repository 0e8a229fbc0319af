"""Colour only for a person at a terminal who has not asked for none."""

from __future__ import annotations

import io

import pytest

from webhook.reports.colour import Paint
from webhook.reports.wording import counted


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "environ", "coloured"),
    [
        pytest.param(_Terminal(), {}, True, id="terminal"),
        pytest.param(_Terminal(), {"NO_COLOR": "1"}, False, id="NO_COLOR"),
        pytest.param(_Terminal(), {"NO_COLOR": ""}, True, id="empty-NO_COLOR-is-unset"),
        pytest.param(_Terminal(), {"TERM": "dumb"}, False, id="dumb-terminal"),
        pytest.param(io.StringIO(), {}, False, id="pipe-or-file"),
    ],
)
def test_paint_colours_only_a_terminal_without_no_color(
    stream: io.StringIO, environ: dict[str, str], coloured: bool
) -> None:
    paint = Paint.for_stream(stream, environ)
    assert (paint("red", "DENIED") == "\033[31mDENIED\033[0m") is coloured
    assert paint("red", "") == ""


@pytest.mark.parametrize(
    ("number", "said"),
    [
        pytest.param(0, "0 nodes", id="none"),
        pytest.param(1, "1 node", id="one"),
        pytest.param(2, "2 nodes", id="two"),
    ],
)
def test_counts_agree_with_their_noun(number: int, said: str) -> None:
    assert counted(number, "node") == said
