"""Rules keyed on node labels that no GPU node carries: warnings for ``rules lint --inventory``
and ``serve`` (issue 31).

GPU Operator's DRA stack (``GPUCluster``) runs neither the device plugin nor GPU feature
discovery, so a rule written for GFD's labels keys on labels its GPU nodes lack. The engine
then holds product, memory, architecture and driver rules on the devices ResourceSlices
publish (``scheduling.devicepolicy``), GFD's per-profile MIG labels on MIG devices of that
profile, and the sharing strategy as whether a device allows multiple allocations; every
other key (MIG strategy and config, a node's count of devices, a label the cluster never
set) silently matches no node. Either way the admin is told: which
rule, which label, and what to key on instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from webhook.engine.policy.ruleset import Policy, PolicyProblem, Rule
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.gpufacts import MEMORY_LABEL, PRODUCT_LABEL
from webhook.engine.resources.inventory import Inventory, Node
from webhook.engine.scheduling.devicepolicy import (
    GPU_MIG_LABELS,
    MIG_COUNT,
    NVIDIA_DRA_DRIVER,
    REPLICAS_LABEL,
    SHARING_LABEL,
    dra_profile,
    is_device_label,
    mig_label,
)
from webhook.engine.scheduling.dra import gpu_devices, gpu_names

# The DRA driver's reading of each GFD label (k8s-dra-driver-gpu deviceinfo.go).
_ATTRIBUTE = {
    PRODUCT_LABEL: f"device.attributes['{NVIDIA_DRA_DRIVER}'].productName",
    MEMORY_LABEL: f"device.capacity['{NVIDIA_DRA_DRIVER}'].memory",
    "nvidia.com/gpu.family": f"device.attributes['{NVIDIA_DRA_DRIVER}'].architecture",
    "nvidia.com/gpu.compute": f"device.attributes['{NVIDIA_DRA_DRIVER}'].cudaComputeCapability",
    "nvidia.com/cuda.driver": f"device.attributes['{NVIDIA_DRA_DRIVER}'].driverVersion",
    "nvidia.com/cuda.runtime": f"device.attributes['{NVIDIA_DRA_DRIVER}'].cudaDriverVersion",
}


# A per-profile MIG label's reading (``devicepolicy._mig_labels``): the device's profile,
# and the attribute or capacity that stands for the suffix (slices: the profile itself).
_MIG_ATTRIBUTE = {
    "product": "attributes['{d}'].productName",
    "memory": "capacity['{d}'].memory",
    "multiprocessors": "capacity['{d}'].multiprocessors",
    "engines.copy": "capacity['{d}'].copyEngines",
    "engines.decoder": "capacity['{d}'].decoders",
    "engines.encoder": "capacity['{d}'].encoders",
    "engines.jpeg": "capacity['{d}'].jpegEngines",
    "engines.ofa": "capacity['{d}'].ofaEngines",
}


def _attribute(key: str) -> str:
    device = f"device.attributes['{NVIDIA_DRA_DRIVER}']"
    found = mig_label(key)
    if key in GPU_MIG_LABELS:  # mig.strategy single: the attributes of every MIG device
        suffix, text = key.removeprefix("nvidia.com/gpu."), f"{device}.type == 'mig'"
    elif found is not None:
        suffix = found[1]
        # ``type`` first: ``profile`` on a device without it is a CEL error.
        text = f"{device}.type == 'mig' && {device}.profile == '{dra_profile(found[0])}'"
    else:
        suffix = text = ""
    if text:
        if suffix in ("replicas", "sharing-strategy"):
            return f"{text} && !device.allowMultipleAllocations"
        extra = _MIG_ATTRIBUTE.get(suffix)
        if extra:
            return f"{text} && device.{extra.format(d=NVIDIA_DRA_DRIVER)}"
        return text if found is not None else f"{text} && {device}.profile"  # the slices
    for prefix, attribute in _ATTRIBUTE.items():
        if key == prefix or key.startswith(f"{prefix}."):
            return attribute
    return _ATTRIBUTE["nvidia.com/cuda.driver"]  # cuda.driver-version.* keys


def _keys(rule: Rule) -> Iterator[tuple[str, str]]:
    """(path, label key) of every node label the rule's mutations key on."""
    for requirement in rule.mutations.required_affinity:
        yield "spec.mutate.nodeAffinity", str(requirement.get("key"))
    for preference in rule.mutations.preferred_affinity:
        for expression in preference.get("matchExpressions") or []:
            yield "spec.mutate.nodeAffinity.preferred", str(expression.get("key"))
    if rule.mutations.avoid_gpu_nodes is not None:
        yield "spec.mutate.avoidGPUNodes.nodeLabel", rule.mutations.avoid_gpu_nodes.key


def _instead(key: str, *, dra: bool, carried: Sequence[str]) -> str:
    if dra and key in (SHARING_LABEL, REPLICAS_LABEL):
        # kubernetes pkg/apis/resource/types.go, Device.AllowMultipleAllocations; CEL sees it
        # as device.allowMultipleAllocations (k8s.io/dynamic-resource-allocation
        # cel/compile.go, multiAllocVar, with DRAConsumableCapacity).
        return (
            "its GPUs are described in ResourceSlices, where a device that allows no multiple "
            "allocations reads as sharing strategy none with 1 replica and a device with "
            "allowMultipleAllocations (consumable capacity) as shared, strategy not known (the "
            "DRA driver time-slices or runs MPS per claim): the webhook holds the rule there. "
            "Key claims on !device.allowMultipleAllocations in a CEL selector instead (or "
            "keep shared and whole GPUs apart by DeviceClass)"
        )
    found = mig_label(key)
    if dra and found is not None and found[1] == MIG_COUNT:
        return (
            "its GPUs are described in ResourceSlices, and how many MIG devices of profile "
            f"{found[0]} a node has is the node's, not any device's (GFD counts them per "
            "node, as nvidia.com/gpu.count): no device reading. Ask for the devices in a "
            f"ResourceClaim instead (its count, with device.attributes['{NVIDIA_DRA_DRIVER}']"
            f".profile == '{dra_profile(found[0])}' in a CEL selector)"
        )
    if dra and is_device_label(key):
        return (
            f"its GPUs are described in ResourceSlices ({_attribute(key)}), where the webhook "
            "holds the rule: pods are admitted where every device they may get meets it, and "
            "a plain GPU resource that the class could serve from other devices is denied with "
            f"the claim to write. Key claims on {_attribute(key)} in a CEL selector instead"
        )
    if dra:
        return (
            "no DRA device attribute stands for it (the DRA driver shares GPUs by consumable "
            "capacity and partitions them by DynamicMIG, not by node labels): select the "
            "devices in a ResourceClaim (class, selectors, capacity requests) instead"
        )
    shown = ", ".join(carried[:4]) or "none"
    return (
        "check that GPU feature discovery runs, or key the rule on a label the GPU nodes "
        f"carry (every GPU node has: {shown})"
    )


def label_warnings(
    policy: Policy, nodes: Inventory | None, devices: DeviceInventory | None
) -> list[PolicyProblem]:
    """One warning per rule and label key that no GPU node carries (a node offering a GPU
    resource, or holding devices of a GPU class). Nothing without GPU nodes to look at."""
    if nodes is None:
        return []
    gpu_node = _gpu_node(policy, devices)
    members = [n for shape in nodes.shapes if not shape.pool for n in shape.members]
    gpu = [n for n in members if gpu_node(n)]
    if not gpu:
        return []
    labelled = set().union(*(set(n.labels) for n in gpu))
    carried = sorted(
        set.intersection(*(set(n.labels) for n in gpu)) - {"kubernetes.io/hostname"},
        key=lambda k: (not k.startswith("nvidia.com/"), k),
    )
    dra = devices is not None and any(_holds(devices, policy)(n) for n in gpu)
    warnings: list[PolicyProblem] = []
    seen: set[tuple[str, str]] = set()
    for rule in policy.rules:
        for path, key in _keys(rule):
            if key in labelled or (rule.name, key) in seen:
                continue
            seen.add((rule.name, key))
            warnings.append(
                PolicyProblem(
                    rule.document,
                    path,
                    f"rule {rule.name} keys on node label {key}, which no GPU node carries "
                    f"({len(gpu)} GPU node{'s' if len(gpu) != 1 else ''}): "
                    + _instead(key, dra=dra, carried=carried),
                )
            )
    return warnings


def _holds(devices: DeviceInventory, policy: Policy) -> Callable[[Node], bool]:
    settings = policy.settings
    _, is_gpu_class = gpu_names(
        settings.gpu_resources, is_gpu_class=settings.gpu_device_classes, devices=devices
    )
    return gpu_devices(devices, is_gpu_class).holds


def _gpu_node(policy: Policy, devices: DeviceInventory | None) -> Callable[[Node], bool]:
    is_gpu = policy.settings.gpu_resources.is_gpu
    holds = _holds(devices, policy) if devices is not None else None

    def gpu(node: Node) -> bool:
        if any(is_gpu(r) and a > 0 for r, a in node.allocatable.items()):
            return True
        return holds is not None and holds(node)

    return gpu
