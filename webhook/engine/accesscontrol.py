"""GPU access control: containers that reach GPUs without asking for one, pods that take a
GPU node's room without using its GPUs, runtime classes, and the mutations against them.

Everything here is decided per pod template, on the spec after our placement mutations:
what a pod asks for comes from ``gpuaccess``, where it can land from ``gpunodes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.decision import Finding, action_of
from webhook.engine.gpuaccess import (
    PRIVILEGED,
    Access,
    asks_for_gpu,
    env_access,
    mount_access,
    pod_asks_for_gpu,
    privileged,
)
from webhook.engine.gpunodes import GPUNodeReach, Reach, gpu_node_reach, pinned_to_a_node
from webhook.engine.gpus import Container, PodGPUs
from webhook.engine.inventory import Inventory, Placement
from webhook.engine.mutators import avoid_label, hide_gpus, set_runtime_class
from webhook.engine.patch import Editor
from webhook.engine.policy import Mutations, Rule, Settings
from webhook.engine.workloads import Path

GPU_ACCESS = "gpuAccessWithoutRequest"
GPU_NODE = "nonGPUPodOnGPUNode"
UNKNOWN_RUNTIME_CLASS = "unknownRuntimeClass"


@dataclass(frozen=True, slots=True)
class Template:
    """One pod template as access control sees it."""

    spec_path: Path
    metadata: Mapping[str, Any]
    pod: PodGPUs
    # Built-in checks and mutations the matching rules exempt this pod from.
    exempt: frozenset[str]
    # A DaemonSet's template: its pods must run on every node they are meant for.
    daemon: bool

    @property
    def where(self) -> str:
        return ".".join(map(str, self.spec_path))

    def at(self, container: Container) -> str:
        return f"{self.where}.{container.section}[{container.index}]"


def exemptions(rules: Sequence[Rule]) -> frozenset[str]:
    return frozenset().union(*(rule.exempt for rule in rules)) if rules else frozenset()


def without_exempt(mutations: Mutations, exempt: Collection[str]) -> Mutations:
    """A rule's mutations minus those the pod is exempt from."""
    if "hideGPUs" in exempt and mutations.hide_gpus != "none":
        mutations = dataclasses.replace(mutations, hide_gpus="none")
    if "avoidGPUNodes" in exempt and mutations.avoid_gpu_nodes is not None:
        mutations = dataclasses.replace(mutations, avoid_gpu_nodes=None)
    return mutations


def reach_of(
    spec: Mapping[str, Any], settings: Settings, inventory: Inventory | None
) -> GPUNodeReach:
    return gpu_node_reach(
        spec,
        Placement.of(spec),
        nodes=settings.gpu_nodes,
        resources=settings.gpu_resources,
        inventory=inventory,
    )


def node_bound(template: Template, spec: Mapping[str, Any], settings: Settings) -> bool:
    """Pods that must run where they are put: a DaemonSet's, or one pinned to a node."""
    if not settings.gpu_nodes.exempt_daemonsets:
        return False
    return template.daemon or pinned_to_a_node(spec, Placement.of(spec))


def _spec(editor: Editor, template: Template) -> Mapping[str, Any]:
    spec = editor.get(template.spec_path)
    return spec if isinstance(spec, dict) else {}


# --- mutations ----------------------------------------------------------------------------


def place(
    editor: Editor,
    template: Template,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    inventory: Inventory | None,
) -> list[Finding]:
    """Runtime class and keeping pods off GPU nodes: placement, before container mutations.

    Returns a warning for each rule whose runtime class the pod overrides."""
    findings = []
    for rule in rules:
        wanted = rule.mutations.runtime_class
        if wanted is None:
            continue
        current = set_runtime_class(editor, template.spec_path, wanted)
        if current is not None and current != wanted:
            findings.append(
                Finding(
                    rule.name,
                    "runtimeClassName",
                    "warn",
                    f'the pod uses runtimeClassName "{current}", where GPU pods here use '
                    f'"{wanted}"; with another runtime its containers may not reach their '
                    f'GPUs. Use "{wanted}", or remove runtimeClassName.',
                    f'runtimeClassName "{current}" kept; GPU pods here use "{wanted}"',
                    template.where,
                )
            )
    avoiding = [
        r.mutations.avoid_gpu_nodes
        for r in rules
        if r.mutations.avoid_gpu_nodes is not None and "avoidGPUNodes" not in template.exempt
    ]
    if not avoiding or pod_asks_for_gpu(template.pod):
        return findings
    spec = _spec(editor, template)
    # A pod that can only use GPU nodes wants them: keeping it off would strand it (the
    # nonGPUPodOnGPUNode check says so instead).
    if node_bound(template, spec, settings) or reach_of(spec, settings, inventory).reach is (
        Reach.ONLY
    ):
        return findings
    for label in avoiding:
        avoid_label(editor, template.spec_path, label)
    return findings


def hide_on_gpu_nodes(
    editor: Editor,
    template: Template,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    inventory: Inventory | None,
) -> None:
    """``hideGPUsFromNonGPUContainers: gpuNodes``: every container that asks for no GPU,
    in any pod that can land on a GPU node."""
    if "hideGPUs" in template.exempt:
        return
    if not any(r.mutations.hide_gpus == "gpuNodes" for r in rules):
        return
    if reach_of(_spec(editor, template), settings, inventory).can_land:
        hide_gpus(editor, template.spec_path, template.pod)


# --- checks -------------------------------------------------------------------------------


def _body(editor: Editor, template: Template, container: Container) -> Mapping[str, Any]:
    body = editor.get((*template.spec_path, *container.path))
    return body if isinstance(body, dict) else {}


def _accesses(
    body: Mapping[str, Any], template: Template, spec: Mapping[str, Any], reach: GPUNodeReach
) -> list[Access]:
    found = env_access(body, template.metadata)
    found += mount_access(body, spec)
    if privileged(body) and reach.can_land:
        found.append(PRIVILEGED)
    return found


def access_findings(
    editor: Editor, template: Template, *, settings: Settings, reach: GPUNodeReach
) -> Iterator[Finding]:
    """``gpuAccessWithoutRequest``: one finding per container that asks for no GPU but can
    reach GPUs, naming every way it does and what to change."""
    if GPU_ACCESS in template.exempt:
        return
    spec = _spec(editor, template)
    action = action_of(settings.actions.get(GPU_ACCESS, "deny"))
    for container in template.pod.containers:
        if asks_for_gpu(container):
            continue
        found = _accesses(_body(editor, template, container), template, spec, reach)
        if not found:
            continue
        name = f'container "{container.name}"'
        ways = "; ".join(a.what for a in found)
        fixes = ", ".join(dict.fromkeys(a.fix for a in found))
        yield Finding(
            "builtin",
            GPU_ACCESS,
            action,
            f"{name} asks for no GPU but {ways}: it can use GPUs that the scheduler and quotas "
            f"do not count. Request a GPU in its resources.limits, or {fixes}.",
            f"{name} reaches GPUs without a GPU request: {found[0].short}",
            template.at(container),
        )


def node_findings(
    editor: Editor, template: Template, *, settings: Settings, reach: GPUNodeReach, live: bool
) -> Iterator[Finding]:
    """``nonGPUPodOnGPUNode``: a pod that asks for no GPU but can only use GPU nodes, or
    that tolerates a GPU taint with nothing keeping it off GPU nodes."""
    if GPU_NODE in template.exempt or pod_asks_for_gpu(template.pod):
        return
    if node_bound(template, _spec(editor, template), settings):
        return
    action = action_of(settings.actions.get(GPU_NODE, "warn"))
    if reach.reach is Reach.ONLY:
        yield Finding(
            "builtin",
            GPU_NODE,
            action,
            "the pod asks for no GPU but can only land on GPU nodes (its nodeSelector or "
            "node affinity selects them), where it takes CPU and memory that GPU pods need. "
            "Request a GPU if it needs one, or select nodes without GPUs.",
            "pod asks for no GPU but can only land on GPU nodes",
            template.where,
        )
        return
    floating = reach.can_land and bool(reach.tolerated) and (live or not reach.selects)
    if floating:
        taints = ", ".join(reach.tolerated)
        yield Finding(
            "builtin",
            GPU_NODE,
            action,
            f"the pod asks for no GPU but tolerates the GPU node taint {taints} and nothing "
            "keeps it off GPU nodes, where it takes CPU and memory that GPU pods need. "
            "Remove the toleration, or keep the pod off GPU nodes with a nodeSelector or "
            "required node affinity (for example nvidia.com/gpu.present NotIn [true]).",
            f"pod asks for no GPU but tolerates GPU taint {taints}",
            template.where,
        )


def runtime_class_findings(
    editor: Editor,
    template: Template,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    known: frozenset[str] | None,
) -> Iterator[Finding]:
    """``unknownRuntimeClass``: the API server rejects a Pod whose RuntimeClass does not
    exist ("pod rejected: RuntimeClass ... not found", plugin/pkg/admission/runtimeclass),
    and a controller's pods fail the same way later. Only with a live list of classes."""
    if known is None:
        return
    name = _spec(editor, template).get("runtimeClassName")
    if not isinstance(name, str) or name in known:
        return
    setters = [r.name for r in rules if r.mutations.runtime_class == name]
    by = f" (set by rule {setters[0]})" if setters else ""
    have = ", ".join(sorted(known)) or "none"
    yield Finding(
        "builtin",
        UNKNOWN_RUNTIME_CLASS,
        action_of(settings.actions.get(UNKNOWN_RUNTIME_CLASS, "deny")),
        f'the pod uses runtimeClassName "{name}"{by}, but the cluster has no RuntimeClass '
        f"of that name (it has: {have}), so its pods cannot be created. Use one of those, "
        "or create the RuntimeClass (the GPU operator creates nvidia).",
        f'RuntimeClass "{name}" does not exist (have: {have})',
        template.where,
    )
