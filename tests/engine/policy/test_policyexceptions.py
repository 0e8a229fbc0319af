"""GPUPolicyException as the engine holds it: which workloads it selects, when it has
expired (against the review's time, given as data), and which findings it waives."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from webhook.engine.policy.decision import Finding
from webhook.engine.policy.policyexceptions import PolicyException, parse_time, waive

NOW = dt.datetime(2026, 12, 6, 6, 0, tzinfo=dt.UTC)
DENIAL = Finding("team-a/limits", "maxGPUsPerPod", "deny", "too many", "too many")
OTHER = Finding("builtin", "capacity", "deny", "no node", "no node")


def workload(
    name: str = "train", labels: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", **extra}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {}}


def exception(**fields: Any) -> PolicyException:
    return PolicyException(
        **{"namespace": "team-a", "name": "x", "checks": ("team-a/limits/*",), **fields}
    )


@pytest.mark.parametrize(
    ("held", "obj", "selected"),
    [
        pytest.param(exception(names=("train",)), workload("train"), True, id="by-name"),
        pytest.param(exception(names=("train-*",)), workload("serve"), False, id="another-name"),
        pytest.param(
            exception(names=("train-*",)), workload("", generateName="train-"), True,
            id="by-generate-name",
        ),
        pytest.param(
            exception(selector={"matchLabels": {"app": "big"}}), workload(labels={"app": "big"}),
            True, id="by-label",
        ),
        pytest.param(
            exception(selector={"matchLabels": {"app": "big"}}), workload(labels={"app": "small"}),
            False, id="another-label",
        ),
        pytest.param(
            exception(selector={"matchLabels": {"app": "big"}}),
            {**workload(), "spec": {"template": {"metadata": {"labels": {"app": "big"}}}}},
            True, id="by-the-pod-templates-label",
        ),
        pytest.param(
            exception(names=("train",), selector={"matchLabels": {"app": "big"}}),
            workload("train", {"app": "small"}), False, id="name-and-label-both-needed",
        ),
    ],
)  # fmt: skip
def test_an_exception_selects_workloads_of_its_namespace_by_name_or_label(
    held: PolicyException, obj: dict[str, Any], selected: bool
) -> None:
    assert held.selects(obj) is selected


@pytest.mark.parametrize(
    ("expires", "now", "expired"),
    [
        pytest.param(None, None, False, id="no-expiry"),
        pytest.param(NOW + dt.timedelta(seconds=1), NOW, False, id="before"),
        pytest.param(NOW, NOW, True, id="at-its-expiry"),
        pytest.param(NOW + dt.timedelta(days=1), None, True, id="time-unknown"),
    ],
)
def test_an_exception_expires_at_the_reviews_time(
    expires: dt.datetime | None, now: dt.datetime | None, expired: bool
) -> None:
    assert exception(expires=expires).expired(now) is expired


def test_waive_keeps_what_no_exception_names_and_says_who_waived_the_rest() -> None:
    kept, waived = waive(
        [DENIAL, OTHER],
        [exception(name="b"), exception(name="a"), exception(namespace="team-b")],
        namespace="team-a",
        obj=workload(),
        now=NOW,
    )
    assert kept == [OTHER]
    assert [(w.exception, w.finding) for w in waived] == [("team-a/a", DENIAL)]
    assert waived[0].audit_key == "exception.team-a-a"


def test_an_exception_of_another_namespace_waives_nothing() -> None:
    kept, waived = waive([DENIAL], [exception()], namespace="team-b", obj=workload(), now=NOW)
    assert (kept, waived) == ([DENIAL], [])


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        pytest.param("2027-01-01T00:00:00Z", dt.datetime(2027, 1, 1, tzinfo=dt.UTC), id="utc"),
        pytest.param(
            "2027-01-01T01:00:00+01:00", dt.datetime(2027, 1, 1, tzinfo=dt.UTC), id="an-offset"
        ),
        pytest.param("2027-01-01", None, id="a-date-only"),
        pytest.param("2027-13-01T00:00:00Z", None, id="no-such-month"),
        pytest.param(20270101, None, id="a-number"),
    ],
)
def test_an_expiry_is_an_rfc_3339_time(text: object, parsed: dt.datetime | None) -> None:
    assert parse_time(text) == parsed
