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
``pods/resize`` against the memory rules (below); ``pods/ephemeralcontainers``, the
new containers judged and hidden from GPUs as the pod's others would be.

``pods/resize``, an in-place resize (KEP-1287, GA in 1.35), is judged against the policy's
memory rules. The API server sends an UPDATE of ``pods/resize`` with the whole Pod, old
and new; only containers' cpu and memory requests and limits may differ (pkg/apis/core/validation
``ValidatePodResize``; pod-level ``spec.resources`` too where
InPlacePodLevelResourcesVerticalScaling is on). A memory limit that a ``memoryLimit`` rule
sets at creation could otherwise be raised or removed by the pod's owner afterwards. The
rule's limit for a container is what the rule would set on the resized pod were the
container's memory unset (``stripped``: the same mutation, run again), so every mode
(``fixed``, ``perGPU``, ``inventoryShare``, pod-level bounds) is judged as at creation.

What the rule sets it holds to: raising a limit that is the rule's own (the old limit
equals what the rule sets) beyond the rule, or removing a memory limit (the pod would then
be one the rule gives a limit at creation), is denied. A limit the owner chose is theirs
to resize, as the rule leaves such limits alone at creation, and a pod created without a
limit (before the rule) is not this resize's doing (KEP-4008 ratcheting).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from webhook.engine.kube.patch import Editor
from webhook.engine.kube.quantity import QuantityError, format_bytes, parse_quantity
from webhook.engine.kube.workloads import PodTemplate
from webhook.engine.policy.decision import Decision, Finding, decide
from webhook.engine.policy.ruleset import Mutations, Policy, Rule, Settings
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


RESIZE = "resize"
# What a resize may change: the containers of these lists (sidecars are init containers).
_RESIZABLE = ("initContainers", "containers")


def _containers(pod: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    spec = _map(pod.get("spec"))
    for section in _RESIZABLE:
        items = spec.get(section)
        for index, body in enumerate(items if isinstance(items, list) else ()):
            if isinstance(body, dict):
                yield section, index, body


def memory_limit(body: Mapping[str, Any]) -> int | None:
    """A container's memory limit in bytes; ``None`` when unset or unreadable."""
    raw = _map(_map(body.get("resources")).get("limits")).get("memory")
    if raw is None:
        return None
    try:
        return int(parse_quantity(raw))
    except QuantityError:
        return None


def stripped(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod with every container's memory request and limit removed: what the memory
    rules would set on it is their limit for each container."""
    out = copy.deepcopy(dict(pod))
    for _section, _index, body in _containers(out):
        resources = body.get("resources")
        if not isinstance(resources, dict):
            continue
        for part in ("requests", "limits"):
            amounts = resources.get(part)
            if isinstance(amounts, dict):
                amounts.pop("memory", None)
    return out


def resize_findings(
    new: Mapping[str, Any],
    old: Mapping[str, Any],
    ruled: Mapping[str, Any],
    rules: Sequence[Rule],
) -> list[Finding]:
    """``memoryLimit`` denials of a resize: ``ruled`` is ``stripped(new)`` as the memory
    rules mutate it, ``rules`` those that set its memory limits (named in the message)."""
    before = {(s, _map(b).get("name")): b for s, _i, b in _containers(old)}
    limits = {(s, i): memory_limit(b) for s, i, b in _containers(ruled)}
    names = ", ".join(r.name for r in rules) or "memoryLimit"
    found = []
    for section, index, body in _containers(new):
        rule_limit = limits.get((section, index))
        old_body = before.get((section, body.get("name")))
        if rule_limit is None or old_body is None:
            continue  # the rules set no limit here, or a container the old pod lacks
        was, now = memory_limit(old_body), memory_limit(body)
        if was is None:
            continue  # created without a limit: not this resize's doing
        if now is not None and (was != rule_limit or now <= rule_limit):
            continue  # the owner's own limit (the rule leaves those alone), or within the rule
        name = f'container "{body.get("name")}"'
        what = (
            "removes its memory limit"
            if now is None
            else (f"raises its memory limit to {format_bytes(now)}")
        )
        found.append(
            Finding(
                rules[0].name if rules else "builtin",
                "memoryLimit",
                "deny",
                (
                    f"the resize of {name} {what} (was {format_bytes(was)}), beyond the "
                    f"{format_bytes(rule_limit)} that rule {names} sets on a GPU container: "
                    "the limit bounds what the container takes of its node's memory. Resize "
                    f"its memory limit within {format_bytes(rule_limit)}."
                ),
                f"{name}: resized memory limit beyond the rule's",
                f"spec.{section}[{index}].resources.limits.memory",
            )
        )
    return found


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
