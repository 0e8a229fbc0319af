"""Properties of the bounds (issue 35): no count, selector or GPU number in a review makes the
engine's work grow past its bound. Memory is measured with tracemalloc around one
evaluation, CEL work with the review's step budget."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.enforcement.mutators import MAX_RENDERED_GPU_INDEXES, render_env
from webhook.engine.evaluation.evaluate import evaluate
from webhook.engine.evaluation.request import InventoryView, Request
from webhook.engine.resources.cel.celbudget import EVALUATION_STEPS, REVIEW_STEPS, review_budget
from webhook.engine.resources.cel.deviceselectors import Selector, SelectorError, compile_selector
from webhook.engine.resources.devices import ALLOCATION_RESULTS_MAX_SIZE, device_from_json
from webhook.files.inventoryfile import load_inventory_file
from webhook.files.rulefiles import load_policy

ROOT = Path(__file__).resolve().parents[3]
VIEW: InventoryView = load_inventory_file(
    str(ROOT / "tests" / "cases" / "_inventories" / "dra.yaml")
).view()
POLICY = load_policy(str(ROOT / "rules"))
# What one evaluation may allocate at its peak, whatever the counts: far below what a list
# as long as a count of 2**31 would take (16 GiB), far above a normal review's need.
PEAK_BYTES = 8 * 1024 * 1024
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

counts = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**70),
    st.sampled_from([0, 1, 8, 32, 33, 2**31 - 1, 2**63 - 1, 2**63]),
)
sub_requests = st.fixed_dictionaries(
    {"deviceClassName": st.sampled_from(["gpu.nvidia.com", "mig.nvidia.com"]), "count": counts},
    optional={"allocationMode": st.sampled_from(["ExactCount", "All"])},
)
requests = st.one_of(
    sub_requests.map(lambda s: {"exactly": s}),
    st.lists(sub_requests, min_size=1, max_size=10).map(
        lambda subs: {"firstAvailable": [{"name": f"s{i}", **s} for i, s in enumerate(subs)]}
    ),
)


def _claim(items: list[dict[str, Any]]) -> dict[str, Any]:
    named = [{"name": f"r{i}", **r} for i, r in enumerate(items)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "generated", "namespace": "default"},
        "spec": {"devices": {"requests": named}},
    }


def _peak(obj: dict[str, Any]) -> tuple[bool, int]:
    tracemalloc.start()
    try:
        decision = evaluate(Request(obj), policy=POLICY, inventory=VIEW)
        return decision.allowed, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _least(request: dict[str, Any]) -> int:
    subs = [request["exactly"]] if "exactly" in request else request["firstAvailable"]
    return min(1 if s.get("allocationMode") == "All" else s["count"] for s in subs)


@SETTINGS
@given(items=st.lists(requests, min_size=1, max_size=40))
def test_no_claim_count_makes_a_review_grow_past_its_bound(items: list[dict[str, Any]]) -> None:
    allowed, peak = _peak(_claim(items))
    assert peak < PEAK_BYTES, f"{peak / 2**20:.1f} MiB"
    if sum(max(_least(r), 1) for r in items) > ALLOCATION_RESULTS_MAX_SIZE:
        assert not allowed  # never allocated: more than a claim gets, or refused outright


@SETTINGS
@given(count=st.integers(min_value=1, max_value=10**15))
def test_no_gpu_count_of_a_pod_makes_a_review_grow_past_its_bound(count: int) -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "many", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04",
                    "resources": {
                        "limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": str(count)}
                    },
                }
            ]
        },
    }
    _, peak = _peak(obj)
    assert peak < PEAK_BYTES, f"{peak / 2**20:.1f} MiB"


@SETTINGS
@given(count=st.integers(min_value=1, max_value=10**15))
def test_gpu_indexes_are_rendered_within_their_bound(count: int) -> None:
    value = render_env("{gpuIndexes}", count)
    if count > MAX_RENDERED_GPU_INDEXES:
        assert value is None
    else:
        assert value is not None
        assert value.count(",") == count - 1


DEVICE = device_from_json(
    {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "index": {"int": 3}}},
    driver="gpu.nvidia.com",
    pool="node-a",
).view()


@st.composite
def comprehensions(draw: st.DrawFn) -> str:
    """Nested comprehensions over literal lists or the device's maps: the shapes whose
    cost multiplies."""
    depth = draw(st.integers(min_value=1, max_value=6))
    body = "true"
    for level in range(depth):
        macro = draw(st.sampled_from(["all", "exists", "exists_one", "filter", "map"]))
        size = draw(st.integers(min_value=0, max_value=12))
        source = draw(
            st.sampled_from(
                ["[" + ",".join(str(i) for i in range(size)) + "]", "device.attributes"]
            )
        )
        var = f"v{level}"
        inner = body if macro not in ("filter", "map") else f"{body} == {body}"
        body = f"{source}.{macro}({var}, {inner})"
        if macro in ("filter", "map"):
            body = f"size({body}) >= 0"
    return body


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions=st.lists(comprehensions(), min_size=1, max_size=12))
def test_no_selector_makes_cel_work_grow_past_the_budgets(expressions: list[str]) -> None:
    refused: list[SelectorError] = []
    with review_budget() as budget:
        for expression in expressions:
            compiled = compile_selector(expression)
            if isinstance(compiled, SelectorError):
                assert compiled.unsupported  # refused by its estimate: not a verdict
                continue
            assert isinstance(compiled, Selector)
            before = budget.left
            try:
                compiled.matches(DEVICE)
            except SelectorError as exc:
                refused.append(exc)
            assert before - budget.left <= EVALUATION_STEPS + 1
    # The review never goes past its budget by more than the step that ran it out.
    assert budget.left >= -1, REVIEW_STEPS - budget.left
    assert all(exc.unsupported for exc in refused), refused
