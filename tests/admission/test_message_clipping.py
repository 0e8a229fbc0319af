"""A pod of 20,000 bad containers gets a short answer (issue 27): its denial message and
its warnings stay within what the API server passes on, and say how many were left out.
(It was a 3.5 MB status.message.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import CASES, INVENTORY, RULES, review
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.response import MAX_WARNINGS_TOTAL
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService, Outcome
from webhook.engine.policy.decision import MAX_MESSAGE
from webhook.files.rulefiles import RuleStore

CONTAINERS = 20_000


def privileged_pod() -> dict:
    """CPU containers, all privileged, in a pod that tolerates the GPU taint: each one
    reaches every GPU of its node, a finding each."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "many", "namespace": "default"},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {"name": f"c{i}", "image": "busybox", "securityContext": {"privileged": True}}
                for i in range(CONTAINERS)
            ],
        },
    }


def answer(rules: Path, *, mutate: bool) -> Outcome:
    source = StaticInventorySource(str(INVENTORY))
    source.start()
    service = AdmissionService(rules=RuleStore(str(rules)), inventory=source)
    return service.review(parse_review(json.dumps(review(privileged_pod()))), mutate=mutate)


@pytest.mark.parametrize("mutate", [True, False], ids=["mutate", "validate"])
def test_twenty_thousand_denials_make_a_message_within_the_limit(mutate):
    response = answer(RULES, mutate=mutate).body["response"]

    assert response["allowed"] is False
    message = response["status"]["message"]
    assert len(message) <= MAX_MESSAGE
    assert message.startswith("[builtin/gpuAccessWithoutRequest] ")
    given = message.count("[builtin/gpuAccessWithoutRequest]")
    assert given > 10
    assert message.endswith(
        f"... and {CONTAINERS - given:,} more reasons left out of this message: run "
        "gpu-webhook check on the manifest to see them all"
    )


def test_twenty_thousand_warnings_stay_within_what_the_api_server_passes_on():
    outcome = answer(CASES / "_rules" / "access-warn", mutate=False)
    response = outcome.body["response"]

    assert response["allowed"] is True
    warnings = response["warnings"]
    assert sum(map(len, warnings)) <= MAX_WARNINGS_TOTAL
    assert all(len(w) < 120 for w in warnings)
    *given, marker = warnings
    assert all(w.startswith("builtin/gpuAccessWithoutRequest: ") for w in given)
    assert len(outcome.answer.warnings) > CONTAINERS  # one a container, and the pod's own
    assert marker == (
        f"gpu-webhook: {len(outcome.answer.warnings) - len(given):,} more warnings left out; "
        "gpu-webhook check shows them all"
    )
