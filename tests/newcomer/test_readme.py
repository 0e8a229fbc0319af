"""The README's quick start, as ``tests/newcomer/walkthrough.py`` (run by ``.ci/run``) reads it."""

from __future__ import annotations

from tests.builders import ROOT
from tests.newcomer.walkthrough import quick_start_commands


def test_the_quick_start_is_exactly_the_two_commands_ci_walks_through() -> None:
    readme = (ROOT / "README.md").read_text()
    assert quick_start_commands(readme) == ["./scripts/serve", "./scripts/test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--serve ./scripts/serve --test ./scripts/test" in ci


def test_the_quick_start_says_serve_keeps_running_and_tests_go_in_a_second_terminal() -> None:
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ")[0]
    flat = " ".join(section.split())
    assert "keeps running" in flat
    assert "second terminal" in flat
    assert "pip's progress shown" in flat
