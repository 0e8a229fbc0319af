"""What an UPDATE can change, read from the old and the new object.

An UPDATE is judged on what it changes, as Kubernetes ratchets its own validation of
updates (KEP-4008): a finding the old object already had is not the update's doing, and
an unrelated edit of an object admitted under older rules must not be refused now.

What a Pod UPDATE may change (kubernetes pkg/apis/core/validation/validation.go
``ValidatePodUpdate``): labels and annotations, container and init container images,
``activeDeadlineSeconds`` (lowered), ``terminationGracePeriodSeconds``, tolerations (only
added), scheduling gates (only removed), and on a pod that still has scheduling gates its
``nodeSelector`` (only added) and node affinity. Resources change only through the
``resize`` subresource, cpu and memory only (``ValidatePodResize``: "only cpu and memory
resources are mutable"), so GPU requests never change after creation. Ephemeral
containers are only added, through the ``ephemeralcontainers`` subresource, and never
changed or removed (``ValidatePodEphemeralContainersUpdate``).

``pod_update`` is the Pod UPDATE's own path through the stages: the new and the old pod
judged as they are (``pipeline.evaluate_object``, unmutated) and only fresh findings kept;
``pods/resize`` against the memory rules (``resize``); ``pods/ephemeralcontainers``, the
new containers judged and hidden from GPUs as the pod's others would be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.demand.gpuaccess import pod_asks_for_gpu
from webhook.engine.demand.gpus import Container, PodGPUs
from webhook.engine.enforcement.accesscontrol import (
    PodReach,
    Template,
    access_findings,
    dra_gpus,
    exemptions,
)
from webhook.engine.enforcement.mutators import hide_gpus
from webhook.engine.evaluation.mutation import credit
from webhook.engine.evaluation.pipeline import evaluate_object
from webhook.engine.evaluation.request import (
    InventoryView,
    Request,
    inventory_of,
    matching_rules,
    request_as_created,
    template_asks,
)
from webhook.engine.evaluation.resize import RESIZE, resize_findings, stripped
from webhook.engine.kube.patch import Editor
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.ruleset import Mutations, Policy, Settings
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory, Placement
from webhook.engine.scheduling.gpunodes import bound_node_reach

# Pod spec fields that say where a pod may land (what ``Placement`` reads).
PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def judged_fields_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether a Pod UPDATE changes anything the engine reads: the spec, labels or
    annotations (field references of env read both). Most pod updates are a controller's
    finalizers, owner references or managed fields."""
    if new.get("spec") != old.get("spec"):
        return True
    meta, before = _map(new.get("metadata")), _map(old.get("metadata"))
    return meta.get("labels") != before.get("labels") or meta.get("annotations") != before.get(
        "annotations"
    )


_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def env_reads_metadata(spec: Mapping[str, Any]) -> bool:
    """Whether some container takes a variable from the pod's own labels or annotations
    (``fieldRef: metadata.labels['x']``): then a label edit can change what it reaches."""
    for section in _CONTAINER_LISTS:
        items = spec.get(section)
        for body in items if isinstance(items, list) else ():
            env = body.get("env") if isinstance(body, dict) else None
            for entry in env if isinstance(env, list) else ():
                ref = _map(_map(entry).get("valueFrom")).get("fieldRef")
                path = str(_map(ref).get("fieldPath", ""))
                if path.startswith(("metadata.labels", "metadata.annotations")):
                    return True
    return False


def placed_as_before(new: Mapping[str, Any], old: Mapping[str, Any]) -> Mapping[str, Any]:
    """``new`` with the old pod's placement when the old pod is bound to a node: a bound
    pod stays where it runs, so a toleration added now changes nothing about its node
    (``spec.nodeName`` never changes on update)."""
    old_spec, spec = _map(old.get("spec")), _map(new.get("spec"))
    if not old_spec.get("nodeName") or not spec:
        return new
    placed = {key: value for key, value in spec.items() if key not in PLACEMENT_FIELDS}
    placed.update({key: old_spec[key] for key in PLACEMENT_FIELDS if key in old_spec})
    return {**new, "spec": placed}


def added_ephemeral_containers(
    new: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[tuple[int, Mapping[str, Any]]]:
    """The ephemeral containers of ``new`` (with their index) that ``old`` lacks, by name:
    the API server matches them by name, since a patch may reorder them."""
    before = _map(old.get("spec")).get("ephemeralContainers") if old else None
    names = (
        {c.get("name") for c in before if isinstance(c, dict)}
        if isinstance(before, list)
        else set()
    )
    items = _map(new.get("spec")).get("ephemeralContainers")
    return [
        (index, body)
        for index, body in enumerate(items if isinstance(items, list) else ())
        if isinstance(body, dict) and body.get("name") not in names
    ]


def fresh_findings(before: Iterable[Finding], after: Sequence[Finding]) -> list[Finding]:
    """The findings of the new object that the old one did not have, word for word: a
    value that changes (another label, more GPUs) makes another finding, judged anew."""
    seen = set(before)
    return [finding for finding in after if finding not in seen]


def pod_update(
    request: Request, template: PodTemplate, *, policy: Policy, inventory: InventoryView
) -> Decision:
    """A Pod UPDATE, judged on what it changes (``updates``): the new pod and the old one
    are judged as they are, unmutated (an update can change almost nothing of a pod), and
    only findings the old pod did not have count. Never a patch: most of a pod's spec is
    immutable, and the API server would refuse the whole update."""
    obj, old = request.object, request.old_object
    if request.sub_resource == "ephemeralcontainers":
        return _ephemeral_update(request, template, policy=policy, inventory=inventory)
    if request.sub_resource == RESIZE:
        return _resize_update(request, policy=policy, inventory=inventory)
    if not isinstance(old, dict):
        old = None
    if old is not None and not judged_fields_changed(obj, old):
        return Decision(allowed=True, mutated=obj)
    if old is not None and _only_metadata_no_one_reads(obj, old, policy):
        return Decision(allowed=True, mutated=obj)
    judged = placed_as_before(obj, old) if old is not None else obj
    after = evaluate_object(
        request_as_created(request, judged),
        [PodTemplate(path=(), template=judged, replicas=None)],
        policy=policy,
        inventory=inventory,
        mutate=False,
    )
    before: tuple[Finding, ...] = ()
    if old is not None:
        before = evaluate_object(
            request_as_created(request, old),
            [PodTemplate(path=(), template=old, replicas=None)],
            policy=policy,
            inventory=inventory,
            mutate=False,
        ).findings
    said = {f.warning for f in after.findings}
    return decide(
        fresh_findings(before, after.findings),
        patch=(),
        mutated=obj,
        notices=after.notices,
        extra_warnings=[w for w in after.warnings if w not in said],
    )


def _resize_update(request: Request, *, policy: Policy, inventory: InventoryView) -> Decision:
    """``pods/resize``: the new containers' memory limits against the limits the memory
    rules would set on the resized pod (``resize``); nothing else changes in a resize, and
    it is never patched (the API server takes only resources through this subresource)."""
    obj, old = request.object, request.old_object
    memory_rules = [r for r in policy.rules if r.mutations.memory_limit is not None]
    if not isinstance(old, dict) or not memory_rules:
        return Decision(allowed=True, mutated=obj)
    bare = stripped(obj)
    ruled = evaluate_object(
        request_as_created(request, bare),
        [PodTemplate(path=(), template=bare, replicas=None)],
        policy=policy,
        inventory=inventory,
    )
    setters = [r for r in memory_rules if f"{r.name}/mutate" in ruled.mutated_by]
    found = resize_findings(obj, old, ruled.mutated or bare, setters)
    return decide(found, patch=(), mutated=obj)


def _only_metadata_no_one_reads(
    obj: Mapping[str, Any], old: Mapping[str, Any], policy: Policy
) -> bool:
    """A label or annotation edit that neither a rule's pod selector nor any container's
    env reads: the common pod update, spared two evaluations."""
    spec = obj.get("spec")
    if spec != old.get("spec") or not isinstance(spec, dict):
        return False
    return not env_reads_metadata(spec) and not any(r.match.pod_selector for r in policy.rules)


def _ephemeral_update(
    request: Request, template: PodTemplate, *, policy: Policy, inventory: InventoryView
) -> Decision:
    """``pods/ephemeralcontainers`` (``kubectl debug``): the new ephemeral containers,
    judged like containers that ask for no GPU (an ephemeral container may not have
    resources, ``validateEphemeralContainers``), in the pod where they run, and hidden from
    GPUs as the pod's other containers would be. Only a new container's env is patched:
    the API server refuses changes to anything else through this subresource."""
    obj = request.object
    added = added_ephemeral_containers(obj, request.old_object)
    if not added:
        return Decision(allowed=True, mutated=obj)
    settings = policy.settings
    snapshot = inventory_of(inventory, policy)
    pod, claims = template_asks(request, template, settings=settings, view=inventory)
    rules = matching_rules(request, template, pod, policy, claims) if policy.rules else []
    ephemeral = PodGPUs.of(
        [
            Container("ephemeralContainers", index, str(body.get("name", "")), body, False)
            for index, body in added
        ],
        {},
    )
    access = Template(
        spec_path=template.spec_path,
        template=template,
        pod=ephemeral,
        exempt=exemptions(rules),
        daemon=False,
        asks=pod_asks_for_gpu(pod),
    )
    spec = template.spec
    devices = inventory.usable_devices
    reach = _running_reach(spec, settings=settings, snapshot=snapshot, devices=devices)
    editor = Editor(obj)
    mutated_by: dict[str, None] = {}
    hiding = [r for r in rules if _hides(r.mutations, asks=access.asks, reach=reach)]
    if hiding and "hideGPUs" not in access.exempt:
        before = len(editor.ops)
        hide_gpus(editor, access.spec_path, ephemeral)
        credit(editor, before, mutated_by, hiding)
    findings = access_findings(
        editor,
        access,
        settings=settings,
        reach=reach,
        rules=policy.rules,
        nvidia_classes=inventory.nvidia_runtime_classes,
    )
    return decide(findings, patch=editor.ops, mutated=editor.doc, mutated_by=list(mutated_by))


def _running_reach(
    spec: Mapping[str, Any],
    *,
    settings: Settings,
    snapshot: Inventory | None,
    devices: DeviceInventory | None,
) -> PodReach:
    """Where a running pod is: its node, when the inventory holds it; else where its
    placement lets it land, as on CREATE."""
    node = spec.get("nodeName")
    if snapshot is not None and isinstance(node, str) and node:
        known = bound_node_reach(
            node,
            snapshot,
            nodes=settings.gpu_nodes,
            resources=settings.gpu_resources,
            dra=dra_gpus(settings, devices),
        )
        if known is not None:
            return PodReach.known(known, spec, settings=settings)
    placement = Placement.of(spec)
    return PodReach(spec, placement, settings=settings, inventory=snapshot, devices=devices)


def _hides(mutations: Mutations, *, asks: bool, reach: PodReach) -> bool:
    """Whether a rule's ``hideGPUsFromNonGPUContainers`` covers a pod's non-GPU containers."""
    if mutations.hide_gpus == "gpuPods":
        return asks
    return mutations.hide_gpus == "gpuNodes" and (asks or reach.value.can_land)
