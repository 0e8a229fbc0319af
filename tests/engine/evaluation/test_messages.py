"""Every denial and warning names what was asked and what is missing: over generated pods and
inventories (tests/generated.py), with and without an inventory, no message has an empty part
(an empty list joined in, a value that was never filled) and none is said twice.

And the webhook's own affinity (keeping a multi-slot container off nodes whose device plugin
would fail it) is idempotent there: the mutated pod, judged again, gets no further patch."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.generated import (
    DevicePlugin,
    GeneratedNode,
    device_plugins,
    inventories,
    memory_rules,
    pods,
    policy,
)
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import NO_INVENTORY, InventoryView, Request
from webhook.engine.policy.decision import Decision
from webhook.engine.resources.inventory import Inventory, node_from_json

# What an empty part leaves behind in a sentence built from parts.
_HOLES = re.compile(r"\(\s*\)|\[\s*\]|\s[,;.:]|,\s*,|;\s*;|\s{2,}|\bNone\b|: \.|^\W|\w \)")


def empty_parts(text: str) -> list[str]:
    """The traces of an empty part in ``text``: a hole the pattern finds, or an empty item
    of a list joined with ", " or "; "."""
    holes = [m.group(0) for m in _HOLES.finditer(text)]
    for separator in (", ", "; "):
        holes += ["<empty item>" for item in text.split(separator) if not item.strip()]
    return holes


def repeated_sentences(text: str) -> list[str]:
    sentences = [s.strip() for s in re.split(r"(?<=[.?])\s+", text) if s.strip()]
    return [s for i, s in enumerate(sentences) if s in sentences[:i]]


def _judge(
    pod: dict[str, Any],
    nodes: list[GeneratedNode] | None,
    plugin: DevicePlugin,
    *,
    tolerate: bool,
    memory: dict[str, Any] | None,
) -> Decision:
    view = (
        NO_INVENTORY
        if nodes is None
        else InventoryView(Inventory([node_from_json(n.as_json()) for n in nodes]))
    )
    rules = policy(tolerate=tolerate, memory=memory, plugin=plugin)
    return evaluate(Request(pod), policy=rules, inventory=view)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.one_of(st.none(), inventories(conditions=True)),
    pod=pods(),
    tolerate=st.booleans(),
    memory=memory_rules,
    plugin=device_plugins,
)
def test_no_message_has_an_empty_part_and_none_is_said_twice(
    nodes: list[GeneratedNode] | None,
    pod: dict[str, Any],
    tolerate: bool,
    memory: dict[str, Any] | None,
    plugin: DevicePlugin,
) -> None:
    decision = _judge(pod, nodes, plugin, tolerate=tolerate, memory=memory)

    texts = [f.message for f in decision.findings] + [f.summary for f in decision.findings]
    texts += list(decision.warnings) + list(decision.notices)
    for text in texts:
        assert text.strip(), decision.findings
        assert not empty_parts(text), (text, empty_parts(text))
        assert not repeated_sentences(text), (text, repeated_sentences(text))
    messages = [f.message for f in decision.findings]
    assert len(messages) == len(set(messages)), messages
    assert len(decision.warnings) == len(set(decision.warnings)), decision.warnings


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=inventories(conditions=True), pod=pods(), plugin=device_plugins)
def test_the_affinity_off_refusing_nodes_is_added_once(
    nodes: list[GeneratedNode], pod: dict[str, Any], plugin: DevicePlugin
) -> None:
    first = _judge(pod, nodes, plugin, tolerate=True, memory=None)
    assert first.mutated is not None

    again = _judge(dict(first.mutated), nodes, plugin, tolerate=True, memory=None)

    assert list(again.patch) == []
    assert again.allowed == first.allowed


def test_the_hole_finder_finds_the_holes_it_is_for() -> None:
    assert empty_parts("the pod requests , and no node it can use has ().")
    assert empty_parts("offered: a, , b")
    assert empty_parts("ask for None")
    assert not empty_parts('container "main" asks for 2 nvidia.com/gpu; ask for 1.')
