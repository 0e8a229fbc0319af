"""The decision memo: replicas are judged once, and nothing else is ever answered from it."""

from __future__ import annotations

import copy
import gc
import json
import tracemalloc
from typing import Any

import pytest

from tests.builders import INVENTORY, RULES, pod, review
from webhook.admission.inventory import StaticInventorySource
from webhook.admission.memo import POD_MEMO_BYTES, DecisionMemo, memo_bytes_per_worker
from webhook.admission.review import parse_review
from webhook.admission.service import AdmissionService
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import Policy
from webhook.files.inventoryfile import load_inventory
from webhook.files.rulefiles import RuleStore, load_policy

POLICY = load_policy(str(RULES))
VIEW = InventoryView(load_inventory(str(INVENTORY)))


class CountingEngine:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
        self.calls += 1
        return evaluate(request, policy=policy, inventory=inventory)


def replica(name: str, *, gpus: int = 1) -> dict[str, Any]:
    obj = pod(gpus=gpus, name="trainer")
    obj["metadata"].update(
        name=name,
        generateName="trainer-",
        uid=f"uid-{name}",
        ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer"}],
    )
    return obj


def decide(memo: DecisionMemo, request: Request, **context: Any) -> Decision:
    return memo.judge(
        request, policy=context.get("policy", POLICY), inventory=context.get("view", VIEW)
    ).decision


def test_replicas_that_differ_only_in_identity_share_the_engines_answer_from_the_second_on():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine)
    fresh = evaluate(Request(replica("trainer-c")), policy=POLICY, inventory=VIEW)

    first = decide(memo, Request(replica("trainer-a")))
    second = decide(memo, Request(replica("trainer-b")))
    later = [decide(memo, Request(replica(f"trainer-{n}"))) for n in "cdef"]

    assert engine.calls == 2  # the first sight leaves only the key; the second keeps it
    assert (memo.hits, memo.misses) == (4, 2)
    for decision in (first, second, *later):
        assert list(decision.patch) == list(fresh.patch)
        assert decision.findings == fresh.findings
        assert decision.allowed is fresh.allowed


def test_a_pod_seen_once_leaves_no_decision_behind():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine)
    for gpus in (1, 2, 3, 4):
        decide(memo, Request(replica("a", gpus=gpus)))

    assert memo._judgements == {}
    decide(memo, Request(replica("b", gpus=1)))
    decide(memo, Request(replica("c", gpus=1)))
    assert engine.calls == 5  # gpus=1 was judged again once, then answered from the memo


def test_a_remembered_decision_does_not_hold_on_to_the_object():
    memo = DecisionMemo()
    decide(memo, Request(replica("trainer-a")))
    decide(memo, Request(replica("trainer-b")))

    assert decide(memo, Request(replica("trainer-c"))).mutated is None


def test_objects_whose_hashes_collide_never_share_a_decision():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine, weak_hash=lambda _text: 0)  # every object collides
    for name in ("a", "b"):  # one GPU, seen twice: kept
        decide(memo, Request(replica(name)))

    too_big = [decide(memo, Request(replica(name, gpus=99))) for name in ("c", "d")]

    assert engine.calls == 4  # neither 99-GPU pod was answered with the one-GPU decision
    assert [decision.allowed for decision in too_big] == [False, False]
    assert decide(memo, Request(replica("f"))) is not None
    assert engine.calls == 4  # the one-GPU decision still answers its own replicas


def _other_policy() -> Policy:
    return load_policy(str(RULES))


def _other_view() -> InventoryView:
    return InventoryView(load_inventory(str(INVENTORY)))


@pytest.mark.parametrize(
    ("second", "context"),
    [
        pytest.param(Request(replica("b", gpus=2)), {}, id="another spec"),
        pytest.param(Request(replica("b"), namespace="team-a"), {}, id="another namespace"),
        pytest.param(
            Request(replica("b"), namespace_labels={"team": "a"}), {}, id="namespace labels"
        ),
        pytest.param(
            Request(replica("b"), operation="UPDATE", old_object=replica("a")), {}, id="update"
        ),
        pytest.param(Request(replica("b")), {"policy": _other_policy()}, id="reloaded rules"),
        pytest.param(Request(replica("b")), {"view": _other_view()}, id="new inventory snapshot"),
        pytest.param(
            Request(replica("b")),
            {"view": InventoryView(None, problem="node inventory is stale")},
            id="inventory gone stale",
        ),
        pytest.param(
            Request(replica("b")),
            {"view": InventoryView(VIEW.snapshot, runtime_classes=frozenset({"nvidia"}))},
            id="runtime classes changed",
        ),
    ],
)
def test_anything_else_the_engine_reads_makes_it_judge_again(second, context):
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine)
    decide(memo, Request(replica("a")))

    decide(memo, second, **context)

    assert engine.calls == 2


def test_a_reload_empties_the_memo_so_old_rules_never_answer_again():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine)
    decide(memo, Request(replica("a")))
    decide(memo, Request(replica("a")), policy=_other_policy())

    decide(memo, Request(replica("b")))

    assert engine.calls == 3


def test_objects_over_the_size_cap_are_not_remembered():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine, max_object_bytes=200)
    decide(memo, Request(replica("a")))

    decide(memo, Request(replica("b")))

    assert engine.calls == 2


def test_the_memo_keeps_at_most_max_entries_dropping_the_oldest():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine, max_entries=2)
    for gpus in (1, 2, 3):  # each seen twice: kept; the third evicts the first
        decide(memo, Request(replica("a", gpus=gpus)))
        decide(memo, Request(replica("b", gpus=gpus)))
    assert engine.calls == 6

    decide(memo, Request(replica("c", gpus=3)))
    assert engine.calls == 6
    decide(memo, Request(replica("c", gpus=1)))
    assert engine.calls == 7


def test_keys_seen_once_are_bounded_too():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine, max_entries=1)  # at most 4 keys seen once
    for gpus in range(1, 7):
        decide(memo, Request(replica("a", gpus=gpus)))

    assert len(memo._seen) == 4
    decide(memo, Request(replica("b", gpus=1)))  # forgotten: seen once again, not kept
    assert memo._judgements == {}
    decide(memo, Request(replica("b", gpus=6)))  # still known: kept now
    assert len(memo._judgements) == 1


def test_the_object_given_is_never_modified():
    obj = replica("a")
    original = copy.deepcopy(obj)

    decide(DecisionMemo(), Request(obj))

    assert obj == original


# --- bounded in bytes (issue 27) -----------------------------------------------------------


def flood_pod(seed: int, containers: int, *, privileged: bool = False, name: str = "c") -> dict:
    """A pod that can land on a GPU node, with many containers: the GPUs are hidden from each
    (a patch many times the pod), and privileged ones are denied (a finding each)."""
    listed = []
    for i in range(containers):
        container: dict[str, Any] = {"name": f"{name}{i}-{seed}", "image": "busybox"}
        if privileged:
            container["securityContext"] = {"privileged": True}
        listed.append(container)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"flood-{seed}", "namespace": "default"},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": listed,
        },
    }


def service_with(memo: DecisionMemo) -> AdmissionService:
    source = StaticInventorySource(str(INVENTORY))
    source.start()
    return AdmissionService(rules=RuleStore(str(RULES)), inventory=source, memo=memo)


def send_twice_to_both_endpoints(service: AdmissionService, obj: dict) -> None:
    body = json.dumps(review(obj))
    for _ in range(2):
        for mutate in (True, False):
            service.review(parse_review(body), mutate=mutate)


def held_by(memo: DecisionMemo) -> int:
    """What the memo's entries really hold, as tracemalloc sees it (tracing must be on)."""
    gc.collect()
    full = tracemalloc.get_traced_memory()[0]
    memo._judgements.clear()
    memo._seen.clear()
    gc.collect()
    return full - tracemalloc.get_traced_memory()[0]


def test_a_flood_of_distinct_large_pods_each_sent_twice_stays_within_the_byte_bound():
    bound = 3 * 1024 * 1024
    memo = DecisionMemo(max_bytes=bound, max_entry_bytes=bound // 4)
    service = service_with(memo)
    kept_at_most = 0
    tracemalloc.start()
    try:
        for seed in range(40):  # each about 0.4 MB counted: kept, then pushed out
            send_twice_to_both_endpoints(service, flood_pod(seed, 300))
            assert memo.bytes <= bound
            kept_at_most = max(kept_at_most, len(memo._judgements))
        counted = memo.bytes
        assert counted > bound // 2  # the flood filled it
        assert held_by(memo) <= counted  # and the count is not below what is really held
    finally:
        tracemalloc.stop()
    assert kept_at_most < 40


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(flood_pod(0, 400), id="a patch per container"),
        pytest.param(flood_pod(0, 400, privileged=True), id="a denial per container"),
        pytest.param(flood_pod(0, 200, privileged=True, name="ç"), id="text beyond ASCII"),
        pytest.param(replica("small"), id="a one-GPU pod"),
    ],
)
def test_an_entry_is_counted_at_no_less_than_tracemalloc_measures(obj):
    memo = DecisionMemo(max_bytes=1 << 40, max_entry_bytes=1 << 40)
    service = service_with(memo)
    tracemalloc.start()
    try:
        for seed in range(8):
            copy_of = copy.deepcopy(obj)
            copy_of["spec"]["containers"][0]["image"] = f"busybox:{seed}"  # eight specs
            send_twice_to_both_endpoints(service, copy_of)
        assert len(memo._judgements) == 8
        counted = memo.bytes
        assert held_by(memo) <= counted
    finally:
        tracemalloc.stop()


def test_an_entry_over_the_per_entry_cap_is_not_kept_and_evicts_nothing():
    engine = CountingEngine()
    memo = DecisionMemo(engine=engine, max_bytes=1 << 30, max_entry_bytes=50_000)
    for name in ("a", "b"):  # a small pod, kept
        decide(memo, Request(replica(name)))
    big = flood_pod(0, 200)  # about 0.3 MB counted

    for _ in range(3):
        decide(memo, Request(big))

    assert engine.calls == 2 + 3  # judged every time
    assert len(memo._judgements) == 1
    decide(memo, Request(replica("c")))
    assert engine.calls == 5  # the small pod's decision is still there


def test_an_answer_that_takes_an_entry_past_the_cap_drops_the_entry():
    memo = DecisionMemo(max_bytes=1 << 30)
    service = service_with(memo)
    obj = flood_pod(0, 300)
    body = json.dumps(review(obj))
    service.review(parse_review(body), mutate=False)
    service.review(parse_review(body), mutate=False)
    (entry,) = memo._judgements.values()
    memo.max_entry_bytes = entry.cost + 1000  # room for no answer with the patch in it

    service.review(parse_review(body), mutate=True)

    assert memo._judgements == {}
    assert memo.bytes == 0


def test_the_count_follows_entries_out_and_a_new_context_starts_from_zero():
    memo = DecisionMemo(max_entries=2)
    for gpus in (1, 2, 3):
        decide(memo, Request(replica("a", gpus=gpus)))
        decide(memo, Request(replica("b", gpus=gpus)))
        assert memo.bytes == sum(j.cost for j in memo._judgements.values())

    decide(memo, Request(replica("a")), policy=_other_policy())

    assert memo.bytes == 0


def test_the_pods_memo_bytes_are_shared_by_its_workers():
    assert memo_bytes_per_worker(2) == POD_MEMO_BYTES // 2
    assert memo_bytes_per_worker(4) == POD_MEMO_BYTES // 4


def test_an_entry_that_leaves_is_freed_at_once_not_at_the_next_full_collection():
    memo = DecisionMemo(max_bytes=1 << 30, max_entry_bytes=1 << 30)
    service = service_with(memo)
    tracemalloc.start()
    try:
        send_twice_to_both_endpoints(service, flood_pod(0, 300))
        gc.collect()
        gc.disable()  # only reference counts free memory from here on
        before = tracemalloc.get_traced_memory()[0]
        memo._drop_oldest()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert freed > 100_000  # the entry's patch and answers, not just its slot
