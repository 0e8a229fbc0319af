"""``rules lint --inventory`` and ``--kubeconfig`` check the rules' values against the
cluster (issue 42): each golden case's sentence (``tests/cases/_policyvalues``), by rule
and file, as serve logs it and ``/validate`` warns it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.replayserver import Body, ReplayServer, fixture
from tests.policyvalues import Case, golden_cases
from tests.running import kubeconfig
from webhook.cli import main

FILE_CASES = [pytest.param(c, id=c.name) for c in golden_cases() if c.namespaces is None]
(NAMESPACE_CASE,) = [c for c in golden_cases() if c.namespaces is not None]


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


def namespace_list(names: tuple[str, ...]) -> bytes:
    """The recorded namespace list, holding these namespaces instead."""
    recorded = json.loads(fixture("namespace-list.json"))
    template = recorded["items"][0]
    recorded["items"] = [
        {**template, "metadata": {**template["metadata"], "name": name, "labels": {}}}
        for name in names
    ]
    return json.dumps(recorded).encode()


def warning_of(case: Case) -> str:
    path = case.directory / "rules" / "policy.yaml"
    return f"warning: rule {case.policy_name} ({path}): {case.says}"


@pytest.mark.parametrize("case", FILE_CASES)
def test_lint_with_an_inventory_warns_of_the_typo_with_the_golden_sentence(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["rules", "lint", str(case.directory / "rules"), "--inventory", str(case.inventory)]
    )

    out, err = capsys.readouterr()
    assert code == 0, err  # a warning: the rule is valid, the cluster lacks its value
    assert warning_of(case) in err.splitlines()
    assert out.strip().endswith("no problems, 1 warning")


def test_lint_with_an_inventory_says_namespaces_were_not_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = NAMESPACE_CASE
    code = main(
        ["rules", "lint", str(case.directory / "rules"), "--inventory", str(case.inventory)]
    )

    _, err = capsys.readouterr()
    assert code == 0
    assert err.splitlines() == [
        "notice: rule values not checked against the cluster: namespaces (known only from a "
        "live cluster: --kubeconfig)"
    ]


def test_lint_with_a_kubeconfig_checks_namespaces_against_the_live_cluster(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    case = NAMESPACE_CASE
    assert case.namespaces is not None
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(namespace_list(case.namespaces)))
    config = kubeconfig(tmp_path, server.url)

    code = main(["rules", "lint", str(case.directory / "rules"), "--kubeconfig", config])

    _, err = capsys.readouterr()
    assert code == 0, err
    assert warning_of(case) in err.splitlines()


def test_lint_with_a_cluster_that_refuses_exits_2(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("list-403.json"), 403))
    config = kubeconfig(tmp_path, server.url)

    code = main(["rules", "lint", str(NAMESPACE_CASE.directory / "rules"), "--kubeconfig", config])

    assert code == 2
    assert "cannot read the cluster's nodes and namespaces" in capsys.readouterr().err


def test_the_shipped_rules_have_no_finding_on_the_example_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = Path(__file__).resolve().parents[2]
    code = main(
        [
            "rules",
            "lint",
            str(root / "rules"),
            "--inventory",
            str(root / "examples" / "inventory.yaml"),
        ]
    )

    _, err = capsys.readouterr()
    assert code == 0
    assert not [line for line in err.splitlines() if line.startswith("warning:")], err
