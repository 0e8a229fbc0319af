"""UPDATEs and ``pods/ephemeralcontainers`` through the service, on AdmissionReview bodies
the API server sent: each is a recording from tests/fixtures/admission (a ``kubectl label``
UPDATE of a pending pod, a Deployment CREATE), changed only where the scenario needs it.
The ephemeral-container body has the shape kube-apiserver sends since kubernetes PR 101034:
the whole Pod, ``kind`` Pod, ``subResource: ephemeralcontainers``, operation UPDATE."""

import copy
import json
from typing import Any

import pytest

from tests.builders import INVENTORY, decoded_patch, fixture, patched
from tests.rulesets import memory_limit, rules_dir
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService, Outcome
from webhook.files.rulefiles import RuleStore

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
WORKLOAD_MAXIMUM = """\
apiVersion: gpu-webhook.io/v1alpha1
kind: GPUPolicy
metadata:
  name: team-quotas
spec:
  order: 50
  validate:
    - maxGPUsPerWorkload: 16
"""


@pytest.fixture(scope="module")
def service() -> AdmissionService:
    return AdmissionService(
        rules=RuleStore("rules"), inventory=StaticInventorySource(str(INVENTORY))
    )


def answer(service: AdmissionService, body: dict[str, Any], *, mutate: bool) -> Outcome:
    return service.review(parse_review(json.dumps(body)), mutate=mutate)


def label_update() -> dict[str, Any]:
    return copy.deepcopy(fixture("pod-update-label-validate-Pod-UPDATE.json"))


def _as_cpu_pod(pod: dict[str, Any], *, privileged: bool) -> None:
    (container,) = pod["spec"]["containers"]
    for section in ("limits", "requests"):
        container["resources"][section].pop("nvidia.com/gpu")
    if privileged:
        container["securityContext"] = {"privileged": True}


def toleration_update(*, privileged: bool) -> dict[str, Any]:
    """The recorded label UPDATE of a pending pod, as a CPU pod that gains the GPU taint's
    toleration (Kubernetes allows added tolerations on any pod)."""
    body = label_update()
    request = body["request"]
    for pod in (request["object"], request["oldObject"]):
        _as_cpu_pod(pod, privileged=privileged)
    request["object"]["spec"]["tolerations"].append(GPU_TOLERATION)
    return body


def test_the_recorded_label_update_of_a_gpu_pod_is_judged_and_allowed(service):
    outcome = answer(service, label_update(), mutate=False)

    assert outcome.verdict == "allowed"
    assert outcome.body["response"] == {
        "uid": label_update()["request"]["uid"],
        "allowed": True,
    }


def test_a_privileged_cpu_pod_gaining_the_gpu_toleration_by_update_is_denied_as_on_create(
    service,
):
    body = toleration_update(privileged=True)
    created = copy.deepcopy(body)
    created["request"].update(operation="CREATE", oldObject=None)

    updated = answer(service, body, mutate=False)

    assert updated.verdict == "denied"
    assert "[builtin/gpuAccessWithoutRequest]" in updated.body["response"]["status"]["message"]
    assert "privileged" in updated.body["response"]["status"]["message"]
    assert answer(service, created, mutate=True).verdict == "denied"


def test_a_cpu_pod_gaining_the_gpu_toleration_is_denied_since_an_update_cannot_hide_gpus(
    service,
):
    outcome = answer(service, toleration_update(privileged=False), mutate=False)

    message = outcome.body["response"]["status"]["message"]
    assert outcome.verdict == "denied"
    assert "an update cannot change a container's env" in message


def test_a_pod_update_is_never_patched_even_at_mutate(service):
    outcome = answer(service, toleration_update(privileged=False), mutate=True)

    assert "patch" not in outcome.body["response"]


def test_a_label_that_feeds_visible_devices_is_judged_by_its_new_value(service):
    body = label_update()
    request = body["request"]
    for pod, value in ((request["oldObject"], "void"), (request["object"], "all")):
        _as_cpu_pod(pod, privileged=False)
        pod["metadata"]["labels"]["gpus"] = value
        pod["spec"]["containers"][0]["env"] = [
            {
                "name": "NVIDIA_VISIBLE_DEVICES",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['gpus']"}},
            }
        ]

    outcome = answer(service, body, mutate=False)

    assert outcome.verdict == "denied"
    assert "NVIDIA_VISIBLE_DEVICES=all" in outcome.body["response"]["status"]["message"]


def debug_review(body: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """``kubectl debug`` of the recorded pod, now running on a GPU node: the new ephemeral
    container as the API server has defaulted it."""
    request = body["request"]
    request["subResource"] = "ephemeralcontainers"
    request["requestSubResource"] = "ephemeralcontainers"
    request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    old = request["oldObject"]
    old["spec"]["nodeName"] = "gpu-a100-0"
    old["spec"]["tolerations"].append(GPU_TOLERATION)
    old["status"] = {"phase": "Running", "qosClass": "Guaranteed"}
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
            "stdin": True,
            "tty": True,
            "targetContainerName": "main",
            **container,
        }
    ]
    request["object"] = new
    return body


def test_kubectl_debug_with_a_cuda_image_gets_its_gpus_hidden_and_nothing_else_patched(service):
    cuda = {"name": "debugger-x7k2p", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    body = debug_review(label_update(), cuda)

    outcome = answer(service, body, mutate=True)
    response = outcome.body["response"]

    assert outcome.verdict == "allowed"
    assert {op["path"].split("/")[2] for op in decoded_patch(response)} == {"ephemeralContainers"}
    (debugger,) = patched(body["request"]["object"], response)["spec"]["ephemeralContainers"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in debugger["env"]


def test_a_privileged_debug_container_is_denied_at_both_endpoints(service):
    sysadmin = {
        "name": "debugger-9qz",
        "image": "busybox:1.36",
        "securityContext": {"privileged": True},
    }
    for mutate in (True, False):
        outcome = answer(service, debug_review(label_update(), sysadmin), mutate=mutate)
        assert outcome.verdict == "denied"
        assert 'container "debugger-9qz"' in outcome.body["response"]["status"]["message"]


def _deployment_scaled(before: int, after: int) -> dict[str, Any]:
    body = copy.deepcopy(fixture("deployment-gpu-validate-Deployment-CREATE.json"))
    request = body["request"]
    request["operation"] = "UPDATE"
    request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    request["oldObject"] = copy.deepcopy(request["object"])
    request["oldObject"]["spec"]["replicas"] = before
    request["object"]["spec"]["replicas"] = after
    return body


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        pytest.param(1, 100, "denied", id="scaled-up-over-the-maximum"),
        pytest.param(100, 50, "allowed", id="scaled-down-still-over"),
        pytest.param(2, 4, "allowed", id="scaled-up-within"),
    ],
)
def test_a_deployment_update_is_judged_on_the_total_it_raises(tmp_path, before, after, verdict):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "quota.yaml").write_text(WORKLOAD_MAXIMUM)
    service = AdmissionService(rules=RuleStore(str(rules)))

    outcome = answer(service, _deployment_scaled(before, after), mutate=False)

    assert outcome.verdict == verdict


MEMORY_RULE = memory_limit("1Gi")


def resize_review(memory: str | None, *, was: str = "1Gi") -> dict[str, Any]:
    """The recorded label UPDATE as kube-apiserver sends an in-place resize (KEP-1287):
    the whole Pod, old and new, ``subResource: resize``; the old pod's memory limit and
    request ``was``, the new pod's ``memory`` (``None``: removed)."""
    body = label_update()
    request = body["request"]
    request["subResource"] = request["requestSubResource"] = "resize"
    (old,) = request["oldObject"]["spec"]["containers"]
    for section in ("limits", "requests"):
        old["resources"][section]["memory"] = was
    request["object"] = copy.deepcopy(request["oldObject"])
    (container,) = request["object"]["spec"]["containers"]
    for section in ("limits", "requests"):
        if memory is None:
            container["resources"][section].pop("memory")
        else:
            container["resources"][section]["memory"] = memory
    return body


@pytest.mark.parametrize(
    ("was", "memory", "allowed"),
    [
        pytest.param("1Gi", "4Gi", False, id="the rule's limit raised beyond it"),
        pytest.param("1Gi", None, False, id="the rule's limit removed"),
        pytest.param("256Mi", None, False, id="the owner's limit removed"),
        pytest.param("1Gi", "512Mi", True, id="the rule's limit lowered"),
        pytest.param("256Mi", "768Mi", True, id="the owner's limit raised within the rule"),
        pytest.param("256Mi", "4Gi", True, id="the owner's limit raised: theirs, as at creation"),
    ],
)
def test_an_in_place_resize_is_held_to_the_memory_rule(
    tmp_path: Any, was: str, memory: str | None, allowed: bool
) -> None:
    rules = rules_dir(tmp_path, MEMORY_RULE)
    service = AdmissionService(
        rules=RuleStore(str(rules)), inventory=StaticInventorySource(str(INVENTORY))
    )
    outcome = answer(service, resize_review(memory, was=was), mutate=False)
    response = outcome.body["response"]
    assert response["allowed"] is allowed
    if not allowed:
        assert "training-memory" in response["status"]["message"]
        assert "Resize its memory limit within 1Gi" in response["status"]["message"]
