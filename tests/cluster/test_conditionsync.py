"""Runtime sync of the match conditions through the replayed API server: the Lease holder
writes the conditions of the rules in force into its own two webhook configurations (by
name, nothing else), again when the rules change, never while another replica holds the
Lease, and not over a configuration changed since it read it."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import FakeApiServer, Request
from webhook.cluster.apiclient import ApiClient, ApiEndpoint
from webhook.cluster.conditionsync import GROUP_PATH, ConditionSync
from webhook.cluster.lease import Lease
from webhook.engine.evaluation.matchconditions import match_conditions
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[2]
MUTATING = f"{GROUP_PATH}/mutatingwebhookconfigurations/gpu-webhook"
VALIDATING = f"{GROUP_PATH}/validatingwebhookconfigurations/gpu-webhook"
OTHER = f"{GROUP_PATH}/mutatingwebhookconfigurations/someone-elses"
T0 = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
POLICY = load_policy(str(ROOT / "rules"))


def conditions(*, tainted: bool) -> dict[str, list[dict[str, str]]]:
    found = match_conditions(POLICY, tainted_gpu_nodes=tainted)
    return {name: [c.as_dict() for c in listed] for name, listed in found.items()}


@pytest.fixture
def client(fake_api: FakeApiServer) -> Iterator[ApiClient]:
    fake_api.namespaces.add("gpu-webhook")
    docs = list(yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text()))
    for doc in docs:
        plural = doc["kind"].lower() + "s"
        fake_api.put_object(f"{GROUP_PATH}/{plural}/gpu-webhook", doc)
    other = copy.deepcopy(docs[0])
    other["metadata"]["name"] = "someone-elses"
    fake_api.put_object(OTHER, other)
    api = ApiClient(ApiEndpoint(host=fake_api.url))
    yield api
    api.close()


def replica(client: ApiClient, identity: str) -> ConditionSync:
    lease = Lease(
        client,
        namespace="gpu-webhook",
        name="gpu-webhook-match-conditions",
        identity=identity,
        duration_seconds=60,
        clock=lambda: T0,
    )
    return ConditionSync(client, lease=lease)


def held(fake_api: FakeApiServer, path: str) -> Any:
    return [w.get("matchConditions") for w in fake_api.objects[path]["webhooks"]]


def config_writes(fake_api: FakeApiServer) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake_api.writes() if "leases" not in r.path]


def test_the_holder_writes_its_own_two_configurations_and_only_those(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    wanted = conditions(tainted=True)
    assert replica(client, "pod-a").sync(wanted) == [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ]
    assert held(fake_api, MUTATING) == [wanted["mutate.gpu-webhook.io"]]
    assert held(fake_api, VALIDATING) == [wanted["validate.gpu-webhook.io"], None]
    assert config_writes(fake_api) == [("PATCH", MUTATING), ("PATCH", VALIDATING)]
    assert held(fake_api, OTHER) == [None]


def test_nothing_is_written_when_the_conditions_are_already_there(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    sync = replica(client, "pod-a")
    sync.sync(conditions(tainted=True))
    before = len(config_writes(fake_api))
    assert sync.sync(conditions(tainted=True)) == []
    assert len(config_writes(fake_api)) == before


def test_changed_rules_or_an_untainted_gpu_node_are_written_again(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    sync = replica(client, "pod-a")
    sync.sync(conditions(tainted=True))
    assert len(sync.sync(conditions(tainted=False))) == 2
    assert held(fake_api, MUTATING) == [conditions(tainted=False)["mutate.gpu-webhook.io"]]


def test_a_replica_without_the_lease_writes_nothing(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    assert replica(client, "pod-a").lease.try_hold()
    assert replica(client, "pod-b").sync(conditions(tainted=True)) == []
    assert config_writes(fake_api) == []


def test_a_configuration_changed_since_it_was_read_is_not_overwritten(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    def helm_upgrade_between_read_and_write(req: Request) -> None:
        if req.method == "PATCH" and req.path == MUTATING:
            fake_api.put_object(MUTATING, fake_api.objects[MUTATING])  # a new resourceVersion

    fake_api.intercept = helm_upgrade_between_read_and_write  # type: ignore[assignment]
    sync = replica(client, "pod-a")
    assert sync.sync(conditions(tainted=True)) == ["validatingwebhookconfigurations"]
    assert held(fake_api, MUTATING) == [None]
    fake_api.intercept = None
    assert sync.sync(conditions(tainted=True)) == ["mutatingwebhookconfigurations"]
