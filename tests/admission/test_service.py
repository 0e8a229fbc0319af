import json
from dataclasses import dataclass

import pytest

from tests.builders import INVENTORY, decoded_patch, deployment, fixture, patched, pod, review
from tests.rulesets import quota, rules_dir
from webhook.admission.inventory import InventoryStatus, StaticInventorySource
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.files.rulefiles import RuleStore


@pytest.fixture(scope="module")
def service():
    return AdmissionService(
        rules=RuleStore("rules"), inventory=StaticInventorySource(str(INVENTORY))
    )


def answer(service, body, *, mutate=True):
    return service.review(parse_review(json.dumps(body)), mutate=mutate)


def test_a_gpu_pod_is_allowed_with_the_uid_echoed_and_a_patch_that_gives_the_engines_object(
    service,
):
    obj = pod(gpus=2)
    outcome = answer(service, review(obj, uid="u-1"))
    response = outcome.body["response"]

    engine = evaluate(
        Request(obj, namespace="default"),
        policy=service.rules.current.policy,
        inventory=InventoryView(service.inventory.snapshot()),
    )
    assert outcome.body["apiVersion"] == "admission.k8s.io/v1"
    assert outcome.body["kind"] == "AdmissionReview"
    assert response["uid"] == "u-1"
    assert response["allowed"] is True
    assert decoded_patch(response)
    assert patched(obj, response) == engine.mutated


def test_a_requests_only_gpu_pod_is_denied_at_mutate_with_403_naming_the_rule_and_the_fix(service):
    outcome = answer(service, fixture("pod-gpu-requests-only-mutate-Pod-CREATE.json"))
    response = outcome.body["response"]

    assert outcome.verdict == "denied"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "[builtin/requestsWithoutLimits]" in response["status"]["message"]
    assert "limits" in response["status"]["message"]
    assert "patch" not in response


def test_validate_gives_the_same_decision_as_mutate_without_a_patch(service):
    body = review(pod(gpus=1))

    mutated = answer(service, body, mutate=True).body["response"]
    validated = answer(service, body, mutate=False).body["response"]

    assert "patch" in mutated
    assert "patch" not in validated
    assert validated["allowed"] is mutated["allowed"] is True


def test_mutating_the_mutated_pod_again_gives_no_patch(service):
    once = patched(pod(gpus=1), answer(service, review(pod(gpus=1))).body["response"])

    again = answer(service, review(once)).body["response"]

    assert "patch" not in again


@pytest.mark.parametrize(
    "mutate", [pytest.param(True, id="mutate"), pytest.param(False, id="validate")]
)
@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(gpus=1), id="gpu-pod"),
        pytest.param(pod(gpus=1, requests_only=True), id="requests-only"),
        pytest.param(pod(gpus="500m"), id="fractional"),
        pytest.param(pod(gpus=64), id="too-many"),
        pytest.param(deployment(pod(gpus=8), replicas=40), id="big-deployment"),
    ],
)
def test_a_dry_run_gets_exactly_the_answer_of_the_real_request(service, obj, mutate):
    real = answer(service, review(obj, uid="same"), mutate=mutate)
    dry = answer(service, review(obj, uid="same", dry_run=True), mutate=mutate)

    assert dry.body == real.body
    assert dry.verdict == real.verdict


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(review(None, operation="DELETE", old=pod(gpus="x")), "operation", id="delete"),
        pytest.param(review(pod(gpus="500m"), operation="CONNECT"), "operation", id="connect"),
        pytest.param(review(pod(gpus="500m"), sub_resource="status"), "subresource", id="status"),
        pytest.param(review(pod(gpus="500m"), sub_resource="binding"), "subresource", id="binding"),
        pytest.param(
            review(pod(gpus="500m"), operation="CREATE", sub_resource="eviction"),
            "subresource",
            id="eviction",
        ),
        pytest.param(
            review(
                {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 100}},
                operation="UPDATE",
                old={"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 1}},
                sub_resource="scale",
            ),
            "kind",  # its resource ("scales") is no kind whose scale the engine knows
            id="scale-of-an-unknown-resource",
        ),
        pytest.param(
            review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            "kind",
            id="configmap",
        ),
    ],
)
def test_requests_outside_our_business_are_allowed_untouched(service, body, reason):
    outcome = answer(service, body)

    assert outcome.verdict == "skipped"
    assert outcome.answer.skipped_because == reason
    assert outcome.body["response"] == {"uid": body["request"]["uid"], "allowed": True}


def test_a_workload_update_that_leaves_the_template_alone_is_not_blocked_by_a_new_rule(tmp_path):
    service = AdmissionService(rules=RuleStore(str(rules_dir(tmp_path, quota(2)))))
    old = deployment(pod(gpus=4))
    scaled = {**old, "spec": {**old["spec"], "replicas": 3}}
    changed = deployment(pod(gpus=8))

    assert answer(service, review(scaled, operation="UPDATE", old=old)).verdict == "allowed"
    assert answer(service, review(changed, operation="UPDATE", old=old)).verdict == "denied"


def test_an_audit_rule_becomes_an_audit_annotation_and_a_warn_rule_a_warning(tmp_path):
    audit = quota(1, "audit")
    warn = quota(1, "warn").replace("name: quota", "name: quota-warn")
    service = AdmissionService(rules=RuleStore(str(rules_dir(tmp_path, audit, warn))))

    response = answer(service, review(pod(gpus=2))).body["response"]

    assert response["allowed"] is True
    assert list(response["auditAnnotations"]) == ["quota.maxgpusperpod"]
    assert any(w.startswith("quota-warn/maxGPUsPerPod") for w in response["warnings"])
    assert all(len(w) < 120 for w in response["warnings"])


@dataclass
class UnsyncedInventory:
    """A live source before its first list: the boundary, faked."""

    def start(self):
        pass

    def stop(self):
        pass

    def snapshot(self):
        return None

    def ready(self):
        return False

    def status(self):
        return InventoryStatus(False, True, 0.0, "", 0, "connection refused")

    def stale_seconds(self):
        return None

    def namespace_labels(self, name):
        return None


@pytest.mark.parametrize(
    ("override", "allowed"),
    [
        pytest.param(None, True, id="rules-say-allow"),
        pytest.param("deny", False, id="env-says-deny"),
    ],
)
def test_an_unsynced_inventory_applies_the_failure_mode_and_the_override_wins(override, allowed):
    service = AdmissionService(
        rules=RuleStore("rules"), inventory=UnsyncedInventory(), inventory_failure_mode=override
    )

    response = answer(service, review(pod(gpus=1))).body["response"]

    assert response["allowed"] is allowed
    assert service.ready() == (False, "node inventory not synced yet")
    if allowed:
        assert any("not synced" in w for w in response["warnings"])


def _replica(name):
    obj = pod(gpus=1, name="trainer")
    obj["metadata"]["name"] = name
    return obj


def test_replicas_share_one_answer_and_each_gets_its_own_uid():
    service = AdmissionService(
        rules=RuleStore("rules"), inventory=StaticInventorySource(str(INVENTORY))
    )
    answer(service, review(_replica("trainer-0"), uid="u-0"))  # a first sight is not kept
    first = answer(service, review(_replica("trainer-a"), uid="u-a"))
    second = answer(service, review(_replica("trainer-b"), uid="u-b"))

    assert second.answer is first.answer
    assert (first.body["response"]["uid"], second.body["response"]["uid"]) == ("u-a", "u-b")
    assert {**first.body["response"], "uid": ""} == {**second.body["response"], "uid": ""}
    assert (service.memo.hits, service.memo.misses) == (1, 2)


def test_mutate_and_validate_of_one_pod_keep_their_own_answers():
    service = AdmissionService(
        rules=RuleStore("rules"), inventory=StaticInventorySource(str(INVENTORY))
    )
    body = review(pod(gpus=1))
    answer(service, body, mutate=False)  # a first sight is not kept
    mutated = answer(service, body, mutate=True)
    validated = answer(service, body, mutate=False)

    assert decoded_patch(mutated.body["response"])
    assert "patch" not in validated.body["response"]
    assert answer(service, body, mutate=True).answer is mutated.answer


def test_a_pod_whose_patch_would_pass_the_limit_is_denied_saying_why(service):
    containers = [{"name": f"c{i}", "image": "busybox"} for i in range(29_000)]
    obj = pod(gpus=None)
    obj["spec"]["containers"] = containers
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]

    outcome = answer(service, review(obj))
    response = outcome.body["response"]

    assert outcome.verdict == "denied"
    assert response["allowed"] is False
    assert "patch" not in response
    assert "over its limit of 3,145,728" in response["status"]["message"]
    assert len(outcome.encode()) < 2048


def test_a_pod_whose_patch_is_under_the_limit_is_allowed_with_it(service):
    obj = pod(gpus=None)
    obj["spec"]["containers"] = [{"name": f"c{i}", "image": "busybox"} for i in range(19_000)]
    obj["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]

    response = answer(service, review(obj)).body["response"]

    assert response["allowed"] is True
    assert len(decoded_patch(response)) == 19_000


def _gpu_policy(spec, *, kind="GPUPolicy"):
    return {
        "apiVersion": "gpu-webhook.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "team-a", "generation": 1, "uid": "u-1"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        pytest.param(_gpu_policy({"validate": [{"maxGPUsPerPod": 4}]}), None, id="valid"),
        pytest.param(
            _gpu_policy({"validate": [{"maxGPUsPerPd": 4}]}),
            'GPUPolicy team-a: spec.validate[0]: unknown check "maxGPUsPerPd" (did you mean '
            '"maxGPUsPerPod"?)',
            id="unknown-check",
        ),
        pytest.param(
            _gpu_policy({"mtach": {}}),
            'GPUPolicy team-a: spec: unknown field "mtach" (did you mean "match"?)',
            id="unknown-field",
        ),
        pytest.param(
            _gpu_policy({}, kind="GPUSettings"),
            "GPUSettings team-a: only one GPUSettings is allowed, first in rules/00-settings.yaml",
            id="a-second-gpusettings",
        ),
    ],
)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_rule_object_is_judged_at_validate_as_rules_lint_would(service, obj, said, operation):
    body = review(obj, operation=operation, old=obj if operation == "UPDATE" else None)
    outcome = answer(service, body, mutate=False)
    if said is None:
        assert outcome.body["response"] == {"uid": body["request"]["uid"], "allowed": True}
    else:
        assert outcome.verdict == "denied"
        assert outcome.body["response"]["status"]["message"].startswith(said)


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param([1], id="a-list"),
        pytest.param("x", id="a-string"),
        pytest.param(7, id="a-number"),
        pytest.param({"name": ["team-a"]}, id="a-name-that-is-a-list"),
    ],
)
def test_a_rule_object_whose_metadata_is_not_a_map_is_denied_not_a_500(service, metadata):
    obj = {**_gpu_policy({"validate": [{"maxGPUsPerPod": 4}]}), "metadata": metadata}
    outcome = answer(service, review(obj), mutate=False)
    assert outcome.verdict == "denied"
    assert "metadata" in outcome.body["response"]["status"]["message"]


@pytest.mark.parametrize(
    ("body", "mutate", "reason"),
    [
        pytest.param(review(_gpu_policy({"bogus": 1})), True, "kind", id="at-mutate"),
        pytest.param(
            review(_gpu_policy({"bogus": 1}), operation="UPDATE", sub_resource="status"),
            False,
            "subresource",
            id="its-status",
        ),
        pytest.param(
            review(None, operation="DELETE", old=_gpu_policy({"bogus": 1})),
            False,
            "operation",
            id="its-deletion",
        ),
    ],
)
def test_a_rule_objects_status_deletion_and_mutation_are_left_alone(service, body, mutate, reason):
    outcome = answer(service, body, mutate=mutate)
    assert (outcome.verdict, outcome.answer.skipped_because) == ("skipped", reason)
