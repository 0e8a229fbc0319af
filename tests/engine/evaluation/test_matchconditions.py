"""The webhooks' match conditions skip only what the webhook would let through untouched.

The property, for every golden case, every corpus manifest and generated pods (plain,
GPU, adversarial and oversized): the conditions evaluate to a bool (never an error, which
``failurePolicy: Ignore`` would turn into a skip), and where they are false the engine
allows the object with no patch and no warning. The conditions that rest on tainted GPU
nodes are held to it wherever the inventory keeps that promise (``gpu_nodes_tainted``).
CEL runs in celpy, which has no cost model: the cost is bounded by the module's own
estimate, held under the API server's limits here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.evaluation.test_cases import (
    case_dirs,
    case_policy,
    inventory_view,
    load_request,
    rules_dir,
)
from tests.rulesets import TEAM_SHM
from tests.rulesets import rules_dir as shipped_rules_with
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.matchconditions import (
    BUDGET,
    MAX_CONDITIONS,
    MUTATING,
    PER_CALL_LIMIT,
    VALIDATING,
    gpu_nodes_tainted,
    match_conditions,
)
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView, Request
from webhook.engine.policy.ruleset import Policy
from webhook.files.inventoryfile import load_inventory
from webhook.files.rulefiles import load_policy

REPO = Path(__file__).resolve().parents[3]
SHIPPED = load_policy(str(REPO / "rules"))
CLUSTER = InventoryView(load_inventory(str(REPO / "tests/cases/_inventories/cluster.yaml")))
PODS_ONLY = {MUTATING}


_COMPILED: dict[tuple[int, bool], tuple[Policy, dict[str, list[Any]]]] = {}


def _programs(policy: Policy, tainted: bool) -> dict[str, list[Any]]:
    # By identity (a Policy is not hashable); the policy is kept so its id stays its own.
    known = _COMPILED.get((id(policy), tainted))
    if known is not None and known[0] is policy:
        return known[1]
    env = celpy.Environment()
    programs = {
        webhook: [env.program(env.compile(c.expression)) for c in conditions]
        for webhook, conditions in match_conditions(policy, tainted_gpu_nodes=tainted).items()
    }
    _COMPILED[(id(policy), tainted)] = (policy, programs)
    return programs


def _group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0], str(obj.get("kind", ""))


def _request(request: Request, obj: Mapping[str, Any] | None) -> dict[str, Any]:
    group, kind = _group_kind(obj or request.old_object or {})
    return {
        "kind": {"group": group, "version": "v1", "kind": kind},
        "subResource": request.sub_resource,
        "namespace": request.namespace,
        "operation": request.operation,
    }


INT64 = 2**63


def as_decoded(value: Any) -> Any:
    """``value`` as the API server hands it to CEL: a typed object has no nulls (an absent
    optional field is left out), and no integer wider than 64 bits reaches it."""
    if isinstance(value, dict):
        return {k: as_decoded(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_decoded(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        return float(value)
    return value


def conditions_hold(policy: Policy, webhook: str, request: Request, *, tainted: bool) -> bool:
    """Whether the API server would call ``webhook``; an error fails the test."""
    obj = request.object if request.operation != "DELETE" else None
    activation = {
        "object": celpy.json_to_cel(as_decoded(obj)),
        "oldObject": celpy.json_to_cel(as_decoded(request.old_object)),
        "request": celpy.json_to_cel(_request(request, obj)),
    }
    results = [p.evaluate(activation) for p in _programs(policy, tainted)[webhook]]
    for result in results:
        assert isinstance(result, celpy.celtypes.BoolType), f"not a bool: {result!r}"
    return all(bool(r) for r in results)


def _registered(webhook: str, request: Request) -> bool:
    if webhook in PODS_ONLY:
        return _group_kind(request.object) == ("", "Pod")
    return True


def assert_no_bypass(policy: Policy, view: InventoryView, request: Request) -> None:
    tainted_options = [False, True] if gpu_nodes_tainted(policy, view) else [False]
    for webhook in (MUTATING, VALIDATING):
        if not _registered(webhook, request):
            continue
        for tainted in tainted_options:
            if conditions_hold(policy, webhook, request, tainted=tainted):
                continue
            decision = evaluate(copy.deepcopy(request), policy=policy, inventory=view)
            said = (decision.allowed, decision.patch, decision.warnings)
            assert said == (True, (), ()), (webhook, tainted, decision.findings)


# --- the API server's limits ---------------------------------------------------------------


@pytest.mark.parametrize("tainted", [False, True], ids=["untainted", "tainted"])
def test_conditions_stay_within_the_api_servers_limits(tainted: bool) -> None:
    for conditions in match_conditions(SHIPPED, tainted_gpu_nodes=tainted).values():
        assert len(conditions) <= MAX_CONDITIONS
        assert all(c.cost <= PER_CALL_LIMIT for c in conditions)
        assert sum(c.cost for c in conditions) <= BUDGET


# --- golden cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", case_dirs(), ids=lambda p: p.name)
def test_a_golden_case_is_skipped_only_when_untouched(case: Path) -> None:
    obj = yaml.safe_load((case / "object.yaml").read_text(encoding="utf-8"))
    request = load_request(case, obj)
    assert_no_bypass(case_policy(rules_dir(case)), inventory_view(case), request)


# --- the corpus -----------------------------------------------------------------------------


def _corpus() -> Iterator[Any]:
    for path in sorted((REPO / "tests/corpus").rglob("*.yaml")):
        if "_unparseable" in path.parts:
            continue
        for number, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(doc, dict) and "kind" in doc:
                rel = path.relative_to(REPO / "tests/corpus")
                yield pytest.param(doc, id=f"{rel}#{number}")


@pytest.mark.parametrize("obj", list(_corpus()))
@pytest.mark.parametrize("view", [NO_INVENTORY, CLUSTER], ids=["no-inventory", "cluster"])
def test_a_corpus_manifest_is_skipped_only_when_untouched(
    obj: dict[str, Any], view: InventoryView
) -> None:
    request = Request(json.loads(json.dumps(obj)), namespace="default", operation="CREATE")
    assert_no_bypass(SHIPPED, view, request)


# --- generated pods -------------------------------------------------------------------------

RESOURCE_NAMES = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "hugepages-2Mi",
    "nvidia.com/gpu",
    "nvidia.com/gpus",
    "amd.com/gpu",
    "example.com/fpga",
    "nvidia.com/mig-1g.10gb",
]
ENV_NAMES = ["PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_VISIBLE_DEVICES"]
TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
    {"key": "dedicated", "operator": "Equal", "value": "web"},
]
VOLUMES = [
    {"name": "v", "emptyDir": {}},
    {"name": "v", "hostPath": {"path": "/dev/nvidia0"}},
    {"name": "v", "hostPath": {"path": "/dev/null"}},
    {"name": "v", "configMap": {"name": "c"}},
]


@st.composite
def containers(draw: st.DrawFn, name: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": draw(st.sampled_from(["nginx", "cuda:12"]))}
    names = draw(st.lists(st.sampled_from(RESOURCE_NAMES), max_size=3, unique=True))
    if names:
        body["resources"] = {"limits": dict.fromkeys(names, "1")}
    env = draw(st.lists(st.sampled_from(ENV_NAMES), max_size=2))
    if env:
        body["env"] = [
            {"name": n, "value": draw(st.sampled_from(["all", "void", "0"]))} for n in env
        ]
    if draw(st.integers(0, 5)) == 0:
        body["securityContext"] = {"privileged": True}
    if draw(st.integers(0, 3)) == 0:
        body["volumeMounts"] = [
            {
                "name": "v",
                "mountPath": draw(
                    st.sampled_from(["/data", "/var/run/nvidia-container-devices/all"])
                ),
            }
        ]
    if draw(st.integers(0, 9)) == 0:
        body["envFrom"] = [{"configMapRef": {"name": "env"}}]
    return body


@st.composite
def plain_pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [draw(containers(f"c{i}")) for i in range(draw(st.integers(1, 3)))]
    }
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = [draw(containers("init"))]
    tolerations = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=3))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 3)) == 0:
        spec["volumes"] = [draw(st.sampled_from(VOLUMES))]
    if draw(st.integers(0, 5)) == 0:
        spec["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    if draw(st.integers(0, 5)) == 0:
        spec["runtimeClassName"] = draw(st.sampled_from(["nvidia", "runc", "gvisor"]))
    if draw(st.integers(0, 7)) == 0:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    kind = draw(st.sampled_from(["Pod", "Deployment", "Job"]))
    if kind == "Pod":
        return pod
    group = "apps/v1" if kind == "Deployment" else "batch/v1"
    template = {"metadata": {"labels": {"app": "p"}}, "spec": spec}
    return {
        "apiVersion": group,
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": {"template": template},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=plain_pods(), namespace=st.sampled_from(["default", "kube-system", "team-a"]))
def test_a_generated_pod_is_skipped_only_when_untouched(
    obj: dict[str, Any], namespace: str
) -> None:
    for view in (NO_INVENTORY, CLUSTER):
        request = Request(obj, namespace=namespace, operation="CREATE")
        assert_no_bypass(SHIPPED, view, request)


# --- adversarial and oversized objects, every registered subresource ------------------------


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


LONG = "n" * 300_000
MANY = 600  # past every bound (128 at most), which is what the conditions look at
ADVERSARIAL = [
    pytest.param(_pod({"containers": [{"name": f"c{i}"} for i in range(MANY)]}), id="containers"),
    pytest.param(
        _pod({"containers": [{"name": "c", "env": [{"name": "A"}] * MANY}]}), id="env-entries"
    ),
    pytest.param(
        _pod({"containers": [{"name": "c", "env": [{"name": LONG}]}]}), id="env-name-300k"
    ),
    pytest.param(
        _pod({"containers": [{"name": "c", "resources": {"limits": {LONG: "1"}}}]}),
        id="resource-name-300k",
    ),
    pytest.param(
        _pod(
            {
                "containers": [
                    {"name": "c", "resources": {"requests": {f"r{i}": "1" for i in range(MANY)}}}
                ]
            }
        ),
        id="resource-names",
    ),
    pytest.param(
        _pod({"containers": [{"name": "c"}], "tolerations": [{"key": LONG}]}),
        id="toleration-key-300k",
    ),
    pytest.param(
        _pod(
            {
                "containers": [{"name": "c"}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready"}] * MANY,
            }
        ),
        id="tolerations",
    ),
    pytest.param(
        _pod({"containers": [{"name": "c"}], "volumes": [{"name": "v"}] * MANY}), id="volumes"
    ),
    pytest.param(_pod({}), id="no-containers"),
    pytest.param({"apiVersion": "v1", "kind": "Pod"}, id="no-spec"),
    pytest.param(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
        id="deployment-without-template",
    ),
    pytest.param(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "spec": {"pytorchReplicaSpecs": "ill-typed"},
        },
        id="custom-kind-ill-typed",
    ),
]


@pytest.mark.parametrize("obj", ADVERSARIAL)
def test_an_oversized_or_odd_object_never_errors_and_is_called_unless_untouched(
    obj: dict[str, Any],
) -> None:
    request = Request(obj, namespace="default", operation="CREATE")
    assert_no_bypass(SHIPPED, NO_INVENTORY, request)
    # Past a bound, the condition calls without a look.
    if len(json.dumps(obj)) > 5_000:
        for webhook in (MUTATING, VALIDATING):
            assert conditions_hold(SHIPPED, webhook, request, tainted=True)


SCALE = {
    "apiVersion": "autoscaling/v1",
    "kind": "Scale",
    "metadata": {"name": "d"},
    "spec": {"replicas": 3},
}
PLAIN = _pod({"containers": [{"name": "web", "image": "nginx"}]})


@pytest.mark.parametrize(
    ("obj", "sub_resource", "operation"),
    [
        pytest.param(SCALE, "scale", "UPDATE", id="scale"),
        pytest.param(PLAIN, "ephemeralcontainers", "UPDATE", id="ephemeralcontainers"),
        pytest.param(PLAIN, "resize", "UPDATE", id="resize"),
        pytest.param(PLAIN, "status", "UPDATE", id="status"),
        pytest.param(PLAIN, "", "DELETE", id="delete-null-object"),
    ],
)
def test_every_subresource_and_a_delete_are_called(
    obj: dict[str, Any], sub_resource: str, operation: str
) -> None:
    request = Request(
        obj, namespace="default", operation=operation, sub_resource=sub_resource, old_object=PLAIN
    )
    for webhook in (MUTATING, VALIDATING):
        for tainted in (False, True):
            assert conditions_hold(SHIPPED, webhook, request, tainted=tainted)


def test_a_plain_web_pod_is_skipped_where_gpu_nodes_are_tainted_and_called_elsewhere() -> None:
    request = Request(PLAIN, namespace="default", operation="CREATE")
    assert not conditions_hold(SHIPPED, MUTATING, request, tainted=True)
    assert conditions_hold(SHIPPED, MUTATING, request, tainted=False)


def test_the_shipped_cluster_inventory_keeps_the_promise_and_an_untainted_gpu_node_breaks_it() -> (
    None
):
    assert gpu_nodes_tainted(SHIPPED, NO_INVENTORY)  # the settings' taints, as without nodes
    untainted = REPO / "tests/cases/hide-gpu-nodes-untainted-inventory"
    assert not gpu_nodes_tainted(case_policy(rules_dir(untainted)), inventory_view(untainted))


# --- rules and settings that change what is called ----------------------------------------


def _policy_with(tmp_path: Path, extra: dict[str, Any], name: str) -> Policy:
    import shutil

    shutil.copytree(REPO / "rules", tmp_path, dirs_exist_ok=True)
    (tmp_path / name).write_text(yaml.safe_dump(extra), encoding="utf-8")
    return load_policy(str(tmp_path))


def test_a_rule_acting_on_plain_pods_is_called_in_its_namespace_only(tmp_path: Path) -> None:
    policy = load_policy(str(shipped_rules_with(tmp_path, TEAM_SHM)))
    for namespace, called in (("team-a", True), ("default", False)):
        request = Request(PLAIN, namespace=namespace, operation="CREATE")
        assert conditions_hold(policy, MUTATING, request, tainted=True) is called
        assert_no_bypass(policy, NO_INVENTORY, request)


def test_a_gpu_resource_named_without_a_domain_calls_every_resource_name(tmp_path: Path) -> None:
    settings = yaml.safe_load((REPO / "rules/00-settings.yaml").read_text(encoding="utf-8"))
    settings["spec"]["gpuResources"].append({"name": "hugepages-gpu"})
    policy = _policy_with(tmp_path, settings, "00-settings.yaml")
    pod = _pod({"containers": [{"name": "c", "resources": {"limits": {"hugepages-gpu": "1"}}}]})
    request = Request(pod, namespace="default", operation="CREATE")
    assert conditions_hold(policy, MUTATING, request, tainted=True)
    assert_no_bypass(policy, NO_INVENTORY, request)
