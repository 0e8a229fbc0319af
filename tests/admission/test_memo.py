"""The decision memo: replicas are judged once, and nothing else is ever answered from it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import INVENTORY, RULES, pod
from webhook.admission.memo import DecisionMemo
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.policy.ruleset import Policy
from webhook.files.inventoryfile import load_inventory
from webhook.files.rulefiles import load_policy

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
