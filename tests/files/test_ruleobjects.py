"""Rule objects merged with the rule files: one broken object is left out (or its last
good version kept) and told why; the files and the other objects stay in force."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.engine.policy.ruleset import PolicyError
from webhook.files.rulefiles import RuleStore, compile_rules, read_rule_files
from webhook.files.ruleobjects import RuleObject, Verdict

ROOT = Path(__file__).resolve().parents[2]
API = "gpu-webhook.io/v1alpha1"
SETTINGS = f"apiVersion: {API}\nkind: GPUSettings\nmetadata: {{name: settings}}\nspec: {{}}\n"


def policy(name: str, spec: dict[str, Any], *, generation: int = 1) -> RuleObject:
    """A GPUPolicy as the API server serves it: metadata it adds, a status."""
    return RuleObject.of(
        {
            "apiVersion": API,
            "kind": "GPUPolicy",
            "metadata": {
                "name": name,
                "generation": generation,
                "resourceVersion": str(100 + generation),
                "uid": f"uid-{name}",
                "creationTimestamp": "2026-12-01T10:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": spec,
            "status": {"observedGeneration": generation - 1},
        }
    )


MAX_FOUR = {"validate": [{"maxGPUsPerPod": 4}]}
TYPO = {"validate": [{"maxGPUsPerPd": 4}]}


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    (tmp_path / "00-settings.yaml").write_text(SETTINGS)
    return tmp_path


def merged(rules: Path, *objects: RuleObject, in_force: Any = None) -> Any:
    return compile_rules(
        read_rule_files(str(rules)), directory=str(rules), objects=objects, in_force=in_force
    )


def test_a_valid_object_is_in_force_beside_the_files(rules: Path) -> None:
    result = merged(rules, policy("team-a", MAX_FOUR))
    assert result.policy.rule_names == ("team-a",)
    assert result.verdicts == {("GPUPolicy", "team-a"): Verdict(1)}
    assert result.verdicts[("GPUPolicy", "team-a")].message == "in force"


def test_a_broken_object_is_left_out_and_told_rules_lints_words(rules: Path) -> None:
    result = merged(rules, policy("team-a", MAX_FOUR), policy("team-b", TYPO))
    assert result.policy.rule_names == ("team-a",)
    verdict = result.verdicts[("GPUPolicy", "team-b")]
    assert not verdict.ready
    (problem,) = verdict.problems
    assert problem.startswith(
        'spec.validate[0]: unknown check "maxGPUsPerPd" (did you mean "maxGPUsPerPod"?)'
    )
    assert verdict.message.endswith("(not in force)")


def test_the_last_good_version_of_a_broken_object_stays_in_force(rules: Path) -> None:
    first = merged(rules, policy("team-a", MAX_FOUR))
    second = merged(rules, policy("team-a", TYPO, generation=2), in_force=first.in_force)
    assert second.policy.rule_names == ("team-a",)
    assert (second.policy.rules[0].checks[0].kind, second.policy.rules[0].checks[0].value) == (
        "maxGPUsPerPod",
        4,
    )
    verdict = second.verdicts[("GPUPolicy", "team-a")]
    assert (verdict.ready, verdict.generation, verdict.kept_generation) == (False, 2, 1)
    assert verdict.message.endswith("(generation 1 stays in force)")


def test_a_name_in_both_the_files_and_the_cluster_is_the_objects_error(rules: Path) -> None:
    (rules / "10-team.yaml").write_text(
        f"apiVersion: {API}\nkind: GPUPolicy\nmetadata: {{name: team-a}}\nspec: {{}}\n"
    )
    result = merged(rules, policy("team-a", MAX_FOUR))
    assert result.policy.rules[0].checks == ()  # the file's rule, not the object's
    (problem,) = result.verdicts[("GPUPolicy", "team-a")].problems
    assert problem.startswith("metadata.name: GPUPolicy team-a is defined in the rule files too")
    assert "10-team.yaml" in problem


def test_a_second_gpusettings_is_refused(rules: Path) -> None:
    settings = RuleObject.of(
        {"apiVersion": API, "kind": "GPUSettings", "metadata": {"name": "more"}, "spec": {}}
    )
    (problem,) = merged(rules, settings).verdicts[("GPUSettings", "more")].problems
    assert "only one GPUSettings is allowed" in problem


def test_broken_files_are_refused_whole_as_before(rules: Path) -> None:
    (rules / "10-bad.yaml").write_text(
        f"apiVersion: {API}\nkind: GPUPolicy\nmetadata: {{name: x}}\nspec: {{bogus: 1}}\n"
    )
    with pytest.raises(PolicyError, match="unknown field"):
        merged(rules, policy("team-a", MAX_FOUR))


def test_the_store_reloads_when_an_object_changes_but_not_when_its_status_does(
    rules: Path,
) -> None:
    served: list[RuleObject] = []
    store = RuleStore(str(rules), objects=lambda: served)
    served.append(policy("team-a", MAX_FOUR))
    assert store.reload_if_changed() is True
    assert store.current.policy.rule_names == ("team-a",)
    served[0] = RuleObject(
        "GPUPolicy", "team-a", 1, "999", policy("team-a", MAX_FOUR).body
    )  # a status write: a new resourceVersion, the same document
    assert store.reload_if_changed() is None
    served.clear()
    assert store.reload_if_changed() is True
    assert store.current.policy.rule_names == ()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        pytest.param(MAX_FOUR, (), id="valid"),
        pytest.param(
            {"match": {"namespace": ["a"]}},
            'spec.match: unknown field "namespace" (did you mean "namespaces"?)',
            id="a-misspelt-field",
        ),
        pytest.param(
            {"validate": [{"maxGPUsPerPod": -1}]},
            "spec.validate[0]: maxGPUsPerPod: must be 0 or more, not -1",
            id="a-bad-value",
        ),
    ],
)
def test_judging_an_object_before_it_is_stored(rules: Path, spec: Any, said: Any) -> None:
    store = RuleStore(str(rules), objects=lambda: [policy("team-a", MAX_FOUR)])
    problems = store.judge(policy("team-b", spec))
    assert problems == () if said == () else problems[0].startswith(said), problems


def test_an_update_is_judged_in_place_of_the_version_it_replaces(rules: Path) -> None:
    store = RuleStore(str(rules), objects=lambda: [policy("team-a", MAX_FOUR)])
    assert store.judge(policy("team-a", {"validate": [{"maxGPUsPerPod": 2}]}, generation=2)) == ()


def test_a_restarted_server_keeps_the_version_the_status_says_was_in_force(rules: Path) -> None:
    """The API server stores only the broken version; its status keeps the good one."""
    raw = {
        "apiVersion": API,
        "kind": "GPUPolicy",
        "metadata": {"name": "team-a", "generation": 2},
        "spec": TYPO,
        "status": {"observedGeneration": 2, "inForce": {"generation": 1, "spec": MAX_FOUR}},
    }
    result = merged(rules, RuleObject.of(raw))  # no memory of an earlier merge
    assert result.policy.rule_names == ("team-a",)
    verdict = result.verdicts[("GPUPolicy", "team-a")]
    assert (verdict.ready, verdict.kept_generation) == (False, 1)
    assert RuleObject.from_wire(RuleObject.of(raw).wire()) == RuleObject.of(raw)
