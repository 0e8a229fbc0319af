"""Gangs: the count of pods that can run at once, against a brute-force placement.

The reference tries every assignment of the gang's pods to the cluster's nodes (each pod
on one node, a node's allocatable never exceeded in any entry of the vector, a pod only on
nodes it can land on) and says whether one places them all. For identical pods the engine
must agree exactly; for mixed templates a proof ("cannot fit") must never be wrong, and a
silence ("fits") must be true.
"""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.kube.workloads import KindTable
from webhook.engine.resources.fit import Demand, pods_per_node
from webhook.engine.resources.gpufacts import GPUFacts
from webhook.engine.resources.inventory import FitAnswer, Inventory, Node, Placement
from webhook.engine.scheduling.gangs import Gang, Member, capacity, gang_findings, gangs_of, judge

GPU = "nvidia.com/gpu"
GI = 1024**3


def _node(name: str, gpus: int, cpu: int, zone: str = "a") -> Node:
    allocatable = {"cpu": cpu * 1000, "memory": 64 * GI}
    if gpus:
        allocatable[GPU] = gpus
    return Node(name=name, labels={"zone": zone}, allocatable=allocatable)


def _fit(inventory: Inventory, gpus: int, cpu: int, zone: str | None = None) -> FitAnswer:
    placement = Placement.of({"nodeSelector": {"zone": zone}} if zone else {})
    return inventory.fit(placement, Demand(((GPU, gpus),), cpu * 1000, GI, ((GPU, gpus),)))


def _fits_by_search(nodes: list[Node], pods: list[tuple[Demand, str | None]]) -> bool:
    """Every assignment of pods to nodes, tried one by one."""
    for assignment in product(range(len(nodes)), repeat=len(pods)):
        used: dict[int, dict[str, int]] = {}
        ok = True
        for (demand, zone), index in zip(pods, assignment, strict=True):
            node = nodes[index]
            if zone is not None and node.labels.get("zone") != zone:
                ok = False
                break
            left = used.setdefault(index, dict(node.allocatable))
            for name, need in (*demand.gpus, ("cpu", demand.cpu), ("memory", demand.memory)):
                if need and left.get(name, 0) < need:
                    ok = False
                left[name] = left.get(name, 0) - need
            if not ok:
                break
        if ok:
            return True
    return False


clusters = st.lists(
    st.tuples(st.integers(0, 8), st.integers(1, 16), st.sampled_from("ab")),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    cluster=clusters,
    gpus=st.integers(1, 8),
    cpu=st.integers(1, 8),
    count=st.integers(1, 5),
    zone=st.sampled_from([None, "a"]),
)
def test_identical_pods_fit_exactly_when_a_search_places_them(
    cluster: list[tuple[int, int, str]], gpus: int, cpu: int, count: int, zone: str | None
) -> None:
    nodes = [_node(f"n{i}", g, c, z) for i, (g, c, z) in enumerate(cluster)]
    inventory = Inventory(nodes)
    fit = _fit(inventory, gpus, cpu, zone)
    verdict = judge(Gang("test", (Member("worker", count, fit),)))
    if not fit.fitting:  # no node takes one pod: the pod's capacity check says so, not gangFit
        assert verdict is None
        return
    assert (verdict is None) == _fits_by_search(nodes, [(fit.demand, zone)] * count)
    if verdict is not None:
        assert verdict.proven
        assert verdict.at_once < count


@settings(max_examples=300, deadline=None)
@given(
    cluster=clusters,
    first=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 3)),
    second=st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 3)),
    zone=st.sampled_from([None, "a", "b"]),
)
def test_mixed_pods_are_denied_only_on_proof_and_passed_only_when_placed(
    cluster: list[tuple[int, int, str]],
    first: tuple[int, int, int],
    second: tuple[int, int, int],
    zone: str | None,
) -> None:
    nodes = [_node(f"n{i}", g, c, z) for i, (g, c, z) in enumerate(cluster)]
    inventory = Inventory(nodes)
    master = _fit(inventory, first[0], first[1])
    worker = _fit(inventory, second[0], second[1], zone)
    gang = Gang("test", (Member("master", first[2], master), Member("worker", second[2], worker)))
    pods = [(master.demand, None)] * first[2] + [(worker.demand, zone)] * second[2]
    feasible = _fits_by_search(nodes, pods)
    verdict = judge(gang)
    if verdict is None and master.fitting and worker.fitting:
        assert feasible, "passed a gang no placement runs"
    elif verdict is not None and verdict.proven:
        assert not feasible, f"denied a gang that fits: {verdict.reason}"


def test_pods_per_node_is_the_least_over_the_vector() -> None:
    demand = Demand(((GPU, 2),), 4000, 8 * GI, ((GPU, 2),))
    allocatable = {GPU: 8, "cpu": 10_000, "memory": 64 * GI}
    assert pods_per_node(allocatable, GPUFacts(), demand) == 2  # cpu: 10 // 4
    assert pods_per_node({GPU: 1}, GPUFacts(), demand) == 0  # does not fit at all


def _training_job(workers: int, gpus: int) -> dict[str, object]:
    def spec(replicas: int) -> dict[str, object]:
        return {
            "replicas": replicas,
            "template": {
                "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {GPU: gpus}}}]}
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {"pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(workers - 1)}},
    }


ISSUE_CLUSTER = [_node(f"big{i}", 8, 64) for i in range(2)] + [
    _node(f"small{i}", 4, 64) for i in range(4)
]


@pytest.mark.parametrize(
    ("workers", "gpus", "denied"),
    [
        pytest.param(3, 8, True, id="three-workers-of-eight-on-two-eight-gpu-nodes-never-start"),
        pytest.param(2, 8, False, id="two-workers-of-eight-just-fit"),
        pytest.param(4, 4, False, id="four-workers-of-four-fit-the-small-nodes"),
        pytest.param(8, 4, False, id="eight-workers-of-four-fill-every-slot"),
        pytest.param(9, 4, True, id="nine-workers-of-four-are-one-too-many"),
        pytest.param(9, 5, True, id="nine-workers-of-five-fit-only-one-per-node"),
    ],
)
def test_a_training_job_is_a_gang_of_all_its_replicas(
    workers: int, gpus: int, denied: bool
) -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    job = _training_job(workers, gpus)
    templates = KindTable().templates(job) or []
    fits = [(t, _fit(inventory, gpus, 0)) for t in templates]
    findings = gang_findings(job, fits, action="deny")
    assert [f.action for f in findings] == (["deny"] if denied else [])
    if denied:
        assert "pods must run at once" in findings[0].message


def test_the_issue_example_says_how_many_run_at_once() -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    job = _training_job(3, 8)
    templates = KindTable().templates(job) or []
    (finding,) = gang_findings(job, [(t, _fit(inventory, 8, 0)) for t in templates], action="deny")
    assert "at most 2 of its 3" in finding.message
    assert "the largest group that fits at once is 2 pods" in finding.message


def test_capacity_counts_a_pool_as_its_maximum_nodes() -> None:
    pool = Node(name="nodepool/big", allocatable={GPU: 8}, pool="big", count=3)
    fit = _fit(Inventory([pool]), 8, 0)
    assert capacity(fit) == 3


def test_a_leaderworkerset_gang_is_one_group_not_all_groups() -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    container = {"name": "vllm", "resources": {"limits": {GPU: 8}}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "spec": {
            "replicas": 5,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [container]}},
            },
        },
    }
    templates = KindTable().templates(lws) or []
    fits = [(t, _fit(inventory, 8, 0)) for t in templates]
    (gang,) = gangs_of(lws, fits)
    assert gang.size == 2
    assert judge(gang) is None


def test_a_ray_worker_group_with_hosts_is_a_gang_per_replica() -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    container = {"name": "ray", "resources": {"limits": {GPU: 8}}}
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "tpu",
                    "replicas": 4,
                    "numOfHosts": 3,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }
    templates = [t for t in KindTable().templates(ray) or [] if t.replicas]
    fits = [(t, _fit(inventory, 8, 0)) for t in templates]
    (finding,) = gang_findings(ray, fits, action="deny")
    assert finding.action == "deny"
    assert "Ray worker group tpu" in finding.message


def test_a_volcano_min_available_below_the_total_needs_only_that_many() -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    container = {"name": "w", "resources": {"limits": {GPU: 8}}}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "spec": {
            "minAvailable": 2,
            "tasks": [
                {"name": "w", "replicas": 3, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }
    templates = KindTable().templates(job) or []
    fits = [(t, _fit(inventory, 8, 0)) for t in templates]
    assert gang_findings(job, fits, action="deny") == []
    job["spec"]["minAvailable"] = 3  # type: ignore[index]
    assert [f.action for f in gang_findings(job, fits, action="deny")] == ["deny"]


def test_a_pod_group_of_unknown_size_is_only_warned_about() -> None:
    inventory = Inventory(ISSUE_CLUSTER)
    container = {"name": "w", "resources": {"limits": {GPU: 8}}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": {"kueue.x-k8s.io/pod-group-name": "train"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"},
        },
        "spec": {"containers": [container]},
    }
    templates = KindTable().templates(pod) or []
    fits = [(t, _fit(inventory, 8, 0)) for t in templates]
    (finding,) = gang_findings(pod, fits, action="deny")
    assert finding.action == "warn"
    assert "Kueue pod group train" in finding.message
