"""``gpu-webhook check`` as a user meets it: arguments, exit code, what it prints."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import CASES, ROOT, RULES
from tests.running import command_environment, command_line, gpu_webhook

pytestmark = pytest.mark.slow

TAINTED = CASES / "capacity-taint-not-tolerated-excludes-node"
MATCHING_RULES = CASES / "_rules" / "matching"


def gpu_pod(
    name: str, *, namespace: str | None = None, gpu: object = 1, **resources: object
) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    amounts = resources or {"limits": {"nvidia.com/gpu": gpu}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": amounts}]},
    }


def write(tmp_path: Path, name: str, *objects: object, text: str | None = None) -> Path:
    path = tmp_path / name
    path.write_text(text if text is not None else yaml.safe_dump_all(objects, sort_keys=False))
    return path


# --- --namespace only fills in ------------------------------------------------------------


def test_namespace_fills_in_only_objects_that_name_none(tmp_path: Path) -> None:
    path = write(tmp_path, "pods.yaml", gpu_pod("own", namespace="team-b"), gpu_pod("given"))
    done = gpu_webhook("check", path, "--rules", MATCHING_RULES, "--namespace", "kube-system")
    assert "Pod team-b/own " in done.stdout
    assert "Pod kube-system/given " in done.stdout

    done = gpu_webhook(
        "check", path, "--rules", MATCHING_RULES, "--namespace", "kube-system", "-o", "json"
    )
    own, given = json.loads(done.stdout)
    assert (own["namespace"], given["namespace"]) == ("team-b", "kube-system")
    # Rules match the namespace the object will be created in, not the flag's.
    own_env = json.dumps(own["patch"])
    assert "MATCHED_TEAM_NAMESPACE" in own_env
    assert "MATCHED_NOT_KUBE_NAMESPACE" in own_env
    assert "MATCHED_NOT_KUBE_NAMESPACE" not in json.dumps(given["patch"])


# --- one fix for a fractional GPU, in the user's spelling -----------------------------------


def test_a_fractional_request_gets_one_fix_in_the_users_spelling(tmp_path: Path) -> None:
    path = write(tmp_path, "half.yaml", gpu_pod("half", requests={"nvidia.com/gpu": 0.5}))
    done = gpu_webhook("check", path, "--rules", RULES)
    assert done.returncode == 1
    assert "nvidia.com/gpu: 0.5" in done.stdout
    assert "500m" not in done.stdout
    assert (
        'Set resources.requests["nvidia.com/gpu"] and resources.limits["nvidia.com/gpu"] to 1.'
        in done.stdout
    )
    assert "Use 1," in done.stdout
    assert "to 0.5" not in done.stdout


# --- a capacity denial caused by a taint ---------------------------------------------------


def test_a_capacity_denial_by_a_taint_names_it_and_the_toleration_to_add() -> None:
    done = gpu_webhook(
        "check",
        TAINTED / "object.yaml",
        "--rules",
        RULES,
        "--inventory",
        TAINTED / "inventory.yaml",
    )
    assert done.returncode == 1
    assert "its taint dedicated=research:NoSchedule keeps the pod off" in done.stdout
    assert (
        'add to its tolerations: {key: "dedicated", operator: "Equal", value: "research", '
        'effect: "NoSchedule"}' in done.stdout
    )


# --- said once; a summary line; colour only on a terminal -----------------------------------


def test_the_skipped_capacity_notice_is_said_once_and_a_summary_ends_the_output(
    tmp_path: Path,
) -> None:
    pods = [gpu_pod(f"p{i}") for i in range(5)] + [gpu_pod("bad", gpu=0.5)]
    path = write(tmp_path, "pods.yaml", *pods)
    done = gpu_webhook("check", path, "--rules", RULES)
    assert done.returncode == 1
    both = done.stdout + done.stderr
    assert both.count("capacity checks") == 1, both
    assert done.stderr.strip() == "notice: no --inventory given: capacity checks are skipped"
    assert done.stdout.splitlines()[-1] == (
        "6 objects: 5 allowed, 1 denied, 0 unusable, 0 with warnings"
    )
    assert "\033[" not in done.stdout

    done = gpu_webhook("check", path, "--rules", RULES, "-o", "json")
    assert all(result["notices"] == [] for result in json.loads(done.stdout))


def _on_a_terminal(*args: str | Path, env: dict[str, str]) -> str:
    """The command's standard output as a terminal shows it."""
    leader, follower = pty.openpty()
    environment = command_environment(env)
    if "NO_COLOR" not in env:
        environment.pop("NO_COLOR", None)
    with subprocess.Popen(
        command_line(*args),
        cwd=ROOT,
        env=environment,
        stdout=follower,
        stderr=subprocess.DEVNULL,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is done writing
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


@pytest.mark.parametrize(
    ("env", "flags", "coloured"),
    [
        pytest.param({"TERM": "xterm"}, [], True, id="terminal"),
        pytest.param({"TERM": "xterm", "NO_COLOR": "1"}, [], False, id="NO_COLOR"),
        pytest.param({"TERM": "xterm"}, ["--no-color"], False, id="no-color-flag"),
    ],
)
def test_text_output_is_coloured_only_on_a_terminal_without_no_color(
    tmp_path: Path, env: dict[str, str], flags: list[str], coloured: bool
) -> None:
    path = write(tmp_path, "pods.yaml", gpu_pod("ok"), gpu_pod("bad", gpu=0.5))
    shown = _on_a_terminal("check", path, "--rules", RULES, *flags, env=env)
    assert ("\033[31mDENIED\033[0m" in shown) is coloured, shown
    assert ("\033[" in shown) is coloured
    assert "DENIED" in shown


# --- where the rules come from --------------------------------------------------------------


def test_rules_from_the_environment_are_used(tmp_path: Path) -> None:
    path = write(tmp_path, "pod.yaml", gpu_pod("p"))
    done = gpu_webhook("check", path, cwd=tmp_path, env={"GPU_WEBHOOK_RULES": str(RULES)})
    assert done.returncode == 0, done.stderr


# --- paths as kubectl users give them -------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        pytest.param(("{ok}",), id="positional"),
        pytest.param(("-f", "{ok}"), id="-f"),
        pytest.param(("{ok}", "-f", "{bad}"), id="both"),
        pytest.param(("{dir}",), id="directory"),
    ],
)
def test_paths_are_accepted_positionally_and_with_f(tmp_path: Path, form: tuple[str, ...]) -> None:
    (tmp_path / "d").mkdir()
    ok = write(tmp_path / "d", "ok.yaml", gpu_pod("ok"))
    bad = write(tmp_path, "bad.yaml", gpu_pod("bad", gpu=0.5))
    args = [a.format(ok=ok, bad=bad, dir=tmp_path / "d") for a in form]
    done = gpu_webhook("check", *args, "--rules", RULES)
    assert done.returncode == (1 if "{bad}" in form else 0), done.stderr
    assert "Pod default/ok " in done.stdout


def test_no_paths_at_all_is_one_line_and_exit_2() -> None:
    done = gpu_webhook("check", "--rules", RULES)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpu-webhook check: no manifests given: name files or directories (or - for stdin)"
    )


# --- objects kubectl would refuse ----------------------------------------------------------

DUPLICATE_KEY = """\
apiVersion: v1
kind: Pod
metadata:
  name: twice
spec:
  containers: [{name: a, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}]
  containers: [{name: b, image: cuda}]
"""


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            DUPLICATE_KEY,
            ':7: not valid YAML: key "containers" appears twice (first on line 6)',
            id="duplicate-key",
        ),
        pytest.param(
            '{"apiVersion": "v1", "kind": "Pod", "kind": "Pod"}',
            ': key "kind" appears twice',
            id="duplicate-key-json",
        ),
        pytest.param(
            yaml.safe_dump({**gpu_pod("oops"), "spec": {"containers": "oops"}}),
            'Pod oops: spec.containers: "oops" is not a list of containers',
            id="containers-a-string",
        ),
        pytest.param(
            yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "three"},
                    "spec": {"replicas": "three", "template": {"spec": gpu_pod("t")["spec"]}},
                }
            ),
            'Deployment three: spec.replicas: "three" is not a whole number',
            id="replicas-a-string",
        ),
        pytest.param(
            yaml.safe_dump(
                {"apiVersion": "v1", "metadata": {"name": "nokind"}, "spec": gpu_pod("x")["spec"]}
            ),
            "object nokind: kind: missing; every object names its apiVersion and kind",
            id="no-kind",
        ),
        pytest.param(
            yaml.safe_dump(
                {
                    **gpu_pod("r"),
                    "spec": {
                        "containers": [{"name": "a", "resources": {"limits": ["nvidia.com/gpu"]}}]
                    },
                }
            ),
            "spec.containers[0].resources.limits: a list is not a map of resource names",
            id="limits-a-list",
        ),
    ],
)
def test_objects_kubectl_would_refuse_are_reported_not_passed(
    tmp_path: Path, text: str, said: str
) -> None:
    path = write(tmp_path, "object.yaml", text=text)
    good = write(tmp_path, "good.yaml", gpu_pod("good"))
    done = gpu_webhook("check", path, good, "--rules", RULES)
    assert done.returncode == 2, done.stdout
    assert f"error: {path}" in done.stderr
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert "Pod default/good " in done.stdout  # the other files are still checked


# --- nodes that could exist (issue 23) -----------------------------------------------------

POOL_CASES = Path(__file__).resolve().parents[1] / "cases"


def test_check_reads_nodepools_from_the_inventory_file_beside_the_nodes(tmp_path: Path) -> None:
    case = POOL_CASES / "pool-karpenter-gpu-pod-on-cpu-only-cluster-allowed"
    inventory = POOL_CASES / "_inventories" / "karpenter-aws.yaml"
    done = gpu_webhook("check", case / "object.yaml", "--rules", RULES, "--inventory", inventory)
    assert done.returncode == 0, done.stdout + done.stderr
    listing = yaml.safe_load(inventory.read_text())
    listing["items"] = [o for o in listing["items"] if o["kind"] == "Node"]
    nodes_only = write(tmp_path, "nodes.yaml", listing)
    cpu_only = gpu_webhook(
        "check", case / "object.yaml", "--rules", RULES, "--inventory", nodes_only
    )
    assert cpu_only.returncode == 1
    assert "which no node advertises; no node offers a GPU resource yet" in cpu_only.stdout


def test_outside_a_checkout_check_uses_the_shipped_rules_and_says_so_once(tmp_path: Path) -> None:
    """A team that installed the command has no ./rules: the default policy comes with it.
    The package is copied as a wheel installs it (links followed) to a directory of its own,
    and run from another, so nothing of the checkout is in reach."""
    site, work = tmp_path / "site", tmp_path / "work"
    shutil.copytree(
        ROOT / "webhook", site / "webhook", ignore=shutil.ignore_patterns("__pycache__")
    )
    work.mkdir()
    pod = write(work, "pod.yaml", gpu_pod("train", namespace="team-a", gpu="0.5"))
    alone = gpu_webhook("check", pod, "-o", "json", cwd=work, env={"PYTHONPATH": str(site)})
    assert alone.returncode == 1, alone.stderr  # the shipped policy denies half a GPU
    said = [line for line in alone.stderr.splitlines() if "shipped default rules" in line]
    assert len(said) == 1
    assert f"no ./rules in {work}" in said[0]
    assert str(site / "webhook" / "data" / "rules") in said[0]
    with_rules = gpu_webhook("check", pod, "-o", "json", "--rules", RULES, cwd=work)
    assert json.loads(alone.stdout) == json.loads(with_rules.stdout)
    assert "shipped" not in with_rules.stderr


def test_rules_of_your_own_win_over_the_shipped_ones(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "exempt.yaml").write_text(
        (RULES / "05-gpu-stack-exempt.yaml").read_text()
    )
    pod = write(tmp_path, "pod.yaml", gpu_pod("train", namespace="team-a"))
    done = gpu_webhook("check", pod, cwd=tmp_path)
    assert "shipped" not in done.stderr, done.stderr
