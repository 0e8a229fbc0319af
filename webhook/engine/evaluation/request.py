"""What the engine is asked: one object with its admission attributes, and the inventory it
may use. Kept apart from ``evaluate`` so that every evaluator (pods and workloads there,
DRA claim objects in ``claimobjects``) takes the same inputs without importing each other.

The records the stages pass on (``pipeline``) are here: ``Review``, what the templates of
one object share, and ``Asked``, one template as the first stage reads it. So is that first
stage (``demand``): the snapshot with its node pools (``inventory_of``), what a pod template
asks of GPUs (``template_asks``) and the rules that match it (``matching_rules``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.engine.demand.gpus import PodGPUs, pod_gpus
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.workloads import Path, PodTemplate
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Policy, Rule, Settings
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import Inventory
from webhook.engine.resources.nodepools import NO_POOLS, PoolInventory
from webhook.engine.resources.quotas import Quotas
from webhook.engine.scheduling.dra import (
    NO_CLAIMS,
    PodClaims,
    extended_resource_claims,
    gpu_names,
    pod_claims,
    with_claim_gpus,
)
from webhook.engine.scheduling.gke import auto_provisioning
from webhook.engine.scheduling.poolsizing import PoolSizing, size_pools


@dataclass(frozen=True, slots=True)
class Resource:
    """An admission request's ``resource`` (group, version, plural) and object name: for a
    subresource such as ``scale``, the only place the request names its parent."""

    group: str
    version: str
    resource: str
    name: str = ""


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Request:
    """What the engine needs of an admission request (or of a file being checked)."""

    object: Mapping[str, Any]
    namespace: str = ""
    operation: str = "CREATE"
    old_object: Mapping[str, Any] | None = None
    namespace_labels: Mapping[str, str] | None = None
    # The admission request's subResource ("ephemeralcontainers", "resize", "scale");
    # requests for other subresources never reach the engine (webhook.admission.service).
    sub_resource: str = ""
    # For a ResourceClaim: the pods that already name it (``resourceClaimName``), as stored,
    # read by the shell (issue 35); None: not read. A pod admitted before its claims exist
    # is judged again, with each claim, when the claim is created.
    referencing_pods: tuple[Mapping[str, Any], ...] | None = None
    # Whether ``referencing_pods`` holds every such pod (the read ended within its budget).
    referencing_complete: bool = True
    # The request's resource; set by the server (a ``scale`` request names its parent here).
    resource: Resource | None = None
    # For a ``scale`` request: the parent as the shell read it from the API server, or why
    # it could not (``parent_unread``); the engine then warns and never denies.
    parent: Mapping[str, Any] | None = None
    parent_unread: str = ""
    # The review's time, given by the shell (the engine reads no clock): what a
    # GPUPolicyException's expiry is judged against. None: not known.
    now: dt.datetime | None = None

    @property
    def effective_namespace(self) -> str:
        meta = self.object.get("metadata")
        own = meta.get("namespace") if isinstance(meta, dict) else None
        return self.namespace or (str(own) if own else "default")


@dataclass(slots=True)  # built per review: frozen would triple its cost
class InventoryView:
    """The inventory as the engine may use it: a snapshot, none at all, or a broken one."""

    snapshot: Inventory | None
    problem: str = ""  # set when a configured inventory is unavailable (never synced, stale)
    # DRA classes, slices, claims and templates; None when the cluster serves no DRA API
    # (or ``check`` was given none).
    devices: DeviceInventory | None = None
    # Names of the cluster's RuntimeClasses, from a live inventory; None: not known.
    runtime_classes: frozenset[str] | None = None
    # Those of them whose handler is NVIDIA's container runtime (``gpuaccess``).
    nvidia_runtime_classes: frozenset[str] = frozenset()
    # Autoscaler objects (Karpenter NodePools, cluster-autoscaler status, GKE
    # ComputeClasses): nodes that could exist. None: not read.
    pools: PoolInventory | None = None
    # The cluster's ResourceQuotas (issue 26); None: not known.
    quotas: Quotas | None = None

    @property
    def usable_devices(self) -> DeviceInventory | None:
        """The DRA inventory, unless the inventory is broken: then none is judged on."""
        return None if self.problem else self.devices


NO_INVENTORY = InventoryView(None)
NO_INVENTORY_NOTICE = "capacity checks skipped: no node inventory given"
# Top-level metadata that ``evaluate`` never reads: replicas of one workload differ only
# here, so callers may treat objects equal but for these as the same question
# (``webhook.admission.memo``). tests/engine/evaluation/test_properties.py holds the engine to it.
IDENTITY_METADATA = frozenset(
    {
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "ownerReferences",
        "selfLink",
    }
)


# Memos of inventory_of: evaluation stays a function of its inputs.
_with_pools: tuple[Inventory, Policy, object, Inventory] | None = None
_sized: tuple[Policy, PoolInventory, PoolSizing] | None = None


def inventory_of(view: InventoryView, policy: Policy) -> Inventory | None:
    """The snapshot plus node pools (declared in rule files, and, when the settings say
    detect, the cluster's autoscaler objects), built once per (snapshot, policy, pools).

    Sizing the pools (tens of milliseconds for a few NodePools against the catalogue) is
    kept per (policy, pools): a live cache publishes a new snapshot for every node change,
    and only adding the sized pools to it (well under a millisecond) is paid again."""
    global _with_pools, _sized  # noqa: PLW0603 - memos; evaluation stays a function of its inputs
    if view.snapshot is None or view.problem:
        return None if view.problem else view.snapshot
    mode = policy.settings.autoscaling
    declared = policy.node_pools if mode != "off" else ()
    # Detect with no autoscaler objects still looks for GKE node auto-provisioning, which
    # only the nodes show (an empty PoolInventory is falsy: not a reason to skip it).
    live = (view.pools or NO_POOLS) if mode == "detect" else None
    if not declared and live is None:
        return view.snapshot
    memo = _with_pools
    # Held by reference, not by id(): a freed snapshot's id may be reused by the next one.
    if memo is not None and memo[0] is view.snapshot and memo[1] is policy and memo[2] is live:
        return memo[3]
    combined = view.snapshot.with_nodes(declared)
    if live is not None:
        sized = _sized
        if sized is None or sized[0] is not policy or sized[1] is not live:
            sizing = size_pools(
                live,
                catalogue=policy.catalogue,
                allowance=policy.settings.allowance,
                declared=frozenset(n.pool for n in declared),
                min_values=policy.settings.min_values_policy != "BestEffort",
            )
            _sized = sized = (policy, live, sizing)
        sizing = sized[2]
        unbounded = list(sizing.unbounded)
        added = list(sizing.nodes)
        # Per snapshot: a node of a nap-... pool shows GKE may create more.
        nap = auto_provisioning(
            [shape.labels for shape in view.snapshot.shapes],
            catalogue=policy.catalogue,
            allowance=policy.settings.allowance,
            declared=frozenset(n.pool for n in declared),
        )
        if nap is not None:
            added.extend(nap[1])
            unbounded.append(nap[2])
        combined = combined.with_nodes(added, unbounded=unbounded)
    _with_pools = (view.snapshot, policy, live, combined)
    return combined


def request_as_created(request: Request, obj: Mapping[str, Any]) -> Request:
    return Request(
        obj,
        namespace=request.namespace,
        namespace_labels=request.namespace_labels,
        now=request.now,
    )


def matching_rules(
    request: Request, template: PodTemplate, pod: PodGPUs, policy: Policy, claims: PodClaims
) -> Sequence[Rule]:
    """The policy's rules that match the template, in the policy's order (not to be changed:
    the answer may be remembered). Remembered on the policy (one rules generation) where no
    rule reads pod or namespace labels: the answer then depends on the namespace, the GPU
    resources and count and the GPU device classes only, which pods of a cluster repeat."""
    memo: dict[tuple[object, ...], tuple[Rule, ...]] | bool | None
    memo = policy._memo.get("matching_rules")
    if memo is None:
        by_labels = any(r.match.pod_selector or r.match.namespace_selector for r in policy.rules)
        memo = policy._memo["matching_rules"] = False if by_labels else {}
    if not isinstance(memo, dict):  # a rule reads labels: nothing to remember
        return _matching(request, template, pod, policy, device_classes=claims.gpu_classes)
    device_classes = claims.gpu_classes if claims.claims else ()  # a property: most have none
    key = (request.effective_namespace, tuple(pod.resources), pod.total, device_classes)
    known = memo.get(key)
    if known is None:
        known = tuple(_matching(request, template, pod, policy, device_classes=device_classes))
        if len(memo) >= 4096:
            memo.clear()
        memo[key] = known
    return known


def _matching(
    request: Request,
    template: PodTemplate,
    pod: PodGPUs,
    policy: Policy,
    *,
    device_classes: tuple[str, ...],
) -> list[Rule]:
    namespace = request.effective_namespace
    labels = template.labels
    resources = pod.resources
    total = pod.total
    return [
        rule
        for rule in policy.rules
        if rule.match.matches(
            namespace=namespace,
            namespace_labels=request.namespace_labels,
            pod_labels=labels,
            resources=resources,
            gpu_count=total,
            device_classes=device_classes,
        )
    ]


def template_asks(
    request: Request,
    template: PodTemplate,
    *,
    settings: Settings,
    view: InventoryView,
) -> tuple[PodGPUs, PodClaims]:
    """What the template asks of GPUs: resources per container, and DRA claims."""
    devices = view.devices
    spec = template.spec
    if devices is None and not spec.get("resourceClaims"):
        # Most pods: no DRA inventory to add names or serve resources, and no claim.
        return pod_gpus(spec, settings.gpu_resources, template.singles), NO_CLAIMS
    # With the names and classes that serve GPUs (KEP-5004).
    gpus, is_gpu_class = gpu_names(
        settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
    )
    pod = pod_gpus(spec, gpus, template.singles)
    claims = (
        pod_claims(
            spec,
            namespace=request.effective_namespace,
            devices=devices,
            is_gpu_class=is_gpu_class,
        )
        if spec.get("resourceClaims")
        else NO_CLAIMS
    )
    pod, claims = extended_resource_claims(pod, claims, devices=view.devices)
    return with_claim_gpus(pod, claims), claims


@dataclass(slots=True)  # built once per object on every review: by position
class Review:
    """What the templates of one object share on their way through the stages: the
    request, the policy and the inventory as read once, and what the stages write into:
    the patch (``editor``), the findings, the rules credited with a mutation, and what the
    checks could not see, for the decision (``pipeline.evaluate_object``)."""

    request: Request
    policy: Policy
    settings: Settings
    view: InventoryView
    snapshot: Inventory | None  # the snapshot with its node pools (``inventory_of``)
    devices: DeviceInventory | None  # ``view.usable_devices``
    editor: Editor
    kind: str
    daemon: bool  # a DaemonSet: its pods run on every node they target
    mutate: bool  # False: judged as it is (a Pod's UPDATE)
    findings: list[Finding]
    mutated_by: dict[str, None]
    notices: list[str]  # the object's: said first
    template_notices: list[str]  # what a template's checks could not see: said after
    warnings: list[str]  # beside the findings' (an inventory that is not there)


@dataclass(slots=True)  # built per template on every review: by position
class Asked:
    """One template as the first stage reads it: what it asks of GPUs, the rules that match
    it; ``typed`` False where its spec is no map (the API server's schema check rejects
    it, and no stage after the first reads it)."""

    template: PodTemplate
    spec_path: Path
    pod: PodGPUs
    claims: PodClaims
    rules: Sequence[Rule]
    typed: bool


def demand(review: Review, template: PodTemplate) -> Asked:
    """The first stage: what the template asks of GPUs (resources and DRA claims), and the
    rules that match it."""
    request, policy = review.request, review.policy
    pod, claims = template_asks(request, template, settings=review.settings, view=review.view)
    spec_path = template.spec_path
    if not isinstance(lookup(review.editor.doc, spec_path), dict):
        return Asked(template, spec_path, pod, claims, (), False)
    rules = matching_rules(request, template, pod, policy, claims) if policy.rules else ()
    return Asked(template, spec_path, pod, claims, rules, True)
