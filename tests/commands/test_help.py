"""Every flag of every command says what it does and what it is when not given."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from tests.running import gpu_webhook
from webhook.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, name: str = "gpu-webhook"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _commands(subparser, f"{name} {sub}")


COMMANDS = dict(_commands(build_parser()))


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(
            a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
        )
    ]


@pytest.mark.parametrize("command", [c for c, p in COMMANDS.items() if _arguments(p)])
def test_every_argument_has_a_description_and_its_default(command: str) -> None:
    undocumented = [
        "/".join(a.option_strings) or a.dest
        for a in _arguments(COMMANDS[command])
        if not a.help
        or a.help == argparse.SUPPRESS
        or not any(w in a.help.lower() for w in ("default", "required"))
    ]
    documented_hidden = [a for a in _arguments(COMMANDS[command]) if a.help == argparse.SUPPRESS]
    assert documented_hidden == []
    assert undocumented == [], f"{command}: say what these do and their default"


def test_serve_help_shows_each_default_and_its_variable() -> None:
    done = gpu_webhook("serve", "--help", env={"COLUMNS": "200"})
    assert done.returncode == 0
    for line in (
        "--port PORT ",
        "--host HOST ",
    ):
        assert line in done.stdout
    assert "(default: 8443; $GPU_WEBHOOK_PORT)" in done.stdout
    assert "(default: 0.0.0.0; $GPU_WEBHOOK_HOST)" in done.stdout
    assert "(default: info; $GPU_WEBHOOK_LOG_LEVEL)" in done.stdout


def test_docs_list_every_serve_flag_with_its_variable() -> None:
    from tests.builders import ROOT
    from webhook.serving.config import ENVIRONMENT

    table = (ROOT / "docs" / "server.md").read_text()
    for name, variable in ENVIRONMENT.items():
        assert f"`{variable}`" in table, variable
        if name != "inventory_failure_mode":
            assert f"`--{name.replace('_', '-')}" in table, name
