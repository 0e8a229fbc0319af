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

from webhook.engine.demand.gpuaccess import (
    NVIDIA_RUNTIME_CLASSES,
    PRIVILEGED,
    VISIBLE_DEVICES,
    Access,
    DeviceListMount,
    asks_for_gpu,
    device_list_mounts,
    device_list_wanted,
    env_access,
    host_paths,
    may_reach,
    mount_access,
    privileged,
    runtime_access,
)
from webhook.engine.demand.gpus import Container, PodGPUs
from webhook.engine.enforcement.mutators import avoid_label, hide_gpus, set_runtime_class
from webhook.engine.kube.patch import Editor
from webhook.engine.kube.workloads import Path, PodTemplate
from webhook.engine.policy.decision import Action, Finding, action_of
from webhook.engine.policy.ruleset import Mutations, Rule, Settings
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Placement
from webhook.engine.scheduling.dra import gpu_class_matcher
from webhook.engine.scheduling.gpunodes import (
    DRAGPUs,
    GPUNodeReach,
    Reach,
    gpu_node_reach,
    pinned_to_a_node,
)

GPU_ACCESS = "gpuAccessWithoutRequest"
GPU_NODE = "nonGPUPodOnGPUNode"
UNKNOWN_RUNTIME_CLASS = "unknownRuntimeClass"


@dataclass(slots=True)
class Template:
    """One pod template as access control sees it."""

    spec_path: Path
    template: PodTemplate
    pod: PodGPUs
    # Built-in checks and mutations the matching rules exempt this pod from.
    exempt: frozenset[str]
    # A DaemonSet's template: its pods must run on every node they are meant for.
    daemon: bool
    # Whether any container asks for a GPU (``gpuaccess.pod_asks_for_gpu``), read often.
    asks: bool

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The pod's metadata as its containers' field references read it."""
        if self.template.pod_spec:
            return {}
        meta = self.template.template.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def where(self) -> str:
        return ".".join(map(str, self.spec_path))

    def at(self, container: Container) -> str:
        return f"{self.where}.{container.section}[{container.index}]"


NO_EXEMPTIONS: frozenset[str] = frozenset()


def exemptions(rules: Sequence[Rule]) -> frozenset[str]:
    exempt = [rule.exempt for rule in rules if rule.exempt]
    return NO_EXEMPTIONS.union(*exempt) if exempt else NO_EXEMPTIONS


def without_exempt(mutations: Mutations, exempt: Collection[str]) -> Mutations:
    """A rule's mutations minus those the pod is exempt from."""
    if "hideGPUs" in exempt and mutations.hide_gpus != "none":
        mutations = dataclasses.replace(mutations, hide_gpus="none")
    if "avoidGPUNodes" in exempt and mutations.avoid_gpu_nodes is not None:
        mutations = dataclasses.replace(mutations, avoid_gpu_nodes=None)
    return mutations


def reach_of(
    spec: Mapping[str, Any],
    settings: Settings,
    inventory: Inventory | None,
    placement: Placement | None = None,
    *,
    devices: DeviceInventory | None = None,
) -> GPUNodeReach:
    return gpu_node_reach(
        spec,
        placement or Placement.of(spec),
        nodes=settings.gpu_nodes,
        resources=settings.gpu_resources,
        inventory=inventory,
        dra=dra_gpus(settings, devices),
    )


def dra_gpus(settings: Settings, devices: DeviceInventory | None) -> DRAGPUs | None:
    """Nodes whose ResourceSlices hold GPUs are GPU nodes (``gpunodes.DRAGPUs``)."""
    if devices is None or not devices.complete:
        return None
    gpu = gpu_class_matcher(
        devices, is_gpu_class=settings.gpu_device_classes, resources=settings.gpu_resources
    )
    return DRAGPUs(devices, gpu)


class PodReach:
    """Where one pod can land, worked out on first use: most GPU pods never need it."""

    __slots__ = ("_answer", "_devices", "_inventory", "_placement", "_settings", "_spec")

    # Not keyword-only: built on every review, where a class called with keywords costs
    # twice as much.
    def __init__(
        self,
        spec: Mapping[str, Any],
        placement: Placement,
        settings: Settings,
        inventory: Inventory | None,
        devices: DeviceInventory | None = None,
    ) -> None:
        self._spec, self._placement = spec, placement
        self._settings, self._inventory = settings, inventory
        self._devices = devices
        self._answer: GPUNodeReach | None = None

    @classmethod
    def known(
        cls, answer: GPUNodeReach, spec: Mapping[str, Any], *, settings: Settings
    ) -> PodReach:
        """A reach already known (a bound pod's node, ``gpunodes.bound_node_reach``)."""
        reach = cls(spec, Placement.of(spec), settings=settings, inventory=None)
        reach._answer = answer
        return reach

    @property
    def value(self) -> GPUNodeReach:
        if self._answer is None:
            self._answer = reach_of(
                self._spec, self._settings, self._inventory, self._placement, devices=self._devices
            )
        return self._answer


def placed_by_claims(pod: PodGPUs) -> bool:
    """Some container holds DRA claims that give no GPU (a NIC's): where their devices are
    decides where the pod lands, and they may sit only on GPU nodes (a NIC beside the
    GPUs), which the reach here does not read. Such a pod is neither kept off GPU nodes
    nor warned for taking their room, as when its claims counted as GPU requests."""
    return any(c.claims_no_gpu for c in pod.containers)


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
    devices: DeviceInventory | None = None,
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
    if not avoiding or template.asks or placed_by_claims(template.pod):
        return findings
    spec = _spec(editor, template)
    # A pod that can only use GPU nodes wants them: keeping it off would strand it (the
    # nonGPUPodOnGPUNode check says so instead).
    reach = reach_of(spec, settings, inventory, devices=devices).reach
    if node_bound(template, spec, settings) or reach is Reach.ONLY:
        return findings
    for label in avoiding:
        avoid_label(editor, template.spec_path, label)
    return findings


def hide_on_gpu_nodes(editor: Editor, template: Template, *, reach: PodReach) -> None:
    """``hideGPUsFromNonGPUContainers: gpuNodes`` (a matching rule asks for it): every
    container that asks for no GPU, in any pod that can land on a GPU node (a GPU pod lands
    on one or nowhere)."""
    if "hideGPUs" in template.exempt:
        return
    if template.asks or reach.value.can_land:
        hide_gpus(editor, template.spec_path, template.pod)


def unhidden_findings(
    editor: Editor,
    template: Template,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    reach: PodReach,
    claim_holders: frozenset[Path] = frozenset(),
) -> Iterator[Finding]:
    """On a pod UPDATE, where ``hide_on_gpu_nodes`` cannot act: a container's env is
    immutable (kubernetes ``ValidatePodUpdate``), so a container this policy hides at
    creation but that carries no ``NVIDIA_VISIBLE_DEVICES`` sees every GPU of the node
    with a CUDA image, once an added toleration (or a gated pod's node selection) lets the
    pod land there. The old pod is judged the same way and only new findings count."""
    if "hideGPUs" in template.exempt or GPU_ACCESS in template.exempt:
        return
    if not (template.asks or reach.value.can_land):
        return
    hiding = [r.name for r in rules if r.mutations.hide_gpus == "gpuNodes"]
    action = action_of(settings.actions.get(GPU_ACCESS, "deny"))
    for container in template.pod.containers:
        if asks_for_gpu(container) or container.path in claim_holders:
            continue
        body = _body(editor, template, container)
        if privileged(body):
            continue  # every device of its node, hidden or not: judged by access_findings
        env = body.get("env")
        names = {e.get("name") for e in env if isinstance(e, dict)} if isinstance(env, list) else ()
        if VISIBLE_DEVICES in names:
            continue  # set by the container itself: judged by access_findings
        name = f'container "{container.name}"'
        yield Finding(
            "builtin",
            GPU_ACCESS,
            action,
            f"{name} asks for no GPU and does not hide GPUs, in a pod that this update lets "
            f"land on a GPU node: rule {hiding[0]} sets {VISIBLE_DEVICES}=void on such "
            "containers when a pod is created, and an update cannot change a container's "
            "env, so with a CUDA image it would see every GPU of its node. Create the pod "
            "again with these tolerations or node selection, or leave them out.",
            f"{name} would see GPUs: not hidden at creation, env cannot change",
            template.at(container),
        )


# --- checks -------------------------------------------------------------------------------


def _body(editor: Editor, template: Template, container: Container) -> Mapping[str, Any]:
    body = editor.get((*template.spec_path, *container.path))
    return body if isinstance(body, dict) else {}


def nvidia_runtime_class(
    spec: Mapping[str, Any],
    template: Template,
    rules: Sequence[Rule],
    known: frozenset[str] = frozenset(),
) -> str | None:
    """The pod's RuntimeClass when it is NVIDIA's and the pod asks for no GPU: then every
    container runs under the runtime that hands out GPUs without the scheduler counting
    them. A GPU pod's other containers are the hiding rules' matter
    (``hideGPUsFromNonGPUContainers``), as with the default runtime."""
    name = spec.get("runtimeClassName")
    if template.asks or not isinstance(name, str):
        return None
    if name in NVIDIA_RUNTIME_CLASSES or name in known:
        return name
    if any(r.mutations.runtime_class == name for r in rules):
        return name
    return None


def _accesses(
    body: Mapping[str, Any],
    template: Template,
    spec: Mapping[str, Any],
    paths: Mapping[str, Any],
    *,
    reach: PodReach,
    runtime_class: str | None,
) -> list[Access]:
    found = env_access(body, template.metadata)
    if paths:
        found += mount_access(body, spec, paths, template.metadata)
    if privileged(body) and reach.value.can_land:
        found.append(PRIVILEGED)
    if runtime_class is not None and not privileged(body) and reach.value.can_land:
        found += runtime_access(body, runtime_class)
    return found


def access_checks(
    editor: Editor,
    template: Template,
    rules: Sequence[Rule],
    *,
    settings: Settings,
    reach: PodReach,
    policy_rules: Sequence[Rule],
    nvidia_classes: frozenset[str],
    live: bool,
    runtime_classes: frozenset[str] | None,
) -> list[Finding]:
    """The last stage of a pod template's evaluation (``evaluation.pipeline``): containers
    that reach GPUs without asking (``access_findings``), a pod that asks for none on GPU
    nodes (``node_findings``), a RuntimeClass the cluster lacks (``runtime_class_findings``,
    with a live list of classes only). ``rules``: those matching the pod; ``policy_rules``:
    all of them; ``live``: a node inventory backs ``reach``."""
    found = access_findings(
        editor,
        template,
        settings=settings,
        reach=reach,
        rules=policy_rules,
        nvidia_classes=nvidia_classes,
    )
    if not template.asks:
        found.extend(node_findings(editor, template, settings=settings, pod_reach=reach, live=live))
    if runtime_classes is not None:
        found.extend(
            runtime_class_findings(
                editor, template, rules, settings=settings, known=runtime_classes
            )
        )
    return found


def access_findings(
    editor: Editor,
    template: Template,
    *,
    settings: Settings,
    reach: PodReach,
    rules: Sequence[Rule] = (),
    nvidia_classes: frozenset[str] = frozenset(),
) -> list[Finding]:
    """``gpuAccessWithoutRequest``: one finding per container that asks for no GPU but can
    reach GPUs, naming every way it does and what to change. ``rules``: the policy's, whose
    runtime classes are NVIDIA's (``nvidia_runtime_class``); ``nvidia_classes``: the
    cluster's classes whose handler is NVIDIA's (an inventory shows them)."""
    if GPU_ACCESS in template.exempt:
        return []
    # A GPU pod has no NVIDIA runtime finding (``nvidia_runtime_class``): its spec unread.
    runtime_class = (
        None
        if template.asks
        else nvidia_runtime_class(_spec(editor, template), template, rules, nvidia_classes)
    )
    candidates = []
    host_volumes: bool | None = None  # whether the pod has hostPath volumes, read once
    for c in template.pod.containers:
        if not (c.gpus or asks_for_gpu(c)):  # a GPU container, without a call: every review
            if runtime_class is not None or may_reach(c.body):
                candidates.append(c)
        elif c.body.get("volumeMounts"):
            # A GPU container is judged for the device list only: a hostPath mount (the
            # spec as written: no mutation adds one).
            if host_volumes is None:
                host_volumes = _has_host_paths(template.template.spec)
            if host_volumes:
                candidates.append(c)
    if not candidates:
        return []
    return list(
        _access_findings(
            editor, template, candidates, settings=settings, reach=reach, runtime=runtime_class
        )
    )


def _has_host_paths(spec: Mapping[str, Any]) -> bool:
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        return False
    for v in volumes:  # noqa: SIM110 - a loop, not any() over a generator: every GPU pod
        if isinstance(v, dict) and "hostPath" in v:
            return True
    return False


def _access_finding(
    template: Template, container: Container, found: Sequence[Access], action: Action
) -> Finding:
    """One finding naming every way a container reaches GPUs it does not ask for. A
    container that asks for GPUs is judged for the toolkit's device list only (it names
    more there): the device plugin (or DRA driver) adds its own entries beside them and
    overrides none, so unlike ``NVIDIA_VISIBLE_DEVICES`` (which the device plugin sets in
    every GPU container) the runtime gives it the GPUs it named as well as those it was
    given."""
    name = f'container "{container.name}"'
    ways = "; ".join(a.what for a in found)
    fixes = ", ".join(dict.fromkeys(a.fix for a in found))
    if asks_for_gpu(container):
        message = (
            f"{name} asks for GPUs but {ways}: it can use GPUs beyond those it requests, "
            "which the scheduler and quotas do not count. Request the GPUs it needs in its "
            f"resources, and {fixes}."
        )
        summary = f"{name} reaches GPUs beyond its request: {found[0].short}"
    else:
        message = (
            f"{name} asks for no GPU but {ways}: it can use GPUs that the scheduler and "
            f"quotas do not count. Request a GPU in its resources.limits, or {fixes}."
        )
        summary = f"{name} reaches GPUs without a GPU request: {found[0].short}"
    return Finding("builtin", GPU_ACCESS, action, message, summary, template.at(container))


def _unseen_link(
    template: Template, container: Container, listed: DeviceListMount, action: Action
) -> Finding:
    """A host path other than /dev/null at an entry of the device list: it asks for
    nothing unless the node links the path to /dev/null, which the webhook cannot see."""
    name = f'container "{container.name}"'
    return Finding(
        "builtin",
        GPU_ACCESS,
        "audit" if action == "audit" else "warn",  # what cannot be seen is never denied
        f'{name} mounts the host path {listed.host_path} (volume "{listed.volume}") at '
        f"{listed.mount_path}, an entry of the NVIDIA runtime's device list: it asks for "
        f"{device_list_wanted(listed.request)} if that path is a link to /dev/null on the "
        "node (containerd and CRI-O follow a host path's links; systemd's masked units are "
        "such links), which the webhook cannot see. Mount it elsewhere.",
        f"{name}: host path {listed.host_path} in the NVIDIA device list",
        template.at(container),
    )


def _access_findings(
    editor: Editor,
    template: Template,
    candidates: Sequence[Container],
    *,
    settings: Settings,
    reach: PodReach,
    runtime: str | None,
) -> Iterator[Finding]:
    spec = _spec(editor, template)
    paths = host_paths(spec)
    action = action_of(settings.actions.get(GPU_ACCESS, "deny"))
    for container in candidates:
        body = _body(editor, template, container)
        listed = device_list_mounts(body, paths, template.metadata) if paths else []
        unseen = [m for m in listed if not m.null and m.host_type in ("", "CharDevice")]
        if asks_for_gpu(container):
            found = [m.access() for m in listed if m.null]
        else:
            found = _accesses(body, template, spec, paths, reach=reach, runtime_class=runtime)
        if found:
            yield _access_finding(template, container, found, action)
        elif unseen:
            yield _unseen_link(template, container, unseen[0], action)


def node_findings(
    editor: Editor, template: Template, *, settings: Settings, pod_reach: PodReach, live: bool
) -> Iterator[Finding]:
    """``nonGPUPodOnGPUNode``: a pod that asks for no GPU but can only use GPU nodes, or
    that tolerates a GPU taint with nothing keeping it off GPU nodes."""
    if GPU_NODE in template.exempt or template.asks or placed_by_claims(template.pod):
        return
    if node_bound(template, _spec(editor, template), settings):
        return
    reach = pod_reach.value
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
