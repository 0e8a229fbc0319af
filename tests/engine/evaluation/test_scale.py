"""A replica count set through ``<kind>/scale`` (``kubectl scale``, an HPA) is judged as the
UPDATE of the parent's replica field that it makes (issue 41): the same answer as that
UPDATE, a warning and never a denial when the parent is not there to read, and the number
judged named in the message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.builders import scale_of
from tests.scaling import LIMIT, deployment, gpu_template, meta, pytorchjob
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, Request, Resource
from webhook.engine.kube.workloads import BUILTIN_KINDS
from webhook.engine.policy.ruleset import Policy
from webhook.files.rulefiles import load_policy

DECLARED = """\
---
apiVersion: gpu-webhook.io/v1alpha1
kind: WorkloadKind
metadata: {name: trainingrun}
spec:
  group: example.com
  kind: TrainingRun
  plural: trainingruns
  templates:
    - path: spec.worker.template
      replicas: [spec.worker.count]
  scale:
    specReplicasPath: .spec.worker.count
"""


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Policy:
    rules: Path = tmp_path_factory.mktemp("rules")
    (rules / "limit.yaml").write_text(LIMIT + DECLARED)
    return load_policy(str(rules))


def statefulset(replicas: int = 1) -> dict[str, Any]:
    return {**deployment("db", replicas), "kind": "StatefulSet"}


def leaderworkerset(groups: int = 1, size: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta("vllm"),
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": gpu_template(8)},
        },
    }


def training_run(count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "TrainingRun",
        "metadata": meta("run"),
        "spec": {"worker": {"count": count, "template": gpu_template(8)}},
    }


PLURALS = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "PyTorchJob": "pytorchjobs",
    "LeaderWorkerSet": "leaderworkersets",
    "TrainingRun": "trainingruns",
}


def scale_request(
    parent: dict[str, Any],
    replicas: int,
    *,
    old: int,
    read: bool = True,
    unread: str = "",
    resource: str = "",
) -> Request:
    group, _, version = str(parent["apiVersion"]).rpartition("/")
    return Request(
        scale_of(parent, replicas, status_replicas=old),
        namespace="team-a",
        operation="UPDATE",
        old_object=scale_of(parent, old, status_replicas=old),
        sub_resource="scale",
        resource=Resource(
            group, version, resource or PLURALS[parent["kind"]], parent["metadata"]["name"]
        ),
        parent=parent if read else None,
        parent_unread=unread,
    )


@pytest.mark.parametrize(
    ("parent", "replicas", "allowed", "says"),
    [
        pytest.param(deployment(), 8, True, "", id="deployment-to-64-gpus-within"),
        pytest.param(
            deployment(),
            16,
            False,
            "Deployment team-a/serve scaled to 16 replicas (spec.replicas): all pods of this "
            "workload together request 128 GPUs",
            id="deployment-to-128-gpus-denied",
        ),
        pytest.param(statefulset(), 9, False, "request 72 GPUs", id="statefulset-denied"),
        pytest.param(
            pytorchjob(),
            16,
            False,
            "scaled to 16 replicas (spec.pytorchReplicaSpecs.Worker.replicas)",
            id="pytorchjob-worker-replicas-denied",
        ),
        pytest.param(pytorchjob(), 8, True, "", id="pytorchjob-within"),
        pytest.param(
            leaderworkerset(),
            5,
            False,
            "request 80 GPUs",  # 5 groups of a leader and a worker, 8 GPUs each
            id="leaderworkerset-groups-denied",
        ),
        pytest.param(
            training_run(),
            9,
            False,
            "TrainingRun team-a/run scaled to 9 replicas (spec.worker.count)",
            id="a-declared-kind-with-its-scale-path-denied",
        ),
        pytest.param(deployment(replicas=16), 4, True, "", id="a-scale-down-is-never-denied"),
    ],
)
def test_a_scale_is_judged_against_the_workload_s_gpu_limit(
    policy: Policy, parent: dict[str, Any], replicas: int, allowed: bool, says: str
) -> None:
    old = 16 if parent["kind"] == "Deployment" and parent["spec"]["replicas"] == 16 else 1
    request = scale_request(parent, replicas, old=old)

    decision = evaluate(request, policy=policy, inventory=NO_INVENTORY)

    assert decision.allowed is allowed, decision.findings
    assert decision.patch == ()  # a patch of the parent cannot apply to a Scale
    if says:
        assert [f.check for f in decision.findings] == ["maxGPUsPerWorkload"]
        assert says in decision.findings[0].message


@pytest.mark.parametrize(
    ("parent", "replicas", "old"),
    [
        pytest.param(deployment(), 16, 1, id="deployment-up"),
        pytest.param(deployment(), 8, 1, id="deployment-within"),
        pytest.param(pytorchjob(most=4), 6, 1, id="elastic-past-its-maximum"),
        pytest.param(pytorchjob(most=16), 4, 1, id="elastic-within-a-maximum-over-the-limit"),
        pytest.param(leaderworkerset(2), 3, 2, id="leaderworkerset"),
    ],
)
def test_a_scale_gets_the_answer_of_the_update_that_sets_the_same_field(
    policy: Policy, parent: dict[str, Any], replicas: int, old: int
) -> None:
    kind = next(k for k in BUILTIN_KINDS if k.kind == parent["kind"] and k.scale)
    before, after = copy.deepcopy(parent), copy.deepcopy(parent)
    for obj, count in ((before, old), (after, replicas)):
        node = obj
        for part in kind.scale[:-1]:
            node = node[part]
        node[kind.scale[-1]] = count
    update = Request(after, namespace="team-a", operation="UPDATE", old_object=before)

    by_update = evaluate(update, policy=policy, inventory=NO_INVENTORY)
    by_scale = evaluate(
        scale_request(before, replicas, old=old), policy=policy, inventory=NO_INVENTORY
    )

    assert by_scale.allowed is by_update.allowed
    assert [f.id for f in by_scale.findings] == [f.id for f in by_update.findings]
    for scaled, updated in zip(by_scale.findings, by_update.findings, strict=True):
        assert scaled.message.endswith(updated.message)


@pytest.mark.parametrize(
    ("why", "says"),
    [
        pytest.param(
            "deployments.apps team-a/serve was not found", "was not found", id="not-found"
        ),
        pytest.param(
            "reading deployments.apps team-a/serve was forbidden (the webhook's ClusterRole "
            "needs get on deployments)",
            "forbidden",
            id="forbidden",
        ),
        pytest.param("", "it was not read", id="no-reader"),
    ],
)
def test_a_scale_whose_parent_cannot_be_read_is_allowed_with_a_warning_naming_it(
    policy: Policy, why: str, says: str
) -> None:
    request = scale_request(deployment(), 100, old=1, read=False, unread=why)

    decision = evaluate(request, policy=policy, inventory=NO_INVENTORY)

    assert decision.allowed is True
    assert decision.findings == ()
    (warning,) = decision.warnings
    assert "Deployment team-a/serve to 100 replicas" in warning
    assert says in warning


def test_a_parent_of_another_uid_is_not_judged_but_warned_about(policy: Policy) -> None:
    request = scale_request(deployment(), 100, old=1)
    request.parent = {**deployment(), "metadata": {**meta("serve"), "uid": "uid-made-again"}}

    decision = evaluate(request, policy=policy, inventory=NO_INVENTORY)

    assert decision.allowed is True
    assert "uid-made-again" in decision.warnings[0]


@pytest.mark.parametrize(
    ("api_version", "kind", "resource"),
    [
        pytest.param("kubeflow.org/v1", "TFJob", "tfjobs", id="tfjob-declares-no-scale"),
        pytest.param("batch/v1", "Job", "jobs", id="job-has-no-scale"),
        pytest.param("example.com/v1", "Widget", "widgets", id="an-unknown-kind"),
    ],
)
def test_the_scale_of_a_kind_without_a_known_scale_path_passes_through(
    policy: Policy, api_version: str, kind: str, resource: str
) -> None:
    parent = {"apiVersion": api_version, "kind": kind, "metadata": meta("x"), "spec": {}}
    request = scale_request(parent, 100, old=1, resource=resource)

    decision = evaluate(request, policy=policy, inventory=NO_INVENTORY)

    assert (decision.allowed, decision.understood, decision.warnings) == (True, False, ())


def test_a_scale_to_zero_carries_no_replicas_and_is_judged_as_zero(policy: Policy) -> None:
    request = scale_request(deployment(replicas=16), 0, old=16)
    assert request.object["spec"] == {}

    decision = evaluate(request, policy=policy, inventory=NO_INVENTORY)

    assert (decision.allowed, decision.warnings) == (True, ())


def test_an_elastic_job_is_counted_at_its_maximum_and_the_message_says_so(policy: Policy) -> None:
    job = pytorchjob(most=16)

    decision = evaluate(Request(job, namespace="team-a"), policy=policy, inventory=NO_INVENTORY)

    assert decision.allowed is False
    (finding,) = decision.findings
    assert (
        "request 128 GPUs, counting Worker at 16 replicas (elasticPolicy.maxReplicas) x 8 GPUs"
        in (finding.message)
    )
