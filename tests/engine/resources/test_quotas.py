"""Which pods a ResourceQuota counts: its scopes matched as the quota evaluator matches them."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.resources.quotas import PodScopes, Quota, Scope, quota_from_json

CROSS = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"namespaces": ["x"]}]}}
PREFERRED_SELECTOR = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"namespaceSelector": {}}}
        ]
    }
}
SAME_NAMESPACE = {
    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "x"}]}
}
CPU = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
GPU_ONLY = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}


@pytest.mark.parametrize(
    ("spec", "scope", "matches"),
    [
        pytest.param({"activeDeadlineSeconds": 0}, Scope("Terminating"), True, id="deadline-0"),
        pytest.param({}, Scope("Terminating"), False, id="no-deadline"),
        pytest.param({}, Scope("NotTerminating"), True, id="not-terminating"),
        pytest.param(CPU, Scope("NotBestEffort"), True, id="cpu-asked-not-best-effort"),
        pytest.param(CPU, Scope("BestEffort"), False, id="cpu-asked-so-not-best-effort"),
        pytest.param(GPU_ONLY, Scope("BestEffort"), None, id="gpu-only-a-limit-range-may-add-cpu"),
        pytest.param(
            {"initContainers": [{"resources": {"limits": {"memory": "1Gi"}}}]},
            Scope("NotBestEffort"),
            True,
            id="init-container-memory",
        ),
        pytest.param(
            {"resources": {"requests": {"cpu": "1"}}},
            Scope("BestEffort"),
            False,
            id="pod-level-resources",
        ),
        pytest.param({"priorityClassName": "high"}, Scope("PriorityClass"), True, id="exists"),
        pytest.param(
            {"priorityClassName": "high"},
            Scope("PriorityClass", "In", ("high", "mid")),
            True,
            id="in",
        ),
        pytest.param(
            {"priorityClassName": "low"}, Scope("PriorityClass", "In", ("high",)), False, id="out"
        ),
        pytest.param(
            {"priorityClassName": "low"},
            Scope("PriorityClass", "NotIn", ("high",)),
            True,
            id="not-in",
        ),
        pytest.param(
            {"priorityClassName": "low"},
            Scope("PriorityClass", "DoesNotExist"),
            False,
            id="does-not-exist",
        ),
        pytest.param(
            {}, Scope("PriorityClass", "NotIn", ("high",)), None, id="unset-may-get-the-default"
        ),
        pytest.param(
            {"affinity": CROSS}, Scope("CrossNamespacePodAffinity"), True, id="namespaces"
        ),
        pytest.param(
            {"affinity": PREFERRED_SELECTOR},
            Scope("CrossNamespacePodAffinity"),
            True,
            id="preferred-namespace-selector",
        ),
        pytest.param(
            {"affinity": SAME_NAMESPACE},
            Scope("CrossNamespacePodAffinity"),
            False,
            id="same-namespace-affinity",
        ),
        pytest.param({}, Scope("VolumeAttributesClass"), False, id="a-scope-pods-never-match"),
    ],
)
def test_a_scope_matches_a_pod_as_pod_matches_scope_func_does(
    spec: dict[str, Any], scope: Scope, matches: bool | None
) -> None:
    assert PodScopes.of(spec).matches(scope) is matches


def test_a_quota_applies_when_every_scope_matches() -> None:
    quota = Quota("ns", "q", scopes=(Scope("NotTerminating"), Scope("PriorityClass")))
    assert quota.applies(PodScopes.of({"priorityClassName": "x"})) is True
    assert quota.applies(PodScopes.of({})) is None
    assert quota.applies(PodScopes.of({"activeDeadlineSeconds": 5})) is False
    assert Quota("ns", "unscoped").applies(PodScopes.of({})) is True


QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "q", "namespace": "ml"},
    "spec": {
        "hard": {"requests.nvidia.com/gpu": "4"},
        "scopes": ["NotTerminating"],
        "scopeSelector": {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]
        },
    },
    "status": {"used": {"requests.nvidia.com/gpu": "1"}},
}


def test_scopes_and_the_scope_selector_are_read() -> None:
    quota = quota_from_json(QUOTA)
    assert quota.scopes == (Scope("NotTerminating"), Scope("PriorityClass", "In", ("high",)))
