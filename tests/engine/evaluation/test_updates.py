from typing import Any

import pytest

from webhook.engine.evaluation.updates import (
    added_ephemeral_containers,
    env_reads_metadata,
    fresh_findings,
    judged_fields_changed,
    placed_as_before,
)
from webhook.engine.policy.decision import Finding

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}


def _pod(**meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.mark.parametrize(
    ("new", "changed"),
    [
        pytest.param(_pod(), False, id="nothing"),
        pytest.param(_pod(finalizers=["x"], resourceVersion="9"), False, id="finalizers"),
        pytest.param(_pod(labels={"a": "1"}), True, id="a-label"),
        pytest.param(_pod(annotations={"a": "1"}), True, id="an-annotation"),
        pytest.param({**_pod(), "spec": {"containers": []}}, True, id="the-spec"),
    ],
)
def test_only_the_spec_labels_and_annotations_are_worth_judging(new, changed):
    assert judged_fields_changed(new, _pod()) is changed


def test_a_bound_pod_keeps_its_old_placement_and_the_rest_of_its_new_spec():
    old = _pod()
    old["spec"].update(nodeName="n1", nodeSelector={"zone": "a"})
    new = {**old, "spec": {**old["spec"], "tolerations": [TOLERATION], "activeDeadlineSeconds": 5}}

    judged = placed_as_before(new, old)

    assert "tolerations" not in judged["spec"]
    assert judged["spec"]["nodeSelector"] == {"zone": "a"}
    assert judged["spec"]["activeDeadlineSeconds"] == 5
    assert "tolerations" in new["spec"], "the request's object is left alone"


def test_a_pending_pod_is_judged_with_its_new_placement():
    new = _pod()
    new["spec"]["tolerations"] = [TOLERATION]

    assert placed_as_before(new, _pod()) is new


def test_ephemeral_containers_are_new_by_name_whatever_their_order():
    old = _pod()
    old["spec"]["ephemeralContainers"] = [{"name": "a"}]
    new = _pod()
    new["spec"]["ephemeralContainers"] = [{"name": "b"}, {"name": "a"}]

    assert added_ephemeral_containers(new, old) == [(0, {"name": "b"})]
    assert added_ephemeral_containers(new, None) == [(0, {"name": "b"}), (1, {"name": "a"})]


def _finding(message: str) -> Finding:
    return Finding("builtin", "gpuAccessWithoutRequest", "deny", message, message)


def test_a_finding_counts_unless_the_old_object_had_it_word_for_word():
    kept, changed, new = _finding("sets X=0"), _finding("sets X=all"), _finding("privileged")

    assert fresh_findings([kept, _finding("sets X=1")], [kept, changed, new]) == [changed, new]


def _env(section: str, path: str) -> dict[str, Any]:
    ref = {"fieldRef": {"fieldPath": path}}
    return {section: [{"name": "c", "env": [{"name": "X", "valueFrom": ref}]}]}


@pytest.mark.parametrize(
    ("spec", "reads"),
    [
        pytest.param(_env("containers", "metadata.labels['gpus']"), True, id="a-label"),
        pytest.param(_env("initContainers", "metadata.annotations['a']"), True, id="annotation"),
        pytest.param(_env("ephemeralContainers", "metadata.labels"), True, id="ephemeral"),
        pytest.param(_env("containers", "metadata.name"), False, id="the-name"),
        pytest.param(_env("containers", "spec.nodeName"), False, id="the-node"),
        pytest.param({"containers": [{"name": "c", "env": "oops"}]}, False, id="ill-typed"),
    ],
)
def test_env_that_reads_the_pods_labels_or_annotations_is_found(spec, reads):
    assert env_reads_metadata(spec) is reads
