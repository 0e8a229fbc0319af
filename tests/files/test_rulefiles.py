import json
import shutil
from pathlib import Path

import pytest

from tests.builders import billion_laughs
from webhook.engine.policy.ruleset import PolicyError
from webhook.engine.policy.schema import rules_schema
from webhook.files.lastgood import LastGood
from webhook.files.rulefiles import RuleStore, load_policy

ROOT = Path(__file__).resolve().parents[2]
HEADER = "apiVersion: gpu-webhook.io/v1alpha1\n"


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def problems(directory: Path) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy(str(directory))
    return [str(p) for p in caught.value.problems]


def test_the_shipped_rules_load() -> None:
    policy = load_policy(str(ROOT / "rules"))
    assert policy.rule_names == (
        "gpu-stack",
        "nvidia-gpu-taint",
        "hide-gpus-from-non-gpu-containers",
    )


def test_the_shipped_schema_is_the_generated_one() -> None:
    shipped = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    assert shipped == rules_schema(), "run: gpu-webhook rules schema > schema/rules.schema.json"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            HEADER + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n    tolerate: []\n",
            'a.yaml: doc 1 (GPUPolicy a): spec.mutate: unknown field "tolerate" (did you mean "tolerations"?)',
            id="unknown-key",
        ),
        pytest.param(
            HEADER + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  order: first\n",
            'spec.order: "first" is not a whole number',
            id="wrong-type",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  validate:\n    - maxGPUsPerPod: 2\n      action: block\n",
            "spec.validate[0]",
            id="bad-action",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n    memoryLimit: {fixed: lots}\n",
            'spec.mutate.memoryLimit.fixed: "lots" is not a Kubernetes quantity',
            id="bad-quantity",
        ),
        pytest.param(
            "kind: GPUPolicy\nmetadata: {name: a}\n",
            "apiVersion: must be gpu-webhook.io/v1alpha1",
            id="no-api-version",
        ),
        pytest.param(
            HEADER + "kind: Gadget\nmetadata: {name: a}\nspec: {}\n",
            "kind: must be one of",
            id="unknown-kind",
        ),
        pytest.param(
            HEADER + "kind: GPUPolicyTest\nmetadata: {name: a}\n",
            "kind: GPUPolicyTest is a policy test suite (gpu-webhook test), not a rule document: "
            "keep suites outside the rule directory",
            id="a-policy-test-suite-among-the-rules",
        ),
        pytest.param("a: [\n", "a.yaml:2: not valid YAML", id="not-yaml"),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n"
            + "    memoryLimit: {perGPU: 32Gi, fixed: 64Gi}\n",
            "spec.mutate.memoryLimit: fixed and perGPU conflict: give only one of fixed, perGPU,"
            " inventoryShare",
            id="two-memory-modes",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n"
            + "    memoryLimit: {whenTooLarge: cap}\n",
            "spec.mutate.memoryLimit: give one of fixed, perGPU, inventoryShare",
            id="memory-mode-missing",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n"
            + "    memoryLimit: {perGPU: 32Gi, whenTooLarge: shrink}\n",
            'spec.mutate.memoryLimit.whenTooLarge: "shrink" is not one of',
            id="bad-when-too-large",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  mutate:\n"
            + "    nodeAffinity: {gpuMemory: {min: lots}}\n",
            'spec.mutate.nodeAffinity.gpuMemory.min: "lots" is not a Kubernetes quantity',
            id="bad-gpu-memory",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  validate:\n"
            + "    - minGPUMemory: 0\n",
            "spec.validate[0].minGPUMemory: must be more than zero",
            id="zero-min-gpu-memory",
        ),
        pytest.param(
            HEADER
            + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  validate:\n"
            + "    - wholeGPUsOnly: yes please\n",
            "spec.validate[0]",
            id="whole-gpus-only-not-boolean",
        ),
        pytest.param(
            HEADER + "kind: GPUSettings\nmetadata: {name: a}\nspec:\n  checks:\n"
            "    sharedGPURequest: repair\n",
            'spec.checks.sharedGPURequest: "repair" is not one of',
            id="shared-request-cannot-repair",
        ),
        pytest.param(
            HEADER + "kind: WorkloadKind\nmetadata: {name: a}\nspec:\n  group: example.com\n"
            "  kind: Run\n  templates: [{path: spec.template}]\n"
            "  scale: {specReplicasPath: .status.replicas}\n",
            "spec.scale.specReplicasPath",
            id="a-scale-path-outside-spec",  # the CRD's own rule: a JSON path under .spec
        ),
    ],
)
def test_problems_name_the_file_document_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    write(tmp_path, "a.yaml", text)
    assert any(expected in p for p in problems(tmp_path)), problems(tmp_path)


def test_every_problem_in_every_file_is_reported_at_once(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", HEADER + "kind: GPUPolicy\nmetadata: {name: a}\nspec: {bogus: 1}\n")
    write(
        tmp_path, "b.yaml", HEADER + "kind: GPUNodePool\nmetadata: {name: b}\nspec: {maxNodes: 0}\n"
    )
    found = problems(tmp_path)
    assert any("a.yaml" in p for p in found)
    assert sum("b.yaml" in p for p in found) == 2, "missing allocatable, and maxNodes below 1"


CONFLICT = """\
{header}kind: GPUPolicy
metadata: {{name: {name}}}
spec:
  match: {{namespaces: [{namespace}]}}
  mutate:
    env:
      gpuContainers: [{{name: NCCL_DEBUG, value: {value}}}]
"""


def test_every_new_field_is_accepted(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.yaml",
        HEADER
        + "kind: GPUSettings\nmetadata: {name: s}\nspec:\n  checks:\n"
        + "    sharedGPURequest: warn\n    multipleMIGDevices: deny\n---\n"
        + HEADER
        + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n  validate:\n"
        + "    - minGPUMemory: 40Gi\n      action: warn\n    - wholeGPUsOnly: true\n"
        + "  mutate:\n    nodeAffinity: {gpuMemory: {min: 40Gi}}\n"
        + "    memoryLimit: {perGPU: 32Gi, whenTooLarge: skip}\n",
    )
    policy = load_policy(str(tmp_path))
    assert policy.settings.actions["sharedGPURequest"] == "warn"
    assert policy.settings.actions["multipleMIGDevices"] == "deny"
    (rule,) = policy.rules
    assert [(c.kind, c.value) for c in rule.checks] == [
        ("minGPUMemory", 40 * 2**30),
        ("wholeGPUsOnly", True),
    ]
    assert rule.mutations.required_affinity == (
        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40959"]},
    )
    assert rule.mutations.memory_limit is not None
    assert rule.mutations.memory_limit.when_too_large == "skip"


def test_two_rules_that_write_one_field_differently_are_an_error(tmp_path: Path) -> None:
    write(
        tmp_path, "a.yaml", CONFLICT.format(header=HEADER, name="a", namespace="ml", value="INFO")
    )
    write(
        tmp_path, "b.yaml", CONFLICT.format(header=HEADER, name="b", namespace="ml-*", value="WARN")
    )
    (found,) = problems(tmp_path)
    assert "b.yaml: doc 1 (GPUPolicy b): spec.mutate.env.gpuContainers[NCCL_DEBUG]" in found
    assert 'conflicts with rule "a"' in found


def test_rules_with_disjoint_namespaces_may_write_different_values(tmp_path: Path) -> None:
    write(
        tmp_path, "a.yaml", CONFLICT.format(header=HEADER, name="a", namespace="ml", value="INFO")
    )
    write(
        tmp_path, "b.yaml", CONFLICT.format(header=HEADER, name="b", namespace="web", value="WARN")
    )
    assert len(load_policy(str(tmp_path)).rules) == 2


def test_a_broken_edit_never_replaces_the_last_good_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    store = RuleStore(str(rules))
    good = store.current
    assert store.reload_if_changed() is None
    write(rules, "10-nvidia-tolerations.yaml", "kind: [\n")
    assert store.reload_if_changed() is False
    assert store.current is good
    assert store.last_error is not None
    assert "10-nvidia-tolerations.yaml" in str(store.last_error)
    shutil.copy(ROOT / "rules" / "10-nvidia-tolerations.yaml", rules)
    (rules / "20-hide-gpus.yaml").unlink()
    assert store.reload_if_changed() is True
    assert store.current.policy.rule_names == ("gpu-stack", "nvidia-gpu-taint")
    assert store.current.generation == good.generation + 1


def test_a_broken_edit_put_back_as_it_was_is_no_longer_reported_rejected(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    store = RuleStore(str(rules))
    write(rules, "10-nvidia-tolerations.yaml", "kind: [\n")
    assert store.reload_if_changed() is False
    assert store.last_error is not None
    shutil.copy(ROOT / "rules" / "10-nvidia-tolerations.yaml", rules)
    assert store.reload_if_changed() is None, "the rules in force are the files on disk again"
    assert store.last_error is None
    assert store.current.generation == 1


def test_a_configmap_symlink_swap_is_noticed(tmp_path: Path) -> None:
    """Kubernetes mounts ConfigMaps as ..data -> ..<timestamp>/ and swaps the link."""
    rules = tmp_path / "mount"
    first, second = rules / "..2026_11_29_1", rules / "..2026_11_29_2"
    shutil.copytree(ROOT / "rules", first)
    shutil.copytree(ROOT / "rules", second)
    (second / "20-hide-gpus.yaml").unlink()
    (rules / "..data").symlink_to(first.name)
    for name in ("00-settings.yaml", "10-nvidia-tolerations.yaml", "20-hide-gpus.yaml"):
        (rules / name).symlink_to(Path("..data") / name)
    store = RuleStore(str(rules))
    assert len(store.current.policy.rules) == 2
    (rules / "..data_tmp").symlink_to(second.name)
    (rules / "..data_tmp").replace(rules / "..data")
    (rules / "20-hide-gpus.yaml").unlink()
    assert store.reload_if_changed() is True
    assert store.current.policy.rule_names == ("nvidia-gpu-taint",)


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({}, id="no-files"),
        pytest.param({"00-settings.yaml": "# emptied\n"}, id="only-comments"),
        pytest.param({"README.md": "not a rule file"}, id="no-rule-files"),
    ],
)
def test_a_directory_without_rule_documents_is_not_a_policy(tmp_path: Path, files) -> None:
    tmp_path.mkdir(exist_ok=True)
    for name, text in files.items():
        write(tmp_path, name, text)

    (problem,) = problems(tmp_path)

    assert "holds no rule documents" in problem
    assert "GPUSettings" in problem


def test_emptying_the_rules_on_disk_keeps_the_rules_in_force(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    store = RuleStore(str(rules))
    good = store.current
    for path in rules.iterdir():
        path.unlink()

    assert store.reload_if_changed() is False
    assert store.current is good


def test_one_settings_document_runs_the_built_in_checks_alone(tmp_path: Path) -> None:
    write(tmp_path, "00.yaml", HEADER + "kind: GPUSettings\nmetadata: {name: cluster}\nspec: {}\n")

    assert load_policy(str(tmp_path)).rule_names == ()


def test_a_huge_shm_size_is_out_of_range_at_once(tmp_path: Path) -> None:
    write(
        tmp_path,
        "shm.yaml",
        HEADER + "kind: GPUPolicy\nmetadata: {name: shm}\n"
        'spec:\n  mutate:\n    shm: {sizeLimit: "1e20000000"}\n',
    )

    (problem,) = problems(tmp_path)

    assert "spec.mutate.shm.sizeLimit" in problem
    assert "out of range" in problem


def test_a_rule_file_bomb_is_refused_by_name(tmp_path: Path) -> None:
    write(tmp_path, "lol.yaml", billion_laughs())

    (problem,) = problems(tmp_path)

    assert problem.startswith(f"{tmp_path / 'lol.yaml'}: YAML aliases expand")


def test_a_store_started_on_broken_files_serves_the_last_good_set(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    kept = LastGood(tmp_path / "last-good")
    first = RuleStore(str(rules), last_good=kept)
    write(rules, "10-nvidia-tolerations.yaml", "kind: [\n")

    replacement = RuleStore(str(rules), last_good=kept)

    assert replacement.current.policy.rule_names == first.current.policy.rule_names
    assert replacement.reload_if_changed() is False, "the files on disk are reported broken"
    assert "10-nvidia-tolerations.yaml" in str(replacement.last_error)


def test_a_store_without_a_last_good_set_still_refuses_broken_files(tmp_path: Path) -> None:
    write(tmp_path / "rules", "bad.yaml", "kind: [\n")

    with pytest.raises(PolicyError):
        RuleStore(str(tmp_path / "rules"), last_good=LastGood(tmp_path / "last-good"))


def test_the_last_good_set_follows_good_reloads_only(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    kept = LastGood(tmp_path / "last-good")
    store = RuleStore(str(rules), last_good=kept)
    (rules / "20-hide-gpus.yaml").unlink()
    assert store.reload_if_changed() is True
    write(rules, "30-bad.yaml", "kind: [\n")
    assert store.reload_if_changed() is False

    assert kept.rules() is not None
    shipped = sorted(p.name for p in (ROOT / "rules").glob("*.yaml"))
    assert sorted(p.name for p in kept.rules().iterdir()) == [
        name for name in shipped if name != "20-hide-gpus.yaml"
    ]


# --- GPU access control fields -------------------------------------------------------------

POLICY_HEAD = HEADER + "kind: GPUPolicy\nmetadata: {name: a}\nspec:\n"
SETTINGS_HEAD = HEADER + "kind: GPUSettings\nmetadata: {name: cluster}\nspec:\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            POLICY_HEAD + "  exempt: [gpuAccess]\n",
            'spec.exempt[0]: "gpuAccess" is not one of gpuAccessWithoutRequest, '
            "nonGPUPodOnGPUNode, hideGPUs, avoidGPUNodes",
            id="unknown-exemption",
        ),
        pytest.param(
            POLICY_HEAD + "  mutate:\n    env: {hideGPUsFromNonGPUContainers: everywhere}\n",
            "spec.mutate.env.hideGPUsFromNonGPUContainers",
            id="unknown-hide-scope",
        ),
        pytest.param(
            POLICY_HEAD + "  mutate:\n    runtimeClassName: NVIDIA_Runtime\n",
            'spec.mutate.runtimeClassName: "NVIDIA_Runtime" is not a valid name',
            id="runtime-class-not-a-dns-name",
        ),
        pytest.param(
            POLICY_HEAD + "  mutate:\n    avoidGPUNodes: {value: 'true'}\n",
            "spec.mutate.avoidGPUNodes.nodeLabel: missing",
            id="avoid-without-label",
        ),
        pytest.param(
            POLICY_HEAD + "  validate:\n    - requireProbes: [health]\n",
            'spec.validate[0]: requireProbes[0]: "health" is not one of liveness, readiness, startup',
            id="unknown-probe",
        ),
        pytest.param(
            SETTINGS_HEAD + "  checks: {gpuAccessWithoutRequest: repair}\n",
            'spec.checks.gpuAccessWithoutRequest: "repair" is not one of deny, warn, audit',
            id="no-repair-for-gpu-access",
        ),
        pytest.param(
            SETTINGS_HEAD + "  gpuNodes:\n    taints: [{key: nvidia.com/gpu, effect: Prefer}]\n",
            'spec.gpuNodes.taints[0].effect: "Prefer" is not one of NoSchedule, NoExecute',
            id="gpu-taint-effect",
        ),
    ],
)
def test_gpu_access_control_fields_are_checked_with_their_path(
    tmp_path: Path, text: str, expected: str
) -> None:
    write(tmp_path, "a.yaml", text)
    assert any(expected in p for p in problems(tmp_path)), problems(tmp_path)


def test_an_exemption_matches_pods_without_gpus_unless_its_gpu_count_says_otherwise(
    tmp_path: Path,
) -> None:
    write(tmp_path, "a.yaml", POLICY_HEAD + "  exempt: [hideGPUs]\n")
    write(
        tmp_path,
        "b.yaml",
        HEADER + "kind: GPUPolicy\nmetadata: {name: b}\nspec:\n  match: {gpuCount: {min: 2}}\n"
        "  exempt: [hideGPUs]\n",
    )
    a, b = load_policy(str(tmp_path)).rules
    assert (a.match.gpu_min, b.match.gpu_min) == (0, 2)


def test_two_rules_that_set_different_runtime_classes_for_the_same_pods_are_an_error(
    tmp_path: Path,
) -> None:
    for name, runtime in (("a", "nvidia"), ("b", "nvidia-cdi")):
        write(
            tmp_path,
            f"{name}.yaml",
            HEADER + f"kind: GPUPolicy\nmetadata: {{name: {name}}}\nspec:\n"
            f"  mutate: {{runtimeClassName: {runtime}}}\n",
        )
    (found,) = problems(tmp_path)
    assert 'b.yaml: doc 1 (GPUPolicy b): spec.mutate.runtimeClassName: conflicts with rule "a"' in (
        found
    )


@pytest.mark.parametrize(
    ("value", "scope"),
    [
        pytest.param("true", "gpuPods", id="true is the scope it always had"),
        pytest.param("false", "none", id="false"),
        pytest.param("gpuPods", "gpuPods", id="gpuPods"),
        pytest.param("gpuNodes", "gpuNodes", id="gpuNodes"),
    ],
)
def test_the_hide_scope_is_read(tmp_path: Path, value: str, scope: str) -> None:
    write(
        tmp_path,
        "a.yaml",
        POLICY_HEAD + f"  mutate:\n    env: {{hideGPUsFromNonGPUContainers: {value}}}\n",
    )
    (rule,) = load_policy(str(tmp_path)).rules
    assert rule.mutations.hide_gpus == scope


# --- compiled from the bytes that were hashed (issue 27) -----------------------------------


class Rewriter:
    """Stands in for ``rule_file_paths`` and rewrites one file in place as a reload lists
    the files: torn at the ``torn_at``-th listing (``cp`` and ``cat >`` truncate before they
    write), whole again at the next one, as a writer racing the poll would leave it."""

    def __init__(self, list_files, path: Path, *, whole: str, torn: str, torn_at: int) -> None:
        self.list_files = list_files
        self.path = path
        self.whole = whole
        self.torn = torn
        self.torn_at = torn_at
        self.calls = 0

    @property
    def done(self) -> bool:
        return self.calls > self.torn_at

    def __call__(self, directory: str) -> list[Path]:
        self.calls += 1
        if self.calls == self.torn_at:
            self.path.write_text(self.torn)
        elif self.calls == self.torn_at + 1:
            self.path.write_text(self.whole)
        return self.list_files(directory)


RENAMED = "hide-gpus-rewritten"


@pytest.mark.parametrize("torn_at", [1, 2, 3, 4])
@pytest.mark.parametrize(
    "torn",
    [
        pytest.param("", id="truncated"),
        pytest.param("half", id="half-written"),
    ],
)
def test_a_file_rewritten_while_a_reload_reads_it_is_in_force_one_poll_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torn: str, torn_at: int
) -> None:
    from webhook.files import rulefiles

    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    store = RuleStore(str(rules))
    target = rules / "20-hide-gpus.yaml"
    whole = target.read_text().replace("hide-gpus-from-non-gpu-containers", RENAMED)
    target.write_text(whole)
    torn_text = whole[: len(whole) // 2] if torn == "half" else ""
    rewriter = Rewriter(
        rulefiles.rule_file_paths, target, whole=whole, torn=torn_text, torn_at=torn_at
    )
    monkeypatch.setattr(rulefiles, "rule_file_paths", rewriter)

    for _ in range(10):
        if rewriter.done:
            break
        store.reload_if_changed()
    store.reload_if_changed()  # the poll after the writer finished

    assert RENAMED in store.current.policy.rule_names
    monkeypatch.undo()
    assert store.current.fingerprint == rulefiles.fingerprint(str(rules))
    assert store.reload_if_changed() is None


def test_a_reload_reads_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.files import rulefiles

    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    store = RuleStore(str(rules), last_good=LastGood(tmp_path / "last-good"))
    (rules / "20-hide-gpus.yaml").unlink()
    listed = []
    original = rulefiles.rule_file_paths
    monkeypatch.setattr(rulefiles, "rule_file_paths", lambda d: listed.append(d) or original(d))

    assert store.reload_if_changed() is True

    assert len(listed) == 1


def test_the_old_node_pool_kind_is_told_its_new_name(tmp_path: Path) -> None:
    """GPUNodePool was NodePool: as a CRD that would make `kubectl get nodepools` ambiguous."""
    body = "kind: NodePool\nmetadata: {name: b}\nspec: {allocatable: {nvidia.com/gpu: 8}}\n"
    write(tmp_path, "b.yaml", HEADER + body)
    (found,) = problems(tmp_path)
    assert found.endswith(
        "kind: did you mean GPUNodePool? (NodePool was renamed so that kubectl get nodepools "
        "keeps meaning Karpenter's NodePool)"
    ), found
