"""``gpu-webhook rules lint --kubeconfig`` warns about exempted namespaces that do not exist
(issue 41), against a loopback server replaying the API server's namespace list; patterns
are warned about with no cluster at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import RULES
from tests.cluster.replayserver import Body, ReplayServer, fixture, status_body
from tests.running import kubeconfig
from webhook.cli import main

# The shipped rules/05-gpu-stack-exempt.yaml names these; the recorded cluster has only
# kube-system of them.
ABSENT = ["gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu", "nvidia-gpu-operator"]


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


def test_lint_with_a_cluster_names_each_exempted_namespace_that_does_not_exist(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))

    code = main(["rules", "lint", str(RULES), "--kubeconfig", kubeconfig(tmp_path, server.url)])

    err = capsys.readouterr().err
    assert code == 0
    said = [line for line in err.splitlines() if "which does not exist" in line]
    assert [line.split("exempts namespace ")[1].split(",")[0] for line in said] == ABSENT
    assert all(line.startswith("warning: ") and "05-gpu-stack-exempt.yaml" in line for line in said)
    assert "kube-system, which" not in err
    # One read of the cluster serves both: its nodes (the rules' values, issue 42) and its
    # namespaces (the exemptions).
    assert "/api/v1/namespaces" in [r.path for r in server.list_requests()]


def test_lint_without_a_cluster_does_not_check_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "lint", str(RULES)]) == 0
    assert "does not exist" not in capsys.readouterr().err


def test_a_cluster_that_refuses_the_list_exits_2_in_one_line(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(
        Body(status_body(403, "Forbidden", "namespaces is forbidden"), status=403)
    )
    code = main(["rules", "lint", str(RULES), "--kubeconfig", kubeconfig(tmp_path, server.url)])
    err = capsys.readouterr().err
    assert code == 2
    assert "cannot read the cluster's nodes and namespaces" in err
    assert len(err.strip().splitlines()) == 1


def test_an_exemption_by_pattern_is_warned_about_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "exempt.yaml").write_text(
        "apiVersion: gpu-webhook.io/v1alpha1\nkind: GPUPolicy\nmetadata: {name: stack}\n"
        "spec:\n  match: {namespaces: ['nvidia-*']}\n  exempt: [hideGPUs]\n"
    )
    assert main(["rules", "lint", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "rule stack exempts every namespace whose name matches 'nvidia-*'" in err
