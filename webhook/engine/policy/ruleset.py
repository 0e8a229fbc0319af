"""The compiled policy: rule documents turned into fast, immutable matchers and actions.

Input is plain data that already passed the JSON Schema (``webhook.engine.policy.schema``); this
module adds what a schema cannot say (conflicting rules, bad quantities, duplicate names)
and reports it with the document and field path.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.kube.selectors import label_selector_matches
from webhook.engine.kube.workloads import BUILTIN_KINDS, KindTable, TemplateLocation, WorkloadKind
from webhook.engine.policy.namespacepolicy import forbidden_fields, looser
from webhook.engine.policy.policyexceptions import PolicyException, compile_exception
from webhook.engine.policy.schema import NAMESPACE_POLICY, POLICY_EXCEPTION
from webhook.engine.resources.cudatable import CudaImages, parse_version
from webhook.engine.resources.gpufacts import DEVICE_PLUGIN_DEFAULTS, MEMORY_LABEL, SlotRefusal
from webhook.engine.resources.instancetypes import (
    Allowance,
    Catalogue,
    CatalogueError,
    InstanceType,
    instance_type_from_data,
)
from webhook.engine.resources.inventory import Node, Taint

Action = Literal["deny", "warn", "audit"]
BuiltinAction = Literal["deny", "warn", "audit", "repair"]

DEFAULT_GPU_RESOURCES: tuple[tuple[str, bool], ...] = (
    ("nvidia.com/gpu", False),
    ("nvidia.com/gpu.shared", True),
    ("nvidia.com/mig-*", False),
    ("amd.com/gpu", False),
    ("gpu.intel.com/i915", False),
    ("gpu.intel.com/xe", False),
)
DEFAULT_CHECK_ACTIONS: dict[str, BuiltinAction] = {
    "requestsWithoutLimits": "deny",
    "requestsNotEqualLimits": "deny",
    "invalidQuantity": "deny",
    "fractionalQuantity": "deny",
    "negativeQuantity": "deny",
    "capacity": "deny",
    "unknownResource": "deny",
    "clusterCapacity": "warn",
    # A warning: what a pod gets. A device plugin that refuses such a container makes the
    # node no place for the pod: ``capacity`` judges that (``GPUSettings.devicePlugin``).
    "sharedGPURequest": "warn",
    "multipleMIGDevices": "warn",
    "deviceClaims": "deny",
    "unknownDeviceClass": "deny",
    "missingClaim": "warn",
    "deviceSelector": "warn",
    "gpuAccessWithoutRequest": "deny",
    "nonGPUPodOnGPUNode": "warn",
    "unknownRuntimeClass": "deny",
    # Issue 26: what still fails after admission.
    "gangFit": "deny",
    "cudaDriver": "deny",
    "gpuQuota": "warn",
}
# NVIDIA's DRA driver (k8s-dra-driver-gpu): full GPUs and MIG devices.
DEFAULT_GPU_DEVICE_CLASSES: tuple[str, ...] = ("gpu.nvidia.com", "mig.nvidia.com")
HideScope = Literal["none", "gpuPods", "gpuNodes"]
# How nodes that could exist are counted (docs/inventory.md, "Clusters that scale from zero").
Autoscaling = Literal["detect", "declared", "off"]


@dataclass(frozen=True, slots=True)
class DocumentRef:
    """Where a rule document came from, for error messages."""

    source: str
    index: int
    kind: str
    name: str

    def __str__(self) -> str:
        named = f"{self.kind} {self.name}" if self.name else f"{self.kind}, no metadata.name"
        if self.index < 0:  # an object the API server serves: kubectl names it so
            return f"{named} ({self.source} object)"
        return f"{self.source}: doc {self.index} ({named})"


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    document: DocumentRef | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.document}: " if self.document else ""
        return f"{where}{self.path}: {self.message}" if self.path else f"{where}{self.message}"


class PolicyError(Exception):
    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = tuple(problems)


def glob_matcher(patterns: Iterable[str]) -> Callable[[str], bool]:
    """Exact names go to a set lookup; only real globs pay for a regular expression."""
    patterns = list(patterns)  # read twice below: a generator would be empty the second time
    exact = {p for p in patterns if not any(c in p for c in "*?[")}
    globs = [p for p in patterns if p not in exact]
    regex = re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None
    if regex is None:
        return exact.__contains__
    return lambda name: name in exact or regex.match(name) is not None


class GPUResources:
    """Which resource names are GPUs, and which of those are shared (time-sliced) GPUs."""

    def __init__(self, entries: Iterable[tuple[str, bool]] = DEFAULT_GPU_RESOURCES) -> None:
        self.entries = tuple(entries)
        self._is_gpu = glob_matcher(name for name, _ in self.entries)
        self._is_shared = glob_matcher(name for name, shared in self.entries if shared)
        self._memo: dict[str, bool] = {}
        self._shared_memo: dict[str, bool] = {}

    def is_gpu(self, name: str) -> bool:
        known = self._memo.get(name)
        if known is None:
            known = self._memo[name] = self._is_gpu(name)
        return known

    def is_shared(self, name: str) -> bool:
        known = self._shared_memo.get(name)
        if known is None:
            known = self._shared_memo[name] = self._is_shared(name)
        return known


@dataclass(frozen=True, slots=True)
class Match:
    namespaces: Callable[[str], bool] | None = None
    exclude_namespaces: Callable[[str], bool] | None = None
    namespace_selector: Mapping[str, Any] | None = None
    pod_selector: Mapping[str, Any] | None = None
    resources: Callable[[str], bool] | None = None
    device_classes: Callable[[str], bool] | None = None
    gpu_min: int = 1
    gpu_max: int | None = None
    # Kept for overlap analysis between rules.
    namespace_names: frozenset[str] | None = None
    # ``namespaces`` as written, globs included: what an exemption by name hands to whoever
    # creates a namespace of that name (``webhook.engine.policy.exemptions``).
    namespace_patterns: tuple[str, ...] = ()
    # The other globs as written, for what turns a rule into CEL
    # (``webhook.engine.policy.admissioncel.policies``).
    exclude_patterns: tuple[str, ...] = ()
    resource_patterns: tuple[str, ...] = ()
    device_class_patterns: tuple[str, ...] = ()

    def matches(
        self,
        *,
        namespace: str,
        namespace_labels: Mapping[str, str] | None,
        pod_labels: Mapping[str, str],
        resources: Iterable[str],
        gpu_count: int,
        device_classes: Iterable[str] = (),
    ) -> bool:
        if gpu_count < self.gpu_min or (self.gpu_max is not None and gpu_count > self.gpu_max):
            return False
        if self.namespaces is not None and not self.namespaces(namespace):
            return False
        if self.exclude_namespaces is not None and self.exclude_namespaces(namespace):
            return False
        if (self.resources is not None or self.device_classes is not None) and not (
            _any_of(self.resources, resources) or _any_of(self.device_classes, device_classes)
        ):
            return False
        if self.pod_selector and not label_selector_matches(self.pod_selector, pod_labels):
            return False
        if self.namespace_selector:
            # Unknown namespace labels: a label-based rule cannot be shown to apply.
            if namespace_labels is None:
                return False
            return label_selector_matches(self.namespace_selector, namespace_labels)
        return True


def _any_of(matcher: Callable[[str], bool] | None, names: Iterable[str]) -> bool:
    # A loop, not any() over a generator: this runs for every rule on every admission.
    if matcher is not None:
        for name in names:
            if matcher(name):
                return True
    return False


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """One rule-driven check: ``kind`` names it, ``value`` is its parameter."""

    kind: str
    value: Any
    action: Action
    message: str


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str
    override: bool


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    mode: Literal["fixed", "perGPU", "inventoryShare"]
    amount: int = 0  # bytes; unused for inventoryShare
    # When the limits (which Kubernetes copies into unset requests) would keep the pod off
    # every node it can otherwise use: lower them to fit, leave them out, or deny the pod.
    when_too_large: Literal["cap", "skip", "deny"] = "cap"


@dataclass(frozen=True, slots=True)
class NodeLabel:
    """A label only GPU nodes carry; ``value`` ``None`` means any value."""

    key: str
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Mutations:
    tolerations: tuple[Mapping[str, Any], ...] = ()
    required_affinity: tuple[Mapping[str, Any], ...] = ()
    preferred_affinity: tuple[Mapping[str, Any], ...] = ()
    hide_gpus: HideScope = "none"
    gpu_env: tuple[EnvVar, ...] = ()
    memory_limit: MemoryLimit | None = None
    shm_size: str | None = None
    runtime_class: str | None = None
    # Keep pods that ask for no GPU off nodes with this label (required node affinity).
    avoid_gpu_nodes: NodeLabel | None = None
    # Worked out once per rule set, not per review (every matching rule is asked both):
    # whether it places the pod, and whether ``mutators.apply_containers`` has anything to
    # do for it.
    places: bool = field(init=False, repr=False, compare=False)
    changes_containers: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        places = bool(self.tolerations or self.required_affinity or self.preferred_affinity)
        object.__setattr__(self, "places", places)
        changes = bool(
            self.hide_gpus == "gpuPods"
            or self.gpu_env
            or self.memory_limit is not None
            or self.shm_size is not None
        )
        object.__setattr__(self, "changes_containers", changes)


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    order: int
    match: Match
    checks: tuple[RuleCheck, ...]
    mutations: Mutations
    document: DocumentRef | None = None
    # Built-in checks and mutations (``schema.EXEMPTIONS``) that pods this rule matches are spared.
    exempt: frozenset[str] = frozenset()
    # The document's spec as written: the values ``scheduling.policyreach`` compares with
    # the cluster, each with its path (issue 42).
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class GPUTaint:
    """A taint GPU nodes carry; ``value`` ``None`` means any value."""

    key: str
    effect: str = "NoSchedule"
    value: str | None = None


# GKE taints every GPU node nvidia.com/gpu=present:NoSchedule, and the GPU operator's and
# device plugin's own DaemonSets tolerate that key
# (cloud.google.com/kubernetes-engine/docs/how-to/gpus; NVIDIA/gpu-operator
# assets/state-device-plugin/0500_daemonset.yaml). AKS documents sku=gpu:NoSchedule.
DEFAULT_GPU_TAINTS = (GPUTaint("nvidia.com/gpu"), GPUTaint("sku", value="gpu"))
# Labels only GPU nodes carry: the GPU operator's nvidia.com/gpu.present=true and the NFD
# PCI vendor label it reads (NVIDIA/gpu-operator controllers/state_manager.go), GPU
# feature discovery's product label, and GKE's accelerator label.
DEFAULT_GPU_LABELS = (
    NodeLabel("nvidia.com/gpu.present", "true"),
    NodeLabel("nvidia.com/gpu.product"),
    NodeLabel("feature.node.kubernetes.io/pci-10de.present", "true"),
    NodeLabel("cloud.google.com/gke-accelerator"),
)


@dataclass(frozen=True, slots=True)
class GPUNodes:
    """How GPU nodes are recognised when the inventory cannot say (or is not given)."""

    taints: tuple[GPUTaint, ...] = DEFAULT_GPU_TAINTS
    labels: tuple[NodeLabel, ...] = DEFAULT_GPU_LABELS
    exempt_daemonsets: bool = True


@dataclass(frozen=True, slots=True)
class Settings:
    gpu_resources: GPUResources = field(default_factory=GPUResources)
    actions: Mapping[str, BuiltinAction] = field(
        default_factory=lambda: dict(DEFAULT_CHECK_ACTIONS)
    )
    inventory_failure_mode: Literal["allow", "deny"] = "allow"
    # DRA device classes (globs) whose devices are GPUs.
    gpu_device_classes: Callable[[str], bool] = field(
        default_factory=lambda: glob_matcher(DEFAULT_GPU_DEVICE_CLASSES)
    )
    gpu_nodes: GPUNodes = field(default_factory=GPUNodes)
    # --- nodes that could exist (issue 23) ---
    # detect: live Karpenter NodePools, sized through the catalogue, and autoscalers the
    # API shows (cluster-autoscaler, GKE) that stop "no node has it" denials; declared:
    # NodePool rule documents only; off: today's nodes only.
    autoscaling: Autoscaling = "detect"
    # What a new node keeps back from pods (system and kube reserved, eviction).
    allowance: Allowance = field(default_factory=Allowance)
    # --- issue 21: shared slots as the device plugin allocates them, unknown names ---
    # Which shared slots the NVIDIA device plugin refuses more than one of per container.
    device_plugin: SlotRefusal = DEVICE_PLUGIN_DEFAULTS
    # Add required node affinity keeping a multi-slot container off nodes that refuse it.
    keep_off_refusing_nodes: bool = True
    # Extended resources the scheduler ignores (``ignoredResources``), never "unknown".
    ignored_resources: Callable[[str], bool] = field(default_factory=lambda: glob_matcher(()))
    # Issue 26: what CUDA images are built on (the shipped table and cudaImages mappings).
    cuda_images: CudaImages = field(default_factory=CudaImages)
    # --- issue 23, rest: Karpenter's --min-values-policy as the admin declares it: Strict
    # (the controller's default) denies what minValues keeps off every pool, BestEffort
    # relaxes minValues; undeclared (""), judged as Strict but warned, never denied.
    min_values_policy: Literal["Strict", "BestEffort", ""] = ""
    # Issue 44: namespaces (globs) where a GPUPolicyException may apply; none by default.
    exception_namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...] = ()
    settings: Settings = field(default_factory=Settings)
    node_pools: tuple[Node, ...] = ()
    kinds: KindTable = field(default_factory=KindTable)
    # GPU instance types: the shipped catalogue (loaded by the shell) plus InstanceType
    # rule documents.
    catalogue: Catalogue = field(default_factory=Catalogue)
    # GPUPolicyExceptions in namespaces the settings allow (issue 44).
    exceptions: tuple[PolicyException, ...] = ()
    # What the engine remembers of this policy (as ``DeviceInventory._memo``); not an
    # argument, so ``dataclasses.replace`` starts a policy with other settings afresh.
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def rule_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules)


# --- compiling documents ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleDocument:
    """A schema-valid rule file document and where it came from."""

    ref: DocumentRef
    body: Mapping[str, Any]


def compile_policy(
    documents: Sequence[RuleDocument],
    *,
    catalogue: Catalogue | None = None,
    cuda_table: Mapping[str, Any] | None = None,
) -> Policy:
    """Build a ``Policy``; raise ``PolicyError`` listing every problem found.

    The engine reads no files, so the shell passes the shipped data in: ``catalogue``, the
    instance types (``InstanceType`` documents extend or override it), and ``cuda_table``,
    the public CUDA images as plain data (``webhook/data/cuda-images.yaml``; without it only
    rule-file mappings count)."""
    problems: list[PolicyProblem] = []
    instance_types: list[InstanceType] = []
    rules: list[Rule] = []
    pools: list[Node] = []
    kinds: list[WorkloadKind] = []
    scoped: list[tuple[Rule, str]] = []  # GPUNamespacePolicy rules and their namespace
    exceptions: list[tuple[PolicyException, DocumentRef]] = []
    table = cuda_table or {}
    settings = Settings(cuda_images=CudaImages.of(table))
    settings_seen: DocumentRef | None = None
    names: dict[tuple[str, str], DocumentRef] = {}
    for doc in documents:
        kind, spec = doc.ref.kind, doc.body.get("spec") or {}
        previous = names.get((kind, doc.ref.name))
        if previous is not None:
            problems.append(
                PolicyProblem(doc.ref, "metadata.name", f"duplicate name, first in {previous}")
            )
        names[(kind, doc.ref.name)] = doc.ref
        if kind == "GPUPolicy":
            rules.append(_compile_rule(doc.ref, spec, problems))
        elif kind == NAMESPACE_POLICY:
            scoped.append(_compile_namespace_rule(doc, spec, problems))
        elif kind == POLICY_EXCEPTION:
            meta = doc.body["metadata"]
            exception, found = compile_exception(str(meta["namespace"]), str(meta["name"]), spec)
            problems.extend(PolicyProblem(doc.ref, path, why) for path, why in found)
            exceptions.append((exception, doc.ref))
        elif kind == "GPUSettings":
            if settings_seen is not None:
                problems.append(
                    PolicyProblem(
                        doc.ref, "", f"only one GPUSettings is allowed, first in {settings_seen}"
                    )
                )
            settings_seen = doc.ref
            settings = _compile_settings(spec, table, doc.ref, problems)
        elif kind == "GPUNodePool":
            pools.append(_compile_pool(doc.ref, spec, problems))
        elif kind == "WorkloadKind":
            kinds.append(_compile_kind(spec))
        elif kind == "InstanceType":
            try:
                instance_types.append(
                    instance_type_from_data(
                        {"name": spec.get("instanceType"), **spec}, where="spec"
                    )
                )
            except CatalogueError as exc:
                path, _, message = str(exc).partition(": ")
                problems.append(PolicyProblem(doc.ref, path, message))
    rules.sort(key=lambda r: (r.order, r.name))
    for rule, namespace in scoped:
        for index, path, why in looser(rule, namespace, rules):
            problems.append(PolicyProblem(rule.document, f"spec.validate[{index}].{path}", why))
    # After the cluster's rules, so that a conflict is blamed on the namespace policy.
    rules.extend(sorted((r for r, _ in scoped), key=lambda r: (r.order, r.name)))
    problems.extend(_conflicts(rules))
    allowed = glob_matcher(settings.exception_namespaces)
    for exception, ref in exceptions:
        if not allowed(exception.namespace):
            problems.append(
                PolicyProblem(
                    ref,
                    "metadata.namespace",
                    f"exceptions are not allowed in namespace {exception.namespace}: "
                    "GPUSettings.exceptionNamespaces must name it",
                )
            )
    if problems:
        raise PolicyError(problems)
    return Policy(
        exceptions=tuple(e for e, _ in exceptions),
        rules=tuple(rules),
        settings=settings,
        node_pools=tuple(pools),
        kinds=KindTable(BUILTIN_KINDS).extended(kinds),
        catalogue=(catalogue or Catalogue()).extended(instance_types),
    )


def _compile_settings(
    spec: Mapping[str, Any],
    cuda_table: Mapping[str, Any],
    ref: DocumentRef,
    problems: list[PolicyProblem],
) -> Settings:
    entries = spec.get("gpuResources")
    resources = (
        GPUResources((e["name"], bool(e.get("shared", False))) for e in entries)
        if entries is not None
        else GPUResources()
    )
    actions = dict(DEFAULT_CHECK_ACTIONS)
    actions.update(spec.get("checks") or {})
    return Settings(
        gpu_resources=resources,
        actions=actions,
        inventory_failure_mode=spec.get("inventoryFailureMode", "allow"),
        gpu_device_classes=glob_matcher(spec.get("gpuDeviceClasses", DEFAULT_GPU_DEVICE_CLASSES)),
        gpu_nodes=_compile_gpu_nodes(spec.get("gpuNodes") or {}),
        # YAML 1.1 reads an unquoted ``off`` as false.
        autoscaling="off"
        if spec.get("autoscaling") is False
        else spec.get("autoscaling", "detect"),
        allowance=_compile_allowance(spec.get("systemReserved") or {}),
        **_compile_device_plugin(spec),
        cuda_images=_compile_cuda_images(spec.get("cudaImages") or (), cuda_table, ref, problems),
        min_values_policy=spec.get("minValuesPolicy", ""),
        exception_namespaces=tuple(spec.get("exceptionNamespaces") or ()),
    )


def _compile_allowance(spec: Mapping[str, Any]) -> Allowance:
    """Quantities passed the schema; one that still does not parse keeps the default."""

    def amount(name: str, scale: int) -> int | None:
        if name not in spec:
            return None
        try:
            return int(parse_quantity(spec[name]) * scale)
        except QuantityError:
            return None

    return Allowance(
        memory_overhead_percent=float(spec.get("memoryOverheadPercent", 7.5)),
        cpu=amount("cpu", 1000),
        memory=amount("memory", 1),
    )


def _compile_device_plugin(spec: Mapping[str, Any]) -> dict[str, Any]:
    plugin = spec.get("devicePlugin") or {}
    fails = plugin.get("failRequestsGreaterThanOne") or {}
    return {
        "device_plugin": SlotRefusal(
            time_slicing=bool(fails.get("timeSlicing", DEVICE_PLUGIN_DEFAULTS.time_slicing)),
            mps=bool(fails.get("mps", DEVICE_PLUGIN_DEFAULTS.mps)),
        ),
        "keep_off_refusing_nodes": bool(plugin.get("keepOffRefusingNodes", True)),
        "ignored_resources": glob_matcher(spec.get("ignoredResources") or ()),
    }


def _compile_cuda_images(
    entries: Sequence[Mapping[str, Any]],
    table: Mapping[str, Any],
    ref: DocumentRef,
    problems: list[PolicyProblem],
) -> CudaImages:
    for index, entry in enumerate(entries):
        if parse_version(str(entry["cuda"])) is None:
            path = f"spec.cudaImages[{index}].cuda"
            problems.append(
                PolicyProblem(ref, path, f'"{entry["cuda"]}" is not a version like 12.4')
            )
    return CudaImages.of(table, entries)


def _compile_gpu_nodes(spec: Mapping[str, Any]) -> GPUNodes:
    taints = spec.get("taints")
    labels = spec.get("labels")
    return GPUNodes(
        taints=DEFAULT_GPU_TAINTS
        if taints is None
        else tuple(
            GPUTaint(t["key"], t.get("effect", "NoSchedule"), t.get("value")) for t in taints
        ),
        labels=DEFAULT_GPU_LABELS
        if labels is None
        else tuple(NodeLabel(label["key"], label.get("value")) for label in labels),
        exempt_daemonsets=bool(spec.get("exemptDaemonSets", True)),
    )


def _compile_match(spec: Mapping[str, Any], *, exempting: bool = False) -> Match:
    namespaces = spec.get("namespaces")
    excluded = spec.get("excludeNamespaces")
    resources = spec.get("resources")
    classes = spec.get("deviceClasses")
    count = spec.get("gpuCount") or {}
    has_glob = namespaces is not None and any(any(c in n for c in "*?[") for n in namespaces)
    return Match(
        namespaces=glob_matcher(namespaces) if namespaces is not None else None,
        exclude_namespaces=glob_matcher(excluded) if excluded else None,
        namespace_selector=spec.get("namespaceSelector"),
        pod_selector=spec.get("podSelector"),
        resources=glob_matcher(resources) if resources else None,
        device_classes=glob_matcher(classes) if classes else None,
        # An exemption is about pods that may ask for no GPU at all.
        gpu_min=int(count.get("min", 0 if exempting else 1)),
        gpu_max=count.get("max"),
        namespace_names=frozenset(namespaces) if namespaces is not None and not has_glob else None,
        namespace_patterns=tuple(str(n) for n in namespaces or ()),
        exclude_patterns=tuple(str(n) for n in excluded or ()),
        resource_patterns=tuple(str(n) for n in resources or ()),
        device_class_patterns=tuple(str(n) for n in classes or ()),
    )


def _quantity_problem(
    value: object, exc: QuantityError, what: str = "a Kubernetes quantity"
) -> str:
    """The rule file's value as written (JSON), and why it is no quantity or out of range."""
    if "out of range" in str(exc):
        return str(exc)
    return f"{json.dumps(value)} is not {what}"


def _bytes(value: object, ref: DocumentRef, path: str, problems: list[PolicyProblem]) -> int:
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        problems.append(PolicyProblem(ref, path, _quantity_problem(value, exc)))
        return 0
    if amount <= 0:
        problems.append(PolicyProblem(ref, path, "must be more than zero"))
    return int(amount)


def _compile_rule(ref: DocumentRef, spec: Mapping[str, Any], problems: list[PolicyProblem]) -> Rule:
    exempt = frozenset(spec.get("exempt") or ())
    match = _compile_match(spec.get("match") or {}, exempting=bool(exempt))
    if match.gpu_max is not None and match.gpu_max < match.gpu_min:
        problems.append(PolicyProblem(ref, "spec.match.gpuCount", "max is smaller than min"))
    checks = []
    for index, entry in enumerate(spec.get("validate") or []):
        kind = next(k for k in entry if k not in ("action", "message"))
        value = entry[kind]
        if kind == "minGPUMemory":
            value = _bytes(value, ref, f"spec.validate[{index}].minGPUMemory", problems)
        checks.append(
            RuleCheck(
                kind=kind,
                value=value,
                action=entry.get("action", "deny"),
                message=entry.get("message", ""),
            )
        )
    return Rule(
        name=ref.name,
        order=int(spec.get("order", 100)),
        match=match,
        checks=tuple(checks),
        mutations=_compile_mutations(ref, spec.get("mutate") or {}, problems),
        document=ref,
        exempt=exempt,
        spec=spec,
    )


def _compile_namespace_rule(
    doc: RuleDocument, spec: Mapping[str, Any], problems: list[PolicyProblem]
) -> tuple[Rule, str]:
    """A GPUNamespacePolicy as a rule matching its own namespace only
    (``namespacepolicy`` says what it may not say)."""
    namespace = str(doc.body["metadata"]["namespace"])
    problems.extend(PolicyProblem(doc.ref, path, why) for path, why in forbidden_fields(spec))
    match = spec.get("match") or {}
    own = {k: v for k, v in match.items() if k not in _NAMESPACE_MATCH}
    narrowed = {**spec, "match": {**own, "namespaces": [namespace]}}
    narrowed.pop("exempt", None)
    mutate = {k: v for k, v in (spec.get("mutate") or {}).items() if k not in _ONLY_CLUSTER}
    return _compile_rule(doc.ref, {**narrowed, "mutate": mutate}, problems), namespace


_NAMESPACE_MATCH = ("namespaces", "excludeNamespaces", "namespaceSelector")
_ONLY_CLUSTER = ("tolerations", "runtimeClassName")


def _hide_scope(value: object) -> HideScope:
    """``true`` is the scope this setting had before it had scopes: GPU pods."""
    if value is True:
        return "gpuPods"
    if value in ("gpuPods", "gpuNodes"):
        return value
    return "none"


def _compile_mutations(
    ref: DocumentRef, spec: Mapping[str, Any], problems: list[PolicyProblem]
) -> Mutations:
    affinity = spec.get("nodeAffinity") or {}
    required = [dict(r) for r in affinity.get("required") or []]
    gpu_memory = affinity.get("gpuMemory")
    if gpu_memory:
        least = _bytes(gpu_memory["min"], ref, "spec.mutate.nodeAffinity.gpuMemory.min", problems)
        # GPU feature discovery labels memory in MiB; Gt is strict.
        floor = -(-least // 2**20) - 1
        required.append({"key": MEMORY_LABEL, "operator": "Gt", "values": [str(floor)]})
    env = spec.get("env") or {}
    memory = spec.get("memoryLimit")
    memory_limit = None
    if memory:
        when = memory.get("whenTooLarge", "cap")
        mode, value = next((k, v) for k, v in memory.items() if k != "whenTooLarge")
        if mode == "inventoryShare":
            memory_limit = MemoryLimit("inventoryShare", when_too_large=when) if value else None
        else:
            amount = _bytes(value, ref, f"spec.mutate.memoryLimit.{mode}", problems)
            memory_limit = MemoryLimit(mode, amount, when_too_large=when)
    shm = spec.get("shm")
    shm_size = None
    if shm:
        _bytes(shm["sizeLimit"], ref, "spec.mutate.shm.sizeLimit", problems)
        shm_size = str(shm["sizeLimit"])
    for index, toleration in enumerate(spec.get("tolerations") or []):
        if toleration.get("operator") == "Exists" and toleration.get("value"):
            path = f"spec.mutate.tolerations[{index}].value"
            problems.append(PolicyProblem(ref, path, "must be empty when operator is Exists"))
        if not toleration.get("key") and toleration.get("operator") != "Exists":
            path = f"spec.mutate.tolerations[{index}].operator"
            problems.append(PolicyProblem(ref, path, "an empty key needs operator Exists"))
    return Mutations(
        tolerations=tuple(dict(t) for t in spec.get("tolerations") or []),
        required_affinity=tuple(required),
        preferred_affinity=tuple(dict(p) for p in affinity.get("preferred") or []),
        hide_gpus=_hide_scope(env.get("hideGPUsFromNonGPUContainers", False)),
        gpu_env=tuple(
            EnvVar(v["name"], v["value"], bool(v.get("override", False)))
            for v in env.get("gpuContainers") or []
        ),
        memory_limit=memory_limit,
        shm_size=shm_size,
        runtime_class=spec.get("runtimeClassName"),
        avoid_gpu_nodes=NodeLabel(avoid["nodeLabel"], avoid.get("value"))
        if (avoid := spec.get("avoidGPUNodes"))
        else None,
    )


def _compile_pool(ref: DocumentRef, spec: Mapping[str, Any], problems: list[PolicyProblem]) -> Node:
    allocatable: dict[str, int] = {}
    for name, raw in (spec.get("allocatable") or {}).items():
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            problem = _quantity_problem(raw, exc, "a quantity")
            problems.append(PolicyProblem(ref, f"spec.allocatable[{name}]", problem))
            continue
        allocatable[name] = int(amount * 1000) if name == "cpu" else int(amount)
    return Node(
        name=f"nodepool/{ref.name}",
        labels=dict(spec.get("labels") or {}),
        taints=tuple(
            Taint(key=t["key"], value=t.get("value", ""), effect=t["effect"])
            for t in spec.get("taints") or []
        ),
        allocatable=allocatable,
        capacity=allocatable,
        pool=ref.name,
        count=int(spec.get("maxNodes", 1)),
    )


def _compile_kind(spec: Mapping[str, Any]) -> WorkloadKind:
    return WorkloadKind(
        group=spec["group"],
        kind=spec["kind"],
        locations=tuple(
            TemplateLocation.parse(
                t["path"], t.get("replicas", ()), pod_spec=bool(t.get("podSpec", False))
            )
            for t in spec["templates"]
        ),
        plural=str(spec.get("plural") or ""),
        scale=tuple(
            p for p in str((spec.get("scale") or {}).get("specReplicasPath") or "").split(".") if p
        ),
    )


# --- conflicts ----------------------------------------------------------------------------


def _may_overlap(a: Match, b: Match) -> bool:
    """False only when the two matches provably select different pods."""
    names_a, names_b = a.namespace_names, b.namespace_names
    if names_a is not None and names_b is not None and not names_a & names_b:
        return False
    lo, hi = (
        max(a.gpu_min, b.gpu_min),
        min(
            a.gpu_max if a.gpu_max is not None else 1 << 30,
            b.gpu_max if b.gpu_max is not None else 1 << 30,
        ),
    )
    if lo > hi:
        return False
    labels_a = (a.pod_selector or {}).get("matchLabels") or {}
    labels_b = (b.pod_selector or {}).get("matchLabels") or {}
    return all(labels_b.get(k, v) == v for k, v in labels_a.items())


def _written_fields(rule: Rule) -> dict[str, object]:
    m = rule.mutations
    fields: dict[str, object] = {}
    for var in m.gpu_env:
        fields[f"spec.mutate.env.gpuContainers[{var.name}]"] = (var.value, var.override)
    if m.memory_limit is not None:
        fields["spec.mutate.memoryLimit"] = m.memory_limit
    if m.shm_size is not None:
        try:
            fields["spec.mutate.shm.sizeLimit"] = parse_quantity(m.shm_size)
        except QuantityError:  # reported where the rule was read
            fields["spec.mutate.shm.sizeLimit"] = m.shm_size
    if m.runtime_class is not None:
        fields["spec.mutate.runtimeClassName"] = m.runtime_class
    for req in m.required_affinity:
        fields[f"spec.mutate.nodeAffinity.required[{req['key']}]"] = (
            req["operator"],
            tuple(sorted(req.get("values") or [])),
        )
    return fields


def _conflicts(rules: Sequence[Rule]) -> list[PolicyProblem]:
    by_field: dict[str, list[tuple[Rule, object]]] = {}
    for rule in rules:
        for path, value in _written_fields(rule).items():
            by_field.setdefault(path, []).append((rule, value))
    problems = []
    for path, writers in sorted(by_field.items()):
        for i, (first, first_value) in enumerate(writers):
            for second, second_value in writers[i + 1 :]:
                if first_value != second_value and _may_overlap(first.match, second.match):
                    problems.append(
                        PolicyProblem(
                            second.document,
                            path,
                            f'conflicts with rule "{first.name}" ({first.document}), which '
                            "writes a different value for pods both rules match; make the "
                            "values equal or the matches disjoint",
                        )
                    )
    return problems
