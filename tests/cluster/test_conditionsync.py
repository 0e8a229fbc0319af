"""Runtime sync of the match conditions through the replayed API server: the Lease holder
writes the conditions of the rules in force into its own two webhook configurations (by
name, nothing else), again when the rules change, never while another replica holds the
Lease, and not over a configuration changed since it read it."""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import FakeApiServer, Request
from tests.cluster.replayserver import fixture
from tests.cluster.ruleobjects import gpu_policy
from webhook.cluster.apiclient import ApiClient, ApiEndpoint
from webhook.cluster.conditionsync import (
    GROUP_PATH,
    LEASE_NAME,
    LEASE_SECONDS,
    PERIOD_SECONDS,
    ConditionKeeper,
    ConditionSync,
    wanted_conditions,
)
from webhook.cluster.lease import Lease
from webhook.engine.evaluation.matchconditions import match_conditions
from webhook.engine.evaluation.request import InventoryView
from webhook.engine.resources.inventory import Inventory, node_from_json
from webhook.files.rulefiles import RuleStore, load_policy
from webhook.files.ruleobjects import RuleObject

ROOT = Path(__file__).resolve().parents[2]
MUTATING = f"{GROUP_PATH}/mutatingwebhookconfigurations/gpu-webhook"
VALIDATING = f"{GROUP_PATH}/validatingwebhookconfigurations/gpu-webhook"
OTHER = f"{GROUP_PATH}/mutatingwebhookconfigurations/someone-elses"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/gpu-webhook/leases/{LEASE_NAME}"
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


# --- the keeper: what `serve --sync-match-conditions` runs in the pod's watcher -----------

NODES = json.loads(fixture("node-list.json"))["items"]  # every GPU node tainted nvidia.com/gpu
SHM_FOR_EVERY_POD = {
    "match": {"gpuCount": {"min": 0}, "namespaces": ["team-a"]},
    "mutate": {"shm": {"sizeLimit": "1Gi"}},
}


def view_of(nodes: list[dict[str, Any]]) -> InventoryView:
    return InventoryView(Inventory([node_from_json(n) for n in nodes]))


def untainted_gpu_node() -> dict[str, Any]:
    node = copy.deepcopy(next(n for n in NODES if n["metadata"]["name"] == "gpu-t4-0"))
    node["metadata"]["name"] = "gpu-t4-untainted"
    node["spec"].pop("taints", None)
    return node


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now

    def seconds(self) -> float:
        return (self.now - T0).total_seconds()


@dataclass
class Replica:
    keeper: ConditionKeeper
    results: list[str]
    objects: list[RuleObject]


def keeper_replica(
    client: ApiClient,
    identity: str,
    *,
    clock: Clock,
    rules: Path = ROOT / "rules",
    view: Callable[[], InventoryView | None] = lambda: view_of(NODES),
) -> Replica:
    results: list[str] = []
    objects: list[RuleObject] = []
    lease = Lease(
        client,
        namespace="gpu-webhook",
        name=LEASE_NAME,
        identity=identity,
        duration_seconds=LEASE_SECONDS,
        clock=clock,
    )
    sync = ConditionSync(client, lease=lease, on_result=results.append)
    keeper = ConditionKeeper(
        sync=sync,
        rules=lambda: RuleStore(str(rules), objects=lambda: tuple(objects)),
        view=view,
        clock=clock.seconds,
    )
    return Replica(keeper, results, objects)


def wanted_now(replica: Replica, view: InventoryView | None) -> Any:
    assert replica.keeper.store is not None
    return wanted_conditions(replica.keeper.store.current.policy, view)


def test_the_keeper_writes_the_conditions_of_tainted_gpu_nodes_once(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    a = keeper_replica(client, "pod-a", clock=Clock())
    assert a.keeper.step()
    assert held(fake_api, MUTATING) == [conditions(tainted=True)["mutate.gpu-webhook.io"]]
    assert a.results == ["written", "written"]
    before = len(fake_api.requests)
    assert not a.keeper.step()  # same rules, same nodes, within the period: no request
    assert len(fake_api.requests) == before


@pytest.mark.parametrize("where", ["object", "file"])
def test_a_rule_acting_on_pods_asking_for_no_gpu_is_patched_in(
    fake_api: FakeApiServer, client: ApiClient, tmp_path: Path, where: str
) -> None:
    shutil.copytree(ROOT / "rules", tmp_path, dirs_exist_ok=True)
    a = keeper_replica(client, "pod-a", clock=Clock(), rules=tmp_path)
    a.keeper.step()
    before = held(fake_api, MUTATING)
    assert "team-a" not in json.dumps(before)
    policy = gpu_policy("team-shm", SHM_FOR_EVERY_POD)
    if where == "object":
        a.objects.append(RuleObject.of(policy))
    else:
        document = {k: policy[k] for k in ("apiVersion", "kind", "spec")}
        (tmp_path / "50-team.yaml").write_text(
            yaml.safe_dump({**document, "metadata": {"name": "team-shm"}})
        )
    assert a.keeper.step()
    after = held(fake_api, MUTATING)
    assert after != before
    assert after == [wanted_now(a, view_of(NODES))["mutate.gpu-webhook.io"]]
    assert "team-a" in json.dumps(after)  # the pods of its namespace are called
    assert a.results == ["written"] * 4


def test_only_the_lease_holder_writes_and_another_takes_over_when_it_is_gone(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    clock = Clock()
    a = keeper_replica(client, "pod-a", clock=clock)
    b = keeper_replica(client, "pod-b", clock=clock)
    assert a.keeper.step()
    assert b.keeper.step()
    assert (a.results, b.results) == (["written", "written"], [])
    for replica in (a, b):  # the rules change on both
        replica.objects.append(RuleObject.of(gpu_policy("team-shm", SHM_FOR_EVERY_POD)))
        replica.keeper.step()
    assert (a.results[2:], b.results) == (["written", "written"], [])
    assert fake_api.objects[LEASES]["spec"]["holderIdentity"] == "pod-a"
    clock.now += dt.timedelta(seconds=LEASE_SECONDS + 1)  # pod-a died: its Lease runs out
    fake_api.put_object(MUTATING, without_conditions(fake_api.objects[MUTATING]))
    assert b.keeper.step()
    assert b.results == ["written", "unchanged"]
    assert fake_api.objects[LEASES]["spec"]["holderIdentity"] == "pod-b"


@pytest.mark.parametrize(
    "view",
    [
        pytest.param(lambda: view_of([*NODES, untainted_gpu_node()]), id="untainted-gpu-node"),
        pytest.param(lambda: None, id="nodes-not-synced-yet"),
    ],
)
def test_an_untainted_gpu_node_or_unseen_nodes_write_true(
    fake_api: FakeApiServer, client: ApiClient, view: Callable[[], InventoryView | None]
) -> None:
    seen: list[InventoryView | None] = [view_of(NODES)]
    a = keeper_replica(client, "pod-a", clock=Clock(), view=lambda: seen[-1])
    a.keeper.step()
    assert held(fake_api, MUTATING) == [conditions(tainted=True)["mutate.gpu-webhook.io"]]
    seen.append(view())
    assert a.keeper.step()
    call_everything = [{"name": "may-touch-gpus", "expression": "true"}]
    assert held(fake_api, MUTATING) == [call_everything]
    assert held(fake_api, VALIDATING) == [call_everything, None]


def test_a_configuration_changed_meanwhile_is_read_again_next_turn_never_overwritten(
    fake_api: FakeApiServer, client: ApiClient
) -> None:
    clock = Clock()
    a = keeper_replica(client, "pod-a", clock=clock)

    def argo_cd_self_heal_between_read_and_write(req: Request) -> None:
        if req.method == "PATCH" and req.path == VALIDATING:
            fake_api.put_object(VALIDATING, fake_api.objects[VALIDATING])

    fake_api.intercept = argo_cd_self_heal_between_read_and_write  # type: ignore[assignment]
    a.keeper.step()
    assert a.results == ["written", "conflict"]
    assert held(fake_api, VALIDATING) == [None, None]
    patches = [r.body for r in fake_api.writes() if r.method == "PATCH"]
    assert all(ops[0]["path"] == "/metadata/resourceVersion" for ops in patches)
    fake_api.intercept = None
    assert not a.keeper.step()  # within the period: nothing read
    clock.now += dt.timedelta(seconds=PERIOD_SECONDS)
    assert a.keeper.step()
    assert a.results[2:] == ["unchanged", "written"]
    assert held(fake_api, VALIDATING)[0] == conditions(tainted=True)["validate.gpu-webhook.io"]


def test_an_unreachable_api_server_or_broken_rule_files_never_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gone = ApiClient(ApiEndpoint(host="http://127.0.0.1:9"))
    a = keeper_replica(gone, "pod-a", clock=Clock())
    assert a.keeper.step()
    assert a.results == []  # the Lease could not be confirmed: nothing read or written
    (tmp_path / "broken.yaml").write_text("kind: GPUPolicy\nspec: [")
    b = keeper_replica(gone, "pod-b", clock=Clock(), rules=tmp_path)
    assert not b.keeper.step()
    assert "rule files unusable; match conditions wait for them" in caplog.text
    gone.close()


def without_conditions(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for webhook in out["webhooks"]:
        webhook.pop("matchConditions", None)
    return out
