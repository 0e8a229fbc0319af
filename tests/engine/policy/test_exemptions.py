"""Exemptions by namespace name that a namespace creator could take (issue 41): a name
that does not exist yet, where the cluster's namespaces are known, and any pattern."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.policy.exemptions import exempted_namespaces, exemption_warnings
from webhook.engine.policy.ruleset import DocumentRef, Policy, RuleDocument, compile_policy


def _policy(*specs: dict[str, Any]) -> Policy:
    docs = []
    for index, spec in enumerate(specs):
        name = f"r{index}"
        body = {"apiVersion": "gpu-webhook.io/v1alpha1", "kind": "GPUPolicy"}
        docs.append(
            RuleDocument(
                DocumentRef("rules.yaml", index + 1, "GPUPolicy", name),
                {**body, "metadata": {"name": name}, "spec": spec},
            )
        )
    return compile_policy(docs)


STACK = {"match": {"namespaces": ["gpu-operator", "kube-system"]}, "exempt": ["hideGPUs"]}
PATTERN = {"match": {"namespaces": ["nvidia-*"]}, "exempt": ["gpuAccessWithoutRequest"]}
CHECKING = {"match": {"namespaces": ["team-a"]}, "validate": [{"maxGPUsPerPod": 1}]}


def test_only_rules_that_exempt_hand_out_their_namespaces():
    found = exempted_namespaces(_policy(STACK, CHECKING))
    assert sorted(found) == ["gpu-operator", "kube-system"]
    assert [r.name for r in found["gpu-operator"]] == ["r0"]


@pytest.mark.parametrize(
    ("specs", "existing", "said"),
    [
        pytest.param([STACK], {"gpu-operator", "kube-system"}, [], id="every-name-exists"),
        pytest.param(
            [STACK],
            {"kube-system"},
            [
                "rule r0 exempts namespace gpu-operator, which does not exist: whoever creates "
                "it escapes hideGPUs unless the admission policy"
            ],
            id="a-name-not-created-yet",
        ),
        pytest.param([STACK], None, [], id="namespaces-not-known-say-nothing-of-names"),
        pytest.param(
            [PATTERN],
            None,
            [
                "rule r0 exempts every namespace whose name matches 'nvidia-*': whoever may "
                "create namespaces can make one and escape gpuAccessWithoutRequest"
            ],
            id="a-pattern-always",
        ),
        pytest.param([CHECKING], {"kube-system"}, [], id="a-rule-that-checks-is-no-exemption"),
    ],
)
def test_exemption_warnings(specs, existing, said):
    warnings = exemption_warnings(_policy(*specs), existing)
    assert len(warnings) == len(said)
    for warning, start in zip(warnings, said, strict=True):
        assert warning.message.startswith(start), warning.message
        assert warning.path == "spec.match.namespaces"
        assert str(warning).startswith("rules.yaml")
