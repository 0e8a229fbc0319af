"""``gpu-webhook check --kubeconfig``: the cluster's live nodes and namespace labels, read
once from a loopback server replaying the API server's recorded answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.builders import pod
from tests.cluster.replayserver import Body, ReplayServer, fixture
from tests.cluster.ruleobjects import gpu_policy, rule_object, serve_policies, serve_rule_objects
from tests.running import kubeconfig
from webhook.cli import main

RULES = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata: {name: default-namespace-small}
spec:
  match:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: default}
  validate:
  - maxGPUsPerPod: 1
    action: deny
"""


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    replay = ReplayServer().start()
    yield replay
    replay.stop()


def _inputs(tmp_path: Path) -> tuple[str, str]:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rules.yaml").write_text(RULES)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod(gpus=2)))
    return str(rules), str(manifest)


def test_the_live_nodes_and_namespace_labels_are_used(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    rules, manifest = _inputs(tmp_path)
    config = kubeconfig(tmp_path, server.url)
    code = main(["check", "-f", manifest, "--rules", rules, "--kubeconfig", config, "-o", "json"])
    (result,) = json.loads(capsys.readouterr().out)
    assert code == 1
    fired = {f["rule"] + "/" + f["check"] for f in result["findings"]}
    # The namespace label came from the cluster; capacity from its nodes (all GPU nodes
    # are tainted and these rules add no toleration).
    assert fired == {"default-namespace-small/maxGPUsPerPod", "builtin/capacity"}
    assert result["notices"] == []
    assert [r.path for r in server.list_requests()] == ["/api/v1/nodes", "/api/v1/namespaces"]


def test_a_cluster_that_refuses_exits_2_with_its_message(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.lists.append(Body(fixture("list-403.json"), 403))
    rules, manifest = _inputs(tmp_path)
    config = kubeconfig(tmp_path, server.url)
    assert main(["check", "-f", manifest, "--rules", rules, "--kubeconfig", config]) == 2
    err = capsys.readouterr().err
    assert "cannot read the cluster's nodes and namespaces" in err
    assert 'cannot list resource "nodes"' in err


def test_inventory_and_kubeconfig_are_one_or_the_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules, manifest = _inputs(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["check", "-f", manifest, "--rules", rules, "--kubeconfig", "k", "--inventory", "i"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_clusters_rule_objects_judge_with_the_files(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the server merges them (issue 33): an object in force fires; a broken one is a
    notice, not a failure of the command."""
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    serve_policies(
        server,
        [
            gpu_policy("cluster-one-gpu", {"validate": [{"maxGPUsPerPod": 1}]}),
            gpu_policy("cluster-typo", {"validate": [{"maxGPUsPerPd": 1}]}),
        ],
        [],
    )
    rules, manifest = _inputs(tmp_path)
    config = kubeconfig(tmp_path, server.url)
    code = main(["check", "-f", manifest, "--rules", rules, "--kubeconfig", config, "-o", "json"])
    out, err = capsys.readouterr()
    (result,) = json.loads(out)
    assert code == 1
    fired = {f["rule"] + "/" + f["check"] for f in result["findings"]}
    assert "cluster-one-gpu/maxGPUsPerPod" in fired
    assert (
        'notice: GPUPolicy cluster-typo (cluster object): spec.validate[0]: unknown check "maxGPUsPerPd"'
        in err
    )


SETTINGS_ALLOWING_DEFAULT = """
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUSettings
metadata: {name: settings}
spec:
  exceptionNamespaces: [default]
"""


def test_a_namespace_policy_and_an_exception_of_the_cluster_judge_as_at_admission(
    tmp_path: Path, server: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44: the finding names the namespace policy (namespace/name), a widening one is
    a notice, and the exception that waived a finding is named with what it waived."""
    server.lists.append(Body(fixture("node-list.json")))
    server.namespace_lists.append(Body(fixture("namespace-list.json")))
    one_gpu = {"validate": [{"maxGPUsPerPod": 1}]}
    serve_rule_objects(
        server,
        {
            "GPUNamespacePolicy": [
                rule_object("GPUNamespacePolicy", "one-gpu", one_gpu, namespace="default"),
                rule_object(
                    "GPUNamespacePolicy", "wide", {"exempt": ["hideGPUs"]}, namespace="default"
                ),
            ],
            "GPUPolicyException": [
                rule_object(
                    "GPUPolicyException",
                    "let-q",
                    {"checks": ["*/maxGPUsPerPod"], "workloads": {"names": ["q"]}},
                    namespace="default",
                )
            ],
        },
        {},
    )
    rules, _ = _inputs(tmp_path)
    (Path(rules) / "settings.yaml").write_text(SETTINGS_ALLOWING_DEFAULT)
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all([pod(gpus=2, name="p"), pod(gpus=2, name="q")]))
    config = kubeconfig(tmp_path, server.url)

    code = main(
        ["check", "-f", str(manifest), "--rules", rules, "--kubeconfig", config, "-o", "json"]
    )

    out, err = capsys.readouterr()
    p, q = json.loads(out)
    assert code == 1
    fired = {f["rule"] + "/" + f["check"] for f in p["findings"]}
    assert {"default-namespace-small/maxGPUsPerPod", "default/one-gpu/maxGPUsPerPod"} <= fired
    assert not any(f["check"] == "maxGPUsPerPod" for f in q["findings"]), q
    assert [(w["exception"], w["rule"]) for w in q["waived"]] == [
        ("default/let-q", "default-namespace-small"),
        ("default/let-q", "default/one-gpu"),
    ]
    assert (
        "notice: GPUNamespacePolicy default/wide (cluster object): spec.exempt: a GPUNamespacePolicy cannot exempt checks"
        in err
    )
