"""Mutations: each adds only what is missing and never overrides what the user set.

Every function here is idempotent: run on its own output it records no operation, which is
what makes ``reinvocationPolicy: IfNeeded`` and repeated ``kubectl apply`` safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.engine.demand.gpuaccess import VISIBLE_DEVICES, asks_for_gpu, pod_asks_for_gpu
from webhook.engine.demand.gpus import Container, PodGPUs
from webhook.engine.kube.patch import Editor, lookup
from webhook.engine.kube.quantity import QuantityError, format_bytes, parse_quantity
from webhook.engine.kube.selectors import toleration_covers
from webhook.engine.kube.workloads import Path
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import GPUResources, MemoryLimit, Mutations, NodeLabel
from webhook.engine.resources.fit import (
    Demand,
    container_requests,
    containers_ask,
    pod_level,
    pod_level_limit,
    pod_requests,
)
from webhook.engine.resources.gpufacts import (
    DEVICE_PLUGIN_DEFAULTS,
    MIG_PREFIX,
    SHARED_SUFFIX,
    SlotRefusal,
)
from webhook.engine.resources.inventory import FitAnswer, Inventory, Placement
from webhook.engine.scheduling.dra import NO_CLAIMS, ClaimGPUs, PodClaims

# Whether a pod asking for ``Demand`` at ``Placement`` fits one node together with its DRA
# claims (``wholepod.whole_pod_answer``); None: not known.
ClaimsFit = Callable[[Demand, Placement], bool | None]

HIDE_GPUS = ((VISIBLE_DEVICES, "void"), ("CUDA_VISIBLE_DEVICES", ""))
SHM_VOLUME = "gpu-webhook-dshm"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


# --- placement ----------------------------------------------------------------------------


def add_tolerations(editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]) -> None:
    path = (*spec_path, "tolerations")
    for toleration in wanted:
        existing = lookup(editor.doc, path)  # editor.get, a call level less: every GPU pod
        if not existing or not isinstance(existing, list):
            editor.add(path, [dict(toleration)])
        elif not any(isinstance(t, dict) and toleration_covers(t, toleration) for t in existing):
            editor.append(path, dict(toleration))


def _constrained_keys(term: Mapping[str, Any]) -> set[str]:
    return {str(e.get("key")) for e in _list(term.get("matchExpressions")) if isinstance(e, dict)}


def _unselected(
    editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], Path, list[Any]] | None:
    """The requirements on keys the pod's nodeSelector leaves open, where its required node
    affinity stands and its terms; None when the nodeSelector fixes every key."""
    selector = _map(editor.get((*spec_path, "nodeSelector")))
    unfixed = [dict(r) for r in wanted if r["key"] not in selector]
    if not unfixed:
        return None
    required_path = (*spec_path, "affinity", "nodeAffinity", _REQUIRED)
    return unfixed, required_path, _list(editor.get((*required_path, "nodeSelectorTerms")))


def add_required_affinity(
    editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]
) -> None:
    """AND each requirement into every existing term (terms are ORed, so a requirement must
    hold in each), skipping terms (or a nodeSelector) that already constrain its key."""
    unselected = _unselected(editor, spec_path, wanted)
    if unselected is None:
        return
    wanted, required_path, terms = unselected
    if not terms:
        editor.add((*required_path, "nodeSelectorTerms"), [{"matchExpressions": wanted}])
        return
    for index, term in enumerate(terms):
        if not isinstance(term, dict):
            continue
        keys = _constrained_keys(term)
        for requirement in wanted:
            if requirement["key"] not in keys:
                path = (*required_path, "nodeSelectorTerms", index, "matchExpressions")
                editor.append(path, dict(requirement))


def add_required_affinity_or_absent(
    editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]
) -> None:
    """As ``add_required_affinity``, with each changed term ORed with a copy in which the
    requirements' keys are absent (``DoesNotExist``): nodes without the labels (DRA nodes,
    whose GPUs are described in ResourceSlices) stay open, and the rule is held on their
    devices (``scheduling.devicepolicy``). Idempotent: both terms constrain every key."""
    unselected = _unselected(editor, spec_path, wanted)
    if unselected is None:
        return
    wanted, required_path, terms = unselected
    absent = [{"key": r["key"], "operator": "DoesNotExist"} for r in wanted]
    if not terms:
        editor.add(
            (*required_path, "nodeSelectorTerms"),
            [{"matchExpressions": wanted}, {"matchExpressions": absent}],
        )
        return
    for index, term in enumerate(list(terms)):
        if not isinstance(term, dict):
            continue
        keys = _constrained_keys(term)
        missing = [r for r in wanted if r["key"] not in keys]
        if not missing:
            continue
        copy = {**term, "matchExpressions": [*_list(term.get("matchExpressions"))]}
        copy["matchExpressions"].extend(a for a in absent if a["key"] not in keys)
        path = (*required_path, "nodeSelectorTerms", index, "matchExpressions")
        for requirement in missing:
            editor.append(path, dict(requirement))
        editor.append((*required_path, "nodeSelectorTerms"), copy)


def add_preferred_affinity(
    editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]
) -> None:
    """Add a preference unless the pod already states a preference or requirement on any of
    its keys: the user's choice wins."""
    node_affinity = (*spec_path, "affinity", "nodeAffinity")
    for preference in wanted:
        exprs = [dict(e) for e in preference["matchExpressions"]]
        keys = {e["key"] for e in exprs}
        taken = set(_map(editor.get((*spec_path, "nodeSelector"))))
        for term in _list(editor.get((*node_affinity, _REQUIRED, "nodeSelectorTerms"))):
            taken |= _constrained_keys(_map(term))
        for existing in _list(editor.get((*node_affinity, _PREFERRED))):
            taken |= _constrained_keys(_map(_map(existing).get("preference")))
        if keys & taken:
            continue
        item = {"weight": preference["weight"], "preference": {"matchExpressions": exprs}}
        editor.append((*node_affinity, _PREFERRED), item)


def keep_off_refusing_nodes(editor: Editor, spec_path: Path, answer: FitAnswer) -> None:
    """Required node affinity off the nodes whose device plugin refuses a container of this
    pod (more than one MPS slot, or time-sliced slot where failRequestsGreaterThanOne is
    set): kube-scheduler would place it there and the kubelet fail it. GPU feature
    discovery labels each node's strategy per resource (``<resource>.sharing-strategy``,
    NVIDIA/k8s-device-plugin ``internal/lm/resource.go``); a renamed ``X.shared`` is
    labelled under ``X``. Merged into the pod's terms as rules' affinity is."""
    strategies = list(answer.refusal.refusing_strategies())
    resources = sorted(
        {s.resource for _, short in answer.missing if all(s.refused for s in short) for s in short}
    )
    wanted = [
        {
            "key": f"{resource.removesuffix(SHARED_SUFFIX)}.sharing-strategy",
            "operator": "NotIn",
            "values": strategies,
        }
        for resource in resources
    ]
    if strategies and wanted:
        add_required_affinity(editor, spec_path, wanted)


def set_runtime_class(editor: Editor, spec_path: Path, name: str) -> str | None:
    """Set ``runtimeClassName`` where the pod names none; the class it names otherwise."""
    current = editor.get((*spec_path, "runtimeClassName"))
    if current is None:
        editor.add((*spec_path, "runtimeClassName"), name)
        return None
    return str(current)


def avoid_label(editor: Editor, spec_path: Path, label: NodeLabel) -> None:
    """Required node affinity off nodes with ``label``: ``NotIn`` its value (which also
    admits nodes without the label) or ``DoesNotExist``, in every term."""
    requirement: dict[str, Any] = (
        {"key": label.key, "operator": "NotIn", "values": [label.value]}
        if label.value is not None
        else {"key": label.key, "operator": "DoesNotExist"}
    )
    add_required_affinity(editor, spec_path, [requirement])


def apply_placement(editor: Editor, spec_path: Path, mutations: Mutations) -> None:
    add_tolerations(editor, spec_path, mutations.tolerations)
    if mutations.required_affinity:
        add_required_affinity(editor, spec_path, mutations.required_affinity)
    if mutations.preferred_affinity:
        add_preferred_affinity(editor, spec_path, mutations.preferred_affinity)


# --- containers ---------------------------------------------------------------------------


def _env_names(editor: Editor, path: Path) -> dict[str, int]:
    return {
        str(e.get("name")): i
        for i, e in enumerate(_list(editor.get((*path, "env"))))
        if isinstance(e, dict)
    }


def hide_gpus(
    editor: Editor, spec_path: Path, pod: PodGPUs, claim_holders: frozenset[Path] = frozenset()
) -> None:
    """Containers that ask for no GPU would otherwise see every GPU of the node when the
    NVIDIA runtime is the default. A container that sets NVIDIA_VISIBLE_DEVICES itself (the
    DCGM exporter, a validator) is left alone: the gpuAccessWithoutRequest check judges it.
    A CUDA_VISIBLE_DEVICES it sets is kept, and hides nothing from the runtime. A container
    that holds a DRA GPU claim keeps its GPUs: the DRA driver gives them to it."""
    for container in pod.containers:
        # container.gpus first: the GPU container of every GPU pod, without a call.
        if (
            container.gpus
            or asks_for_gpu(container)
            or (claim_holders and container.path in claim_holders)
        ):
            continue
        path = (*spec_path, *container.path, "env")
        env = lookup(editor.doc, path)
        if not env or not isinstance(env, list):
            # One operation for a container without env: HIDE_GPUS, as new maps written out
            # (no comprehension: a sidecar of nearly every GPU pod passes here).
            editor.add(
                path,
                [
                    {"name": VISIBLE_DEVICES, "value": "void"},
                    {"name": "CUDA_VISIBLE_DEVICES", "value": ""},
                ],
            )
            continue
        names = {str(e.get("name")) for e in env if isinstance(e, dict)}
        if VISIBLE_DEVICES in names:
            continue
        for name, value in HIDE_GPUS:
            if name not in names:
                editor.append(path, {"name": name, "value": value})


# The most GPUs ``{gpuIndexes}`` lists. Kubernetes sets no bound on an extended resource's
# count, so this one is ours: far above what one node holds (a DGX has 8 to 16 GPUs, a node
# of time-sliced GPUs a few hundred replicas), far below what would make the patch a
# memory risk (1024 indexes are under 5 KB). A container asking for more than any node
# can give is denied by the capacity checks; here its indexes are simply not rendered.
MAX_RENDERED_GPU_INDEXES = 1024


def render_env(template: str, gpu_count: int) -> str | None:
    """The value, or None when ``{gpuIndexes}`` would list more than
    ``MAX_RENDERED_GPU_INDEXES`` GPUs (checked before the list is built)."""
    if "{gpuIndexes}" in template:
        if gpu_count > MAX_RENDERED_GPU_INDEXES:
            return None
        # Inside a container GPUs are numbered from 0, whatever their host index.
        indexes = ",".join(str(i) for i in range(gpu_count))
        template = template.replace("{gpuIndexes}", indexes)
    return template.replace("{gpuCount}", str(gpu_count))


@dataclass(frozen=True, slots=True)
class _GPUContainer:
    container: Container
    # Its GPUs: those it asks for and those its claims give; None where a claim's count is
    # not known before allocation (``held`` says why).
    count: int | None
    held: ClaimGPUs | None = None


def gpu_containers(pod: PodGPUs, claims: PodClaims = NO_CLAIMS) -> Iterator[_GPUContainer]:
    """The containers the container mutations are for: those asking for a GPU resource and
    those holding a DRA GPU claim (``resources.claims``), whose GPUs the driver gives it."""
    for container in pod.containers:
        held = claims.gpus_of(container.path) if container.path in claims.holders else None
        if held is None:
            if container.gpu_count:
                yield _GPUContainer(container, container.gpu_count)
            continue
        exact = held.exact
        count = None if exact is None else container.gpu_count + exact
        yield _GPUContainer(container, count, held)


def _uncounted(rule: str, check: str, what: str, target: _GPUContainer) -> Finding:
    held = target.held
    why = held.unknown_text() if held is not None else ""
    name = target.container.name
    return Finding(
        rule,
        check,
        "warn",
        f'{what} not set in container "{name}": the GPUs its claims give are not known '
        f"before allocation ({why}). Ask for an exact count (allocationMode ExactCount, one "
        "count in every firstAvailable alternative), or set it yourself.",
        f'{what} not set in container "{name}": GPU count unknown',
    )


def _no_share(rule: str, container: Container) -> Finding:
    name = container.name
    return Finding(
        rule,
        "memoryLimit",
        "warn",
        f'memory limit not set in container "{name}": inventoryShare divides a node\'s memory '
        "by the GPUs its allocatable lists, and the GPUs this container's claims give are "
        "listed in ResourceSlices instead. Use perGPU or fixed for it, or set it yourself.",
        f'memory limit not set in container "{name}": no allocatable GPUs to share by',
    )


def set_gpu_env(
    editor: Editor,
    spec_path: Path,
    pod: PodGPUs,
    mutations: Mutations,
    *,
    rule: str = "",
    claims: PodClaims = NO_CLAIMS,
) -> list[Finding]:
    """Set the rule's variables in every GPU container; a warning for a variable left out
    because its ``{gpuIndexes}`` would be longer than any node's GPUs, or because it names
    the count of GPUs that claims give and that count is not known before allocation."""
    findings: list[Finding] = []
    for target in gpu_containers(pod, claims):
        container, count = target.container, target.count
        path = (*spec_path, *container.path)
        for var in mutations.gpu_env:
            counted = "{gpuCount}" in var.value or "{gpuIndexes}" in var.value
            if count is None and counted:
                findings.append(_uncounted(rule, "gpuEnv", var.name, target))
                continue
            value = render_env(var.value, count or 0)
            if value is None:
                findings.append(_unrendered(rule, var.name, count or 0))
                continue
            entry = {"name": var.name, "value": value}
            names = _env_names(editor, path)
            if var.name not in names:
                editor.append((*path, "env"), entry)
            elif var.override:
                index = names[var.name]
                if editor.get((*path, "env", index)) != entry:
                    editor.replace((*path, "env", index), entry)
    return findings


def _unrendered(rule: str, name: str, count: int) -> Finding:
    return Finding(
        rule,
        "gpuEnv",
        "warn",
        f"{name} not set: {{gpuIndexes}} would list {count} GPUs, more than the "
        f"{MAX_RENDERED_GPU_INDEXES} this webhook renders (no node holds that many).",
        f"{name} not set: {count} GPU indexes",
    )


def _memory(value: object) -> int | None:
    try:
        return int(parse_quantity(value)) if value is not None else None
    except QuantityError:
        return None


def physical_gpus(
    container: Container,
    *,
    inventory: Inventory | None,
    placement: Placement | None,
    gpus: GPUResources,
) -> int:
    """The physical GPUs a container gets: whole GPUs count one each; MIG slices and shared
    slots are parts of one GPU and count one together. ``nvidia.com/gpu`` is a slice or a
    slot only where every node class the pod can use says so (MIG single, time-slicing)."""
    whole = 0
    parts = False
    for name, count in container.gpus.items():
        if name.startswith(MIG_PREFIX) or gpus.is_shared(name):
            parts = True
            continue
        if inventory is not None and placement is not None:
            kinds = {
                shape.gpu.device(name, shape.allocatable[name]).kind
                for shape in inventory.admitted(name, placement)
            }
            if kinds and "whole" not in kinds:
                parts = True
                continue
        whole += count
    return whole + (1 if parts and not whole else 0)


def memory_share(
    inventory: Inventory, placement: Placement, container: Container, *, gpus: int
) -> int | None:
    """Per-GPU share of memory on the smallest node the pod can use, times the container's
    physical GPUs (a node with 4 GPUs time-sliced into 16 slots has 4 shares, not 16)."""
    shares = []
    for name in container.gpus:
        for shape in inventory.admitted(name, placement):
            memory = shape.allocatable.get("memory")
            device = shape.gpu.device(name, shape.allocatable[name])
            per_node = device.physical or shape.gpu.physical or device.units
            if memory and per_node:
                shares.append(memory // per_node * gpus)
    return min(shares) if shares else None


@dataclass(frozen=True, slots=True)
class _Planned:
    container: Container
    path: Path
    amount: int
    # Kubernetes copies a limit into an unset request: then the limit is what the pod asks.
    becomes_request: bool


def set_memory_limits(
    editor: Editor,
    spec_path: Path,
    pod: PodGPUs,
    limit: MemoryLimit,
    *,
    inventory: Inventory | None,
    rule: str = "",
    gpus: GPUResources | None = None,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
    claims: PodClaims = NO_CLAIMS,
    claims_fit: ClaimsFit | None = None,
) -> list[Finding]:
    gpus = gpus or GPUResources()
    placement = Placement.of(_map(editor.get(spec_path)))
    planned: list[_Planned] = []
    findings: list[Finding] = []
    for target in gpu_containers(pod, claims):
        container = target.container
        path = (*spec_path, *container.path, "resources")
        resources = _map(editor.get(path))
        if "memory" in _map(resources.get("limits")):
            continue
        count = physical_gpus(container, inventory=inventory, placement=placement, gpus=gpus)
        if target.held is not None and target.count is not None:
            # Each device a claim gives is one GPU, or one MIG device (part of one).
            count += target.count - container.gpu_count
        if limit.mode == "fixed":
            amount: int | None = limit.amount
        elif limit.mode == "perGPU":
            if target.count is None:
                findings.append(_uncounted(rule, "memoryLimit", "memory limit", target))
                continue
            amount = limit.amount * count
        else:
            if inventory is None:
                continue
            amount = memory_share(inventory, placement, container, gpus=count)
            if amount is None and target.held is not None:
                findings.append(_no_share(rule, container))
        if amount is None:
            continue
        request = _memory(_map(resources.get("requests")).get("memory"))
        if request is not None:
            amount = max(amount, request)
        planned.append(_Planned(container, path, amount, becomes_request=request is None))
    spec = _map(editor.get(spec_path))
    if planned and spec.get("resources"):
        planned, more = _within_pod_level(spec, pod, planned, rule=rule)
        findings += more
    if planned and inventory is not None and pod.total:
        planned, more = _fit_memory(
            editor.get(spec_path),
            pod,
            planned,
            limit,
            inventory=inventory,
            rule=rule,
            refusal=refusal,
            claims_fit=claims_fit,
        )
        findings += more
    for plan in planned:
        editor.add((*plan.path, "limits", "memory"), format_bytes(plan.amount))
        if plan.becomes_request:
            plan.container.memory_set = plan.amount  # Kubernetes copies it into the request
    return findings


def _container_request(container: Container) -> int | None:
    resources = _map(container.body.get("resources"))
    return _memory(_map(resources.get("requests")).get("memory"))


def _pod_memory_request(spec: Mapping[str, Any], pod: PodGPUs) -> int | None:
    """``spec.resources.requests.memory`` as the API server has it when our patch arrives:
    written, or defaulted before admission from the pod-level limit (pkg/apis/core/v1
    defaults.go ``defaultPodRequests``: the containers' effective request when any asks
    for memory, else the limit). ``None``: the pod sets no pod-level memory."""
    requests, limits = pod_level(spec)
    if "memory" in requests:
        return _memory(requests["memory"])
    if "memory" not in limits:
        return None
    if containers_ask(spec, "memory"):
        return container_requests(pod.containers)[1]
    return _memory(limits["memory"])


def _within_pod_level(
    spec: Mapping[str, Any], pod: PodGPUs, planned: list[_Planned], *, rule: str
) -> tuple[list[_Planned], list[Finding]]:
    """Keep the injected limits within the pod's own ``spec.resources``, as the API server
    validates it (pkg/apis/core/validation ``validatePodResourceConsistency``): no
    container's limit above the pod-level limit, and the containers' effective requests
    (a limit without a request becomes one) within the pod-level request. A container's
    limit above the pod's would be refused, and the pod's own limit bounds it anyway: it
    is lowered to that. Limits that would raise the requests past the pod's are left out,
    with a warning: setting them would make the API server refuse the pod."""
    ceiling = pod_level_limit(spec, "memory", cpu=False)
    if ceiling is not None:
        # A request above the pod's limit is refused whatever we add: such a container
        # is left as written.
        planned = [
            _Planned(p.container, p.path, min(p.amount, ceiling), p.becomes_request)
            for p in planned
            if p.becomes_request or (_container_request(p.container) or 0) <= ceiling
        ]
    room = _pod_memory_request(spec, pod)
    growing = [p for p in planned if p.becomes_request]
    if room is None or not growing:
        return planned, []
    at = {id(c): i for i, c in enumerate(pod.containers)}
    extra = {at[id(p.container)]: p.amount for p in growing}
    if container_requests(pod.containers, memory=extra)[1] <= room:
        return planned, []
    asked = ", ".join(f"{p.container.name or '?'} {format_bytes(p.amount)}" for p in growing)
    message = (
        f"memory limits of rule {rule} ({asked}) left out: a limit without a request becomes "
        f"the container's request, and the pod's spec.resources.requests.memory "
        f"({format_bytes(room)}, written or defaulted from its pod-level limit) must hold its "
        "containers' requests, so the API server would refuse the pod. Set memory requests "
        "and limits on the GPU containers yourself, within spec.resources."
    )
    kept = [p for p in planned if not p.becomes_request]
    return kept, [
        Finding(
            rule,
            "memoryLimit",
            "warn",
            message,
            f"memory limits {asked} skipped: beyond the pod-level memory request",
        )
    ]


def _fit_memory(
    spec: Any,
    pod: PodGPUs,
    planned: list[_Planned],
    limit: MemoryLimit,
    *,
    inventory: Inventory,
    rule: str,
    refusal: SlotRefusal,
    claims_fit: ClaimsFit | None = None,
) -> tuple[list[_Planned], list[Finding]]:
    """Keep the injected limits within the nodes the pod can use (``whenTooLarge``); with
    DRA claims, within the nodes that also meet them (``claims_fit``): a limit that only a
    node without the pod's devices holds would make the claims' check deny the pod."""
    spec = _map(spec)
    placement = Placement.of(spec)
    at = {id(c): i for i, c in enumerate(pod.containers)}

    def memory(plans: list[_Planned]) -> tuple[int, int]:
        extra = {at[id(p.container)]: p.amount for p in plans if p.becomes_request}
        return pod_requests(spec, pod.containers, memory=extra)

    def fitting(plans: list[_Planned]) -> tuple[Any, ...]:
        cpu, mem = memory(plans)
        demand = Demand(pod.vector, cpu, mem, pod.per_container)
        found = inventory.fit(placement, demand, refusal).fitting
        if found and claims_fit is not None and claims_fit(demand, placement) is False:
            return ()
        return found

    if fitting(planned):
        return planned, []
    without = fitting([])
    if not without:
        return planned, []  # the pod fits nowhere anyway: the capacity check says why
    cpu, base = memory([])
    rooms = sorted({shape.allocatable.get("memory", 0) for shape in without}, reverse=True)
    room = rooms[0]
    if claims_fit is not None:
        # The most memory of a node that also meets the claims: the first that takes the
        # pod asking for all of it.
        room = next(
            (
                r
                for r in rooms
                if claims_fit(Demand(pod.vector, cpu, r, pod.per_container), placement) is not False
            ),
            base,
        )
    asked = ", ".join(f"{p.container.name or '?'} {format_bytes(p.amount)}" for p in planned)
    where = f"the largest node the pod can use has {format_bytes(room)} allocatable memory"
    if limit.when_too_large == "deny":
        message = (
            f"rule {rule} sets memory limits ({asked}) that no node the pod can use holds: "
            f"{where}. Set memory limits on the GPU containers yourself, within that, and the "
            "rule leaves them alone."
        )
        finding = Finding(
            rule, "memoryLimit", "deny", message, f"memory limits {asked} fit no node"
        )
        return [], [finding]  # not set: the denial says why, and a retry is judged the same
    if limit.when_too_large == "cap":
        grow = sum(p.amount for p in planned if p.becomes_request)
        share = Fraction(max(room - base, 0), grow) if grow else Fraction(0)
        capped = [
            _Planned(
                p.container,
                p.path,
                int(p.amount * share) // 2**20 * 2**20 if p.becomes_request else p.amount,
                p.becomes_request,
            )
            for p in planned
        ]
        if all(p.amount > 0 for p in capped) and fitting(capped):
            got = ", ".join(f"{p.container.name or '?'} {format_bytes(p.amount)}" for p in capped)
            message = (
                f"memory limits of rule {rule} lowered to fit the nodes the pod can use ({where}): "
                f"{got} instead of {asked}. Set memory limits yourself to choose them."
            )
            return capped, [
                Finding(rule, "memoryLimit", "warn", message, f"memory limits capped to {got}")
            ]
    message = (
        f"memory limits of rule {rule} ({asked}) left out: they would keep the pod off every "
        f"node it can use ({where}). Set memory limits yourself."
    )
    return [], [
        Finding(rule, "memoryLimit", "warn", message, f"memory limits {asked} skipped: too large")
    ]


def mount_shm(
    editor: Editor, spec_path: Path, pod: PodGPUs, size: str, claims: PodClaims = NO_CLAIMS
) -> None:
    """A memory-backed /dev/shm: the container runtime's 64 MB breaks PyTorch loaders."""
    targets = []
    for target in gpu_containers(pod, claims):
        container = target.container
        path = (*spec_path, *container.path)
        mounts = _list(editor.get((*path, "volumeMounts")))
        if not any(_map(m).get("mountPath") in ("/dev/shm", "/dev/shm/") for m in mounts):
            targets.append(path)
    if not targets:
        return
    volumes = _list(editor.get((*spec_path, "volumes")))
    if not any(_map(v).get("name") == SHM_VOLUME for v in volumes):
        volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
        editor.append((*spec_path, "volumes"), volume)
    for path in targets:
        editor.append((*path, "volumeMounts"), {"name": SHM_VOLUME, "mountPath": "/dev/shm"})


def repair_requests_only(editor: Editor, spec_path: Path, container: Container, name: str) -> None:
    """Copy a GPU request into limits: the device plugin allocates by limit."""
    path = (*spec_path, *container.path, "resources")
    request = _map(_map(editor.get(path)).get("requests")).get(name)
    if request is not None and name not in _map(_map(editor.get(path)).get("limits")):
        editor.add((*path, "limits", name), request)


def apply_containers(
    editor: Editor,
    spec_path: Path,
    pod: PodGPUs,
    mutations: Mutations,
    *,
    inventory: Inventory | None,
    rule: str = "",
    gpus: GPUResources | None = None,
    claims: PodClaims = NO_CLAIMS,
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
    claims_fit: ClaimsFit | None = None,
) -> list[Finding]:
    """Container mutations of one rule; findings where a memory limit had to give way, or
    a value needs a count of GPUs that claims leave unknown until allocation."""
    findings: list[Finding] = []
    # The gpuNodes scope needs to know where the pod can land: see accesscontrol.
    if mutations.hide_gpus == "gpuPods" and pod_asks_for_gpu(pod):
        hide_gpus(editor, spec_path, pod, claims.holders)
    if mutations.gpu_env:
        findings.extend(set_gpu_env(editor, spec_path, pod, mutations, rule=rule, claims=claims))
    if mutations.memory_limit is not None:
        findings += set_memory_limits(
            editor,
            spec_path,
            pod,
            mutations.memory_limit,
            inventory=inventory,
            rule=rule,
            gpus=gpus,
            refusal=refusal,
            claims=claims,
            claims_fit=claims_fit,
        )
    if mutations.shm_size is not None:
        mount_shm(editor, spec_path, pod, mutations.shm_size, claims)
    return findings
