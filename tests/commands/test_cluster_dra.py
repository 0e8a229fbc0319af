"""``check``, ``explain`` and ``audit`` against a cluster read what the server reads: nodes,
the DRA objects (with DeviceTaintRules where served) and RuntimeClasses, not only nodes.

The loopback server answers with the objects of ``tests/cases/_inventories/dra-mixed.yaml``
(NVIDIA's DRA driver beside its device plugin, Kubernetes 1.36) as the API server lists them.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import deployment, pod
from tests.cluster.replayserver import Body, ReplayServer, fixture
from tests.running import kubeconfig
from webhook.cli import main

INVENTORY = Path(__file__).parents[1] / "cases" / "_inventories" / "dra-mixed.yaml"
TAINT_RULES = "/apis/resource.k8s.io/v1beta2"
RESOURCES = {
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}


def _list(kind: str, items: list[Mapping[str, Any]]) -> Body:
    # Items of a list carry no apiVersion and kind; the list does.
    bare = [{k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in items]
    body = {"kind": f"{kind}List", "metadata": {"resourceVersion": "7"}, "items": bare}
    return Body(json.dumps(body).encode())


@pytest.fixture
def cluster() -> Iterator[ReplayServer]:
    items = yaml.safe_load(INVENTORY.read_text())["items"]
    replay = ReplayServer()
    replay.lists.append(_list("Node", [i for i in items if i["kind"] == "Node"]))
    replay.namespace_lists.append(Body(fixture("namespace-list.json")))
    replay.dra_served = True
    for kind, resource in RESOURCES.items():
        replay.dra_lists[resource] = _queue(_list(kind, [i for i in items if i["kind"] == kind]))
    discovery = {"kind": "APIResourceList", "resources": [{"name": "devicetaintrules"}]}
    replay.routes[TAINT_RULES] = _queue(Body(json.dumps(discovery).encode()))
    rules = [i for i in items if i["kind"] == "DeviceTaintRule"]
    replay.routes[f"{TAINT_RULES}/devicetaintrules"] = _queue(_list("DeviceTaintRule", rules))
    replay.start()
    yield replay
    replay.stop()


def _queue(body: Body) -> deque[Body]:
    return deque([body])


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)


def _check(
    tmp_path: Path, cluster: ReplayServer, obj: Any, capsys: pytest.CaptureFixture[str]
) -> tuple[int, Any]:
    """``check -f`` of one object against the replayed cluster: the exit code and its result."""
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(obj))
    config = kubeconfig(tmp_path, cluster.url)
    code, (result,) = _run(
        ["check", "-f", str(manifest), "--kubeconfig", config, "-o", "json"], capsys
    )
    return code, result


def test_check_sees_gpus_that_a_device_class_serves_on_nodes_without_them(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    four = pod(gpus=4)
    four["spec"]["nodeSelector"] = {"pool": "dra"}

    code, result = _check(tmp_path, cluster, four, capsys)

    assert code == 0, result["messages"]
    assert result["allowed"] is True
    paths = {r.path for r in cluster.requests}
    assert {
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/node.k8s.io/v1/runtimeclasses",
    } <= paths
    assert f"{TAINT_RULES}/devicetaintrules" in paths


def test_check_denies_what_neither_the_plugin_nor_the_class_can_hold_on_one_node(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:

    code, result = _check(tmp_path, cluster, pod(gpus=10), capsys)

    assert code == 1
    (message,) = result["messages"]
    assert "8 allocatable on node gpu-plugin-0 (its device plugin)" in message
    assert "4 via DeviceClass gpu.nvidia.com on node dra-h100-0" in message


def test_check_sees_the_cluster_s_device_taint_rules(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    four = pod(gpus=4)
    four["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dra-h100-1"}

    code, result = _check(tmp_path, cluster, four, capsys)

    assert code == 1
    assert "tainted gpu.nvidia.com/xid=79:NoSchedule" in result["messages"][0]


def test_audit_judges_workloads_with_the_cluster_s_dra_objects(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    four = pod(gpus=4, name="four")
    four["spec"]["nodeSelector"] = {"pool": "dra"}
    core = {"kind": "APIResourceList", "resources": [{"name": "pods"}]}
    cluster.routes["/api/v1"] = _queue(Body(json.dumps(core).encode()))
    cluster.routes["/api/v1/pods"] = _queue(_list("Pod", [four]))
    config = kubeconfig(tmp_path, cluster.url)

    code, report = _run(["audit", "--kubeconfig", config, "--kinds", "pods", "-o", "json"], capsys)

    assert code == 0, report
    assert report["summary"]["deny"] == 0
    (entry,) = report["results"]
    assert entry["allowed"] is True, entry["findings"]
    assert any(r.path == "/apis/resource.k8s.io/v1/deviceclasses" for r in cluster.requests)


def test_inventory_replays_the_cluster_and_prints_dra_devices_per_node_class(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path, cluster.url)

    code, report = _run(["inventory", "--kubeconfig", config, "-o", "json"], capsys)

    assert code == 0
    assert report["dra"] is True
    by_node = {
        c["example"]: [(d["device_class"], d["per_node"], d["tainted"]) for d in c["dra_devices"]]
        for c in report["classes"]
    }
    assert by_node["dra-h100-0"] == [("gpu.nvidia.com", 4, 0)]
    assert by_node["dra-h100-1"] == [("gpu.nvidia.com", 4, 1)], "the DeviceTaintRule's taint"
    assert by_node["gpu-plugin-0"] == []
    assert report["served"] == [
        {
            "resource": "nvidia.com/gpu",
            "device_class": "gpu.nvidia.com",
            "largest": 4,
            "node": "dra-h100-0",
        }
    ]


def test_inventory_text_names_the_class_and_the_resource_it_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["inventory", "--inventory", str(INVENTORY)]) == 0
    out = capsys.readouterr().out
    section = out.split("DRA devices per node class", 1)[1]
    assert "dra-h100-1    gpu.nvidia.com  4         1        nvidia.com/gpu" in section
    assert "Extended resources served by DRA" in section


def test_explain_names_the_taint_that_keeps_a_node_s_devices_from_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod(gpus=4)))

    code, (explained,) = _run(
        ["explain", "-f", str(manifest), "--inventory", str(INVENTORY), "-o", "json"], capsys
    )

    assert code == 0
    (template,) = explained["templates"]
    assert template["unoffered"] == [], "a device class serves nvidia.com/gpu"
    answers = {c["resources"]: c for c in template["classes"]}
    h100 = answers["gpu.nvidia.com=4 (DRA)"]
    assert (h100["product"], h100["nodes"], h100["fits"]) == ("NVIDIA H100 80GB HBM3", 1, 1)
    tainted = answers["gpu.nvidia.com=4 (DRA, 1 tainted)"]
    assert tainted["verdict"] == (
        "no: 1 cannot allocate all claims (3 of 4 nvidia.com/gpu via DeviceClass "
        "gpu.nvidia.com; 1 more tainted gpu.nvidia.com/xid=79:NoSchedule, not tolerated)"
    )
    assert answers["nvidia.com/gpu=8"]["verdict"] == "fits", "the device plugin's node"


def test_explain_of_a_bound_pod_says_where_the_scheduler_put_it(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Bound by the scheduler through DRA; no kubelet has started it yet.
    bound = pod(gpus=2, name="two")
    bound["spec"]["nodeName"] = "dra-h100-0"
    bound["status"] = {
        "phase": "Pending",
        "extendedResourceClaimStatus": {
            "resourceClaimName": "two-extended-resources-x7k9m",
            "requestMappings": [
                {
                    "containerName": "main",
                    "resourceName": "nvidia.com/gpu",
                    "requestName": "container-0-request-0",
                }
            ],
        },
    }
    cluster.routes["/api/v1/namespaces/default/pods/two"] = _queue(Body(json.dumps(bound).encode()))
    events = {"kind": "EventList", "metadata": {"resourceVersion": "9"}, "items": []}
    cluster.routes["/api/v1/namespaces/default/events"] = _queue(Body(json.dumps(events).encode()))
    cluster.routes["/api/v1/namespaces/default"] = _queue(
        Body(json.dumps({"metadata": {"name": "default", "labels": {}}}).encode())
    )
    config = kubeconfig(tmp_path, cluster.url)

    code = main(["explain", "pod", "two", "-n", "default", "--kubeconfig", config])

    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith(
        "Pod default/two (Pending)\n  bound to node dra-h100-0: the scheduler has placed it"
    )
    assert (
        "  nvidia.com/gpu came from DRA: ResourceClaim two-extended-resources-x7k9m, made by "
        "the scheduler (pod.status.extendedResourceClaimStatus)"
    ) in out
    assert "no node offers nvidia.com/gpu" not in out
    assert "Webhook on create: allowed" in out


def test_explain_names_the_selector_that_leaves_a_node_no_device_for_a_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claimed = pod(gpus=None, name="a100s")
    claimed["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four-a100"}]
    claimed["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(claimed))
    dra = INVENTORY.with_name("dra.yaml")

    code, (explained,) = _run(
        ["explain", "-f", str(manifest), "--inventory", str(dra), "-o", "json"], capsys
    )

    assert code == 0
    answers = {c["product"]: c for c in explained["templates"][0]["classes"]}
    assert answers["NVIDIA A100-SXM4-80GB"]["verdict"] == "fits 2 of 2 nodes"
    assert answers["NVIDIA H100 80GB HBM3"]["verdict"] == (
        "no: 1 cannot allocate all claims (selector \"device.attributes['gpu.nvidia.com']"
        ".productName == 'NVIDIA A100-SXM4-80GB'\" matches no gpu.nvidia.com device here "
        "(8 of them))"
    )


def test_check_sees_a_device_class_in_the_files_it_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVIDIA's MIG example defines its class (extendedResourceName nvidia.com/mig-1g.12gb)
    beside the pod: once applied together, DRA serves the pod, not a device plugin."""
    corpus = Path(__file__).parents[1] / "corpus" / "k8s-dra-driver-gpu" / "mig-1g-12gb.yaml"
    dra = INVENTORY.with_name("dra.yaml")

    code, results = _run(["check", "--inventory", str(dra), "-o", "json", str(corpus)], capsys)

    assert code == 1
    (pod_result,) = [r for r in results if r["kind"] == "Pod"]
    (message,) = pod_result["messages"]
    assert "served by DRA device class mig-1g-12gb.gpu.nvidia.com" in message
    assert "offers no GPU resources" not in message


DCGM = (
    Path(__file__).parents[1] / "cases" / "dra-admin-access-dcgm-exporter-daemonset" / "object.yaml"
)


def test_check_allows_the_dcgm_exporter_whose_admin_access_template_the_cluster_holds(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU operator's DCGM exporter for DRA; its admin-access claim template is one of
    the cluster's (dra-mixed.yaml). Admin access takes no device away: nothing to say."""
    manifest = tmp_path / "dcgm.yaml"
    manifest.write_text(DCGM.read_text())
    config = kubeconfig(tmp_path, cluster.url)

    code, (result,) = _run(
        ["check", "-f", str(manifest), "--kubeconfig", config, "-o", "json"], capsys
    )

    assert code == 0, result["messages"]
    assert result["allowed"] is True
    assert result["messages"] == []
    assert result["findings"] == []


def test_check_counts_a_workloads_gpus_against_the_plugin_and_the_class_together(
    tmp_path: Path, cluster: ReplayServer, capsys: pytest.CaptureFixture[str]
) -> None:
    template = pod(gpus=1)
    template["spec"]["tolerations"] = [{"operator": "Exists"}]
    workload = deployment(template, replicas=30)

    code, result = _check(tmp_path, cluster, workload, capsys)

    (finding,) = [f for f in result["findings"] if f["check"] == "clusterCapacity"]
    # 8 in gpu-plugin-0's allocatable; 4 + 3 untainted (the DeviceTaintRule) + 8 shares of
    # dra-shared-0's one GPU via the class.
    assert (
        "the whole cluster has 23 (8 allocatable on nodes with a device plugin and 15 via"
        in (finding["message"])
    )
    assert (code, result["allowed"]) == (0, True)
