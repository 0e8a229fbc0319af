"""The bounds on rule sources (issue 41): a rule document past a bound is refused in one line
before the lint, the lint stops after a few problems, and the lint of any document, however
built, allocates little and says little. Memory is measured with tracemalloc around one
judging of a rule object, as ``/validate`` judges it."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.policy.decision import MAX_MESSAGE, MAX_REASON, shorten
from webhook.engine.policy.ruleset import DocumentRef, PolicyError
from webhook.files.jsonvalues import (
    MAX_ENTRIES,
    MAX_PROBLEMS,
    MAX_RULE_BYTES,
    MAX_SET_PROBLEMS,
    MAX_TEXT,
    MAX_VALUES,
    MORE_PROBLEMS,
    oversized,
)
from webhook.files.rulefiles import (
    RuleStore,
    compile_rules,
    load_policy,
    read_rule_files,
    schema_problems,
)
from webhook.files.ruleobjects import RuleObject, Verdict, rule_object_message

ROOT = Path(__file__).resolve().parents[2]
API = "gpu-webhook.io/v1alpha1"
REF = DocumentRef("cluster", -1, "GPUPolicy", "team-a")
# What judging one rule object may allocate at its peak: the 3,000 misspelt checks of the
# issue took 220 MiB, a pod review is held under 8 MiB (tests/engine/evaluation).
PEAK_BYTES = 8 * 1024 * 1024
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORE = RuleStore(str(ROOT / "rules"))


def gpu_policy(spec: Any, *, metadata: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GPUPolicy",
        "metadata": {"name": "team-a"} if metadata is None else metadata,
        "spec": spec,
    }


def judged(body: dict[str, Any]) -> tuple[tuple[str, ...], int]:
    """What ``/validate`` refuses ``body`` for, and the peak bytes it took to say so."""
    tracemalloc.start()
    try:
        problems = STORE.judge(RuleObject.of(body))
        return problems, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("spec", "field", "said"),
    [
        pytest.param(
            {"validate": [{"maxGPUsPerPood": 1}] * 3000},
            "spec.validate",
            "3,000 entries, more than the 256",
            id="3000-misspelt-checks",
        ),
        pytest.param(
            {"validate": [1] * 10_000},
            "spec.validate",
            "10,000 entries, more than the 256",
            id="ten-thousand-ones",
        ),
        pytest.param(
            {"match": {"namespaces": ["a"] * (MAX_ENTRIES + 1)}},
            "spec.match.namespaces",
            f"{MAX_ENTRIES + 1} entries",
            id="a-long-list-of-namespaces",
        ),
        pytest.param(
            {"validate": [{"allowedProducts": ["p"] * 200} for _ in range(30)]},
            "",
            f"more than {MAX_VALUES:,} values",
            id="many-values-in-short-lists",
        ),
        pytest.param(
            {"description": "x" * (MAX_TEXT + 1)},
            "",
            f"more than {MAX_TEXT:,} characters",
            id="a-long-description",
        ),
    ],
)
def test_a_rule_document_past_a_bound_is_refused_in_one_line_without_the_lint(
    spec: Any, field: str, said: str
) -> None:
    problems = schema_problems(gpu_policy(spec), REF)
    assert [(p.path, said in p.message) for p in problems] == [(field, True)], problems


def test_kubectls_copy_of_the_object_in_an_annotation_is_not_counted_as_its_text() -> None:
    spec = {"description": "d" * (MAX_TEXT // 2), "validate": [{"maxGPUsPerPod": 4}]}
    applied = {"kubectl.kubernetes.io/last-applied-configuration": str(gpu_policy(spec)) * 3}
    metadata = {"name": "team-a", "annotations": applied}
    assert schema_problems(gpu_policy(spec, metadata=metadata), REF) == []


def test_the_lint_stops_after_its_problems_and_says_there_may_be_more() -> None:
    problems = schema_problems(gpu_policy({"validate": [{"maxGPUsPerPood": 1}] * 200}), REF)
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1].message == MORE_PROBLEMS
    assert problems[0].message.startswith('unknown check "maxGPUsPerPood"')


def test_a_rule_set_lint_stops_after_its_problems(tmp_path: Path) -> None:
    broken = "".join(
        f"---\napiVersion: {API}\nkind: GPUPolicy\nmetadata: {{name: p{n}}}\nspec: {{bogus: 1}}\n"
        for n in range(MAX_SET_PROBLEMS * 3)
    )
    (tmp_path / "rules.yaml").write_text(broken)
    with pytest.raises(PolicyError) as raised:
        load_policy(str(tmp_path))
    assert len(raised.value.problems) == MAX_SET_PROBLEMS + 1
    assert raised.value.problems[-1].message == MORE_PROBLEMS


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param([MAX_RULE_BYTES + 1], id="one-file-too-large"),
        pytest.param([MAX_RULE_BYTES // 2, MAX_RULE_BYTES // 2 + 1], id="two-files-together"),
    ],
)
def test_rule_files_past_a_configmaps_size_are_refused_unread(
    tmp_path: Path, sizes: list[int]
) -> None:
    for n, size in enumerate(sizes):
        (tmp_path / f"{n}.yaml").write_text("#" * size)
    with pytest.raises(PolicyError) as raised:
        load_policy(str(tmp_path))
    (problem,) = raised.value.problems
    assert f"{len(sizes) - 1}.yaml: the rule files hold more than 1,024 KiB together" in str(
        problem
    )


@pytest.mark.parametrize("field", ["runtimeClassName", "avoidGPUNodes"])
def test_a_long_value_is_quoted_clipped(field: str) -> None:
    value = "a" * 60_000 + "!"
    mutate = {field: value} if field == "runtimeClassName" else {field: {"nodeLabel": 1}}
    problems = schema_problems(gpu_policy({"mutate": mutate}, metadata={"name": value}), REF)
    assert problems
    assert all(len(p.message) <= MAX_REASON for p in problems), problems


def test_the_shipped_rules_are_within_every_bound() -> None:
    assert load_policy(str(ROOT / "rules")).rule_names


# Rule documents built from anything: the fields of a GPUPolicy and junk, nested, long.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
    st.sampled_from(["maxGPUsPerPod", "maxGPUsPerPood", "x" * 5000]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=400),
        st.dictionaries(
            st.sampled_from(["match", "validate", "mutate", "maxGPUsPerPod", "namespaces", "z"]),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=2000,
)
checks = st.lists(
    st.one_of(
        st.fixed_dictionaries({"maxGPUsPerPod": st.integers(min_value=-3, max_value=9)}),
        st.fixed_dictionaries({"maxGPUsPerPood": scalars}),
        scalars,
        values,
    ),
    max_size=1000,
)
specs = st.one_of(
    values,
    st.fixed_dictionaries({"validate": checks}, optional={"match": values, "mutate": values}),
)
metadata = st.one_of(st.none(), values, st.fixed_dictionaries({"name": scalars}))


@SETTINGS
@given(spec=specs, meta=metadata)
def test_no_rule_object_makes_its_review_grow_past_a_pod_reviews_bound(
    spec: Any, meta: Any
) -> None:
    problems, peak = judged(gpu_policy(spec, metadata=meta))
    assert peak < PEAK_BYTES, f"{peak / 2**20:.1f} MiB"
    assert len(problems) <= MAX_PROBLEMS + 2  # the apiVersion's, and "maybe more"
    assert all(len(p) <= 2 * MAX_REASON for p in problems)
    assert len(rule_object_message("GPUPolicy", "team-a", problems)) <= MAX_MESSAGE


@SETTINGS
@given(document=values)
def test_a_document_is_refused_exactly_when_it_passes_a_bound(document: Any) -> None:
    found = oversized({"spec": document})
    containers, text, entries = _measure(document)
    within = containers <= MAX_VALUES and text <= MAX_TEXT - 4 and entries <= MAX_ENTRIES
    past = containers > MAX_VALUES or text > MAX_TEXT or entries > MAX_ENTRIES
    if within:
        assert found is None
    if past:
        assert found is not None


def _measure(value: Any) -> tuple[int, int, int]:
    """Values, characters and the longest list or map, the slow obvious way."""
    if isinstance(value, str):
        return 0, len(value), 0
    if isinstance(value, list):
        parts = [_measure(v) for v in value]
        own = len(value)
    elif isinstance(value, dict):
        parts = [_measure(v) for v in value.values()]
        parts.append((0, sum(len(k) for k in value), 0))
        own = len(value)
    else:
        return 0, 0, 0
    return (
        own + sum(p[0] for p in parts),
        sum(p[1] for p in parts),
        max([own, *(p[2] for p in parts)]),
    )


@SETTINGS
@given(problems=st.lists(st.text(max_size=3000), max_size=300), name=st.text(max_size=253))
def test_a_rule_objects_denial_is_clipped_as_a_pods_is(problems: list[str], name: str) -> None:
    message = rule_object_message("GPUPolicy", name, problems)
    assert len(message) <= MAX_MESSAGE
    whole = f"GPUPolicy {name}: " + "; ".join(shorten(p, MAX_REASON) for p in problems)
    assert (message == whole) == (len(whole) <= MAX_MESSAGE)


def test_a_rule_objects_denial_names_a_long_name_clipped() -> None:
    problems = judged(gpu_policy({}, metadata={"name": "A" * 60_000}))[0]
    message = rule_object_message("GPUPolicy", "A" * 60_000, problems)
    assert len(message) <= MAX_MESSAGE
    assert "metadata.name" in message


def test_a_rule_objects_status_message_is_clipped() -> None:
    verdict = Verdict(2, tuple("x" * 2000 for _ in range(50)), kept_generation=1)
    assert len(verdict.message) <= MAX_MESSAGE + 40
    assert verdict.message.endswith("(generation 1 stays in force)")
    assert "more reasons left out of this message" in verdict.message


def test_the_watchers_merge_leaves_out_an_object_past_a_bound_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    (tmp_path / "00-settings.yaml").write_text(
        f"apiVersion: {API}\nkind: GPUSettings\nmetadata: {{name: settings}}\nspec: {{}}\n"
    )
    huge = RuleObject.of(gpu_policy({"validate": [{"maxGPUsPerPood": 1}] * 3000}))
    fine = RuleObject.of(gpu_policy({"validate": [{"maxGPUsPerPod": 4}]}, metadata={"name": "b"}))

    merged = compile_rules(
        read_rule_files(str(tmp_path)), directory=str(tmp_path), objects=[huge, fine]
    )

    assert merged.policy.rule_names == ("b",)
    (line,) = merged.verdicts[("GPUPolicy", "team-a")].problems
    assert line.startswith("spec.validate: 3,000 entries, more than the 256")


def test_a_kept_version_past_a_bound_is_not_kept() -> None:
    body = gpu_policy({"validate": [{"maxGPUsPerPod": 4}]})
    body["status"] = {"inForce": {"generation": 1, "spec": {"validate": [1] * 10_000}}}
    assert RuleObject.of(body).kept_version() is None
    body["status"]["inForce"]["spec"] = {"validate": [{"maxGPUsPerPod": 4}]}
    assert RuleObject.of(body).kept_version() is not None
