"""The first stage: the rules that match a template are those each rule's match admits,
whether the answer is remembered for the policy or worked out again
(webhook.engine.evaluation.request.matching_rules)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.evaluation.request import (
    NO_INVENTORY,
    Request,
    matching_rules,
    template_asks,
)
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy


def _policy(*matches: dict[str, Any]) -> Policy:
    docs = []
    for index, match in enumerate(matches):
        name = f"r{index}"
        body = {
            "apiVersion": "gpu-webhook.io/v1alpha1",
            "kind": "GPUPolicy",
            "metadata": {"name": name},
            "spec": {"order": index, "match": match, "validate": [{"maxGPUsPerPod": 8}]},
        }
        docs.append(RuleDocument(DocumentRef("rules.yaml", index + 1, "GPUPolicy", name), body))
    return compile_policy(docs)


def _pod(namespace: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


def _matched(policy: Policy, obj: dict[str, Any], namespace_labels: Any = None) -> list[str]:
    request = Request(obj, namespace_labels=namespace_labels)
    template = policy.kinds.templates(obj)[0]  # type: ignore[index]
    pod, claims = template_asks(request, template, settings=policy.settings, view=NO_INVENTORY)
    return [r.name for r in matching_rules(request, template, pod, policy, claims)]


BY_NAMESPACE = _policy(
    {"namespaces": ["team-a"]},
    {"namespaces": ["team-*"], "gpuCount": {"min": 2}},
    {"resources": ["amd.com/gpu"]},
    {"gpuCount": {"min": 0}},
)
BY_LABELS = _policy(
    {"namespaces": ["team-a"]},
    {"podSelector": {"matchLabels": {"tier": "batch"}}},
)
BY_NAMESPACE_LABELS = _policy(
    {"namespaceSelector": {"matchLabels": {"gpu": "yes"}}},
    {"gpuCount": {"min": 0}},
)


@pytest.mark.parametrize(
    ("policy", "obj", "namespace_labels", "names"),
    [
        pytest.param(BY_NAMESPACE, _pod("team-a", 1), None, ["r0", "r3"], id="namespace"),
        pytest.param(BY_NAMESPACE, _pod("team-a", 2), None, ["r0", "r1", "r3"], id="count"),
        pytest.param(BY_NAMESPACE, _pod("team-b", 2), None, ["r1", "r3"], id="other-namespace"),
        pytest.param(BY_NAMESPACE, _pod("team-b", 0), None, ["r3"], id="no-gpu"),
        pytest.param(
            BY_LABELS, _pod("team-a", 1, {"tier": "batch"}), None, ["r0", "r1"], id="pod-labels"
        ),
        pytest.param(
            BY_LABELS, _pod("team-a", 1, {"tier": "web"}), None, ["r0"], id="other-labels"
        ),
        pytest.param(
            BY_NAMESPACE_LABELS, _pod("n", 1), {"gpu": "yes"}, ["r0", "r1"], id="namespace-labels"
        ),
        pytest.param(
            BY_NAMESPACE_LABELS, _pod("n", 1), {"gpu": "no"}, ["r1"], id="other-ns-labels"
        ),
        pytest.param(BY_NAMESPACE_LABELS, _pod("n", 1), None, ["r1"], id="ns-labels-unknown"),
    ],
)
def test_a_template_is_matched_by_the_rules_whose_match_admits_it(
    policy: Policy, obj: dict[str, Any], namespace_labels: Any, names: list[str]
) -> None:
    # Asked twice, in both orders with the other cases: a remembered answer is the same.
    assert _matched(policy, obj, namespace_labels) == names
    assert _matched(policy, obj, namespace_labels) == names


def test_pods_alike_but_for_what_a_rule_reads_are_matched_apart() -> None:
    batch, web = _pod("team-a", 1, {"tier": "batch"}), _pod("team-a", 1, {"tier": "web"})
    assert [_matched(BY_LABELS, p) for p in (batch, web, batch)] == [
        ["r0", "r1"],
        ["r0"],
        ["r0", "r1"],
    ]


def test_each_policy_answers_with_its_own_rules() -> None:
    """A new rules generation is a new policy: nothing remembered for the old one is used."""
    obj = _pod("team-a", 1)
    first = _policy({"namespaces": ["team-a"]})
    second = _policy({"namespaces": ["team-b"]}, {"namespaces": ["team-a"]})
    assert [_matched(p, obj) for p in (first, second, first)] == [["r0"], ["r1"], ["r0"]]
