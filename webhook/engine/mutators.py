"""Mutations: each adds only what is missing and never overrides what the user set.

Every function here is idempotent: run on its own output it records no operation, which is
what makes ``reinvocationPolicy: IfNeeded`` and repeated ``kubectl apply`` safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.engine.gpuaccess import VISIBLE_DEVICES, asks_for_gpu, pod_asks_for_gpu
from webhook.engine.gpus import Container, PodGPUs
from webhook.engine.inventory import Inventory, Placement
from webhook.engine.patch import Editor
from webhook.engine.policy import MemoryLimit, Mutations, NodeLabel
from webhook.engine.quantity import QuantityError, format_bytes, parse_quantity
from webhook.engine.selectors import toleration_covers
from webhook.engine.workloads import Path

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
    for toleration in wanted:
        existing = _list(editor.get((*spec_path, "tolerations")))
        if not any(isinstance(t, dict) and toleration_covers(t, toleration) for t in existing):
            editor.append((*spec_path, "tolerations"), dict(toleration))


def _constrained_keys(term: Mapping[str, Any]) -> set[str]:
    return {str(e.get("key")) for e in _list(term.get("matchExpressions")) if isinstance(e, dict)}


def add_required_affinity(
    editor: Editor, spec_path: Path, wanted: Sequence[Mapping[str, Any]]
) -> None:
    """AND each requirement into every existing term (terms are ORed, so a requirement must
    hold in each), skipping terms (or a nodeSelector) that already constrain its key."""
    selector = _map(editor.get((*spec_path, "nodeSelector")))
    wanted = [dict(r) for r in wanted if r["key"] not in selector]
    if not wanted:
        return
    required_path = (*spec_path, "affinity", "nodeAffinity", _REQUIRED)
    terms = _list(editor.get((*required_path, "nodeSelectorTerms")))
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
        if asks_for_gpu(container) or container.path in claim_holders:
            continue
        path = (*spec_path, *container.path)
        names = _env_names(editor, path)
        if VISIBLE_DEVICES in names:
            continue
        missing = [{"name": name, "value": value} for name, value in HIDE_GPUS if name not in names]
        if _list(editor.get((*path, "env"))):
            for entry in missing:
                editor.append((*path, "env"), entry)
        else:
            editor.add((*path, "env"), missing)  # one operation for a container without env


def render_env(template: str, gpu_count: int) -> str:
    # Inside a container GPUs are numbered from 0, whatever their host index.
    indexes = ",".join(str(i) for i in range(gpu_count))
    return template.replace("{gpuCount}", str(gpu_count)).replace("{gpuIndexes}", indexes)


def set_gpu_env(editor: Editor, spec_path: Path, pod: PodGPUs, mutations: Mutations) -> None:
    for container in pod.containers:
        if not container.gpu_count:
            continue
        path = (*spec_path, *container.path)
        for var in mutations.gpu_env:
            entry = {"name": var.name, "value": render_env(var.value, container.gpu_count)}
            names = _env_names(editor, path)
            if var.name not in names:
                editor.append((*path, "env"), entry)
            elif var.override:
                index = names[var.name]
                if editor.get((*path, "env", index)) != entry:
                    editor.replace((*path, "env", index), entry)


def _memory(value: object) -> int | None:
    try:
        return int(parse_quantity(value)) if value is not None else None
    except QuantityError:
        return None


def memory_share(inventory: Inventory, placement: Placement, container: Container) -> int | None:
    """Per-GPU share of memory on the smallest node the pod can use, times its GPUs."""
    shares = [
        shape.allocatable.get("memory", 0) // shape.allocatable[name] * count
        for name, count in container.gpus.items()
        for shape in inventory.admitted(name, placement)
        if shape.allocatable.get("memory")
    ]
    return min(shares) if shares else None


def set_memory_limits(
    editor: Editor,
    spec_path: Path,
    pod: PodGPUs,
    limit: MemoryLimit,
    *,
    inventory: Inventory | None,
) -> None:
    placement = None
    for container in pod.containers:
        if not container.gpu_count:
            continue
        path = (*spec_path, *container.path, "resources")
        resources = _map(editor.get(path))
        if "memory" in _map(resources.get("limits")):
            continue
        if limit.mode == "fixed":
            amount: int | None = limit.amount
        elif limit.mode == "perGPU":
            amount = limit.amount * container.gpu_count
        else:
            if inventory is None:
                continue
            placement = placement or Placement.of(_map(editor.get(spec_path)))
            amount = memory_share(inventory, placement, container)
        if amount is None:
            continue
        request = _memory(_map(resources.get("requests")).get("memory"))
        if request is not None:
            amount = max(amount, request)
        editor.add((*path, "limits", "memory"), format_bytes(amount))


def mount_shm(editor: Editor, spec_path: Path, pod: PodGPUs, size: str) -> None:
    """A memory-backed /dev/shm: the container runtime's 64 MB breaks PyTorch loaders."""
    targets = []
    for container in pod.containers:
        if not container.gpu_count:
            continue
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
    claim_holders: frozenset[Path] = frozenset(),
) -> None:
    # The gpuNodes scope needs to know where the pod can land: see accesscontrol.
    if mutations.hide_gpus == "gpuPods" and pod_asks_for_gpu(pod):
        hide_gpus(editor, spec_path, pod, claim_holders)
    if mutations.gpu_env:
        set_gpu_env(editor, spec_path, pod, mutations)
    if mutations.memory_limit is not None:
        set_memory_limits(editor, spec_path, pod, mutations.memory_limit, inventory=inventory)
    if mutations.shm_size is not None:
        mount_shm(editor, spec_path, pod, mutations.shm_size)
