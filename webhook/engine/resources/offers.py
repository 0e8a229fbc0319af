"""Whether anything in the cluster offers an extended resource, and what a name that nothing
offers may have meant.

kube-scheduler's NodeResourcesFit keeps a pod off every node that lacks one of its
extended resources (``fitsRequest``, kubernetes ``pkg/scheduler/framework/plugins/
noderesources/fit.go``), unless the scheduler is told to ignore it (``ignoredResources``,
``ignoredResourceGroups`` of the plugin's args) or, with DRA extended resources (KEP-5004),
a DeviceClass serves it. A name nothing offers therefore keeps the pod Pending for ever:
``nvidia.com/gpus``, ``nvida.com/gpu`` and ``nvidia.com/GPU`` (names are case-sensitive) are
the first cause of "Pending" in GPU troubleshooting guides.

``offered`` is the one question "does anything offer this resource"; every check that asks
it (``unknownResource`` in the webhook, ``explain``) asks here, so that a new source of
resources (a node pool kind, DRA capacity) is added once.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.gpufacts import MIG_PREFIX, mig_profile_gpus
from webhook.engine.resources.inventory import Inventory

# GPU resource names the known vendors' device plugins advertise: NVIDIA
# (k8s-device-plugin; ``.shared`` with renameByDefault), AMD (ROCm/k8s-device-plugin),
# Intel (intel-device-plugins-for-kubernetes: i915, xe), Habana/Intel Gaudi
# (habanalabs-k8s-device-plugin: habana.ai/gaudi).
VENDOR_GPU_RESOURCES: tuple[str, ...] = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
    "habana.ai/gaudi",
)
# Each vendor's domain, and the word its misspellings keep (``nvidia.io``, ``intel.com``).
VENDOR_DOMAINS: dict[str, str] = {
    "nvidia.com": "nvidia",
    "amd.com": "amd",
    "gpu.intel.com": "intel",
    "habana.ai": "habana",
}


def offered(resource: str, *, nodes: Inventory | None, devices: DeviceInventory | None) -> bool:
    """Whether some node, declared node pool or DRA device class offers ``resource``.

    ``nodes`` is the snapshot with the declared node pools (``Inventory.with_nodes``): a
    pool's allocatable counts as a node's. ``devices`` is the DRA inventory: a DeviceClass
    serves its ``spec.extendedResourceName`` and ``deviceclass.resource.kubernetes.io/<class>``
    (``DeviceInventory.extended``). Neither known: nothing is known to offer it."""
    if nodes is not None and resource in nodes.resource_names:
        return True
    return devices is not None and resource in devices.extended


def offered_names(*, nodes: Inventory | None, devices: DeviceInventory | None) -> frozenset[str]:
    """Every extended resource name something offers (what ``offered`` says yes to)."""
    names: set[str] = set(nodes.resource_names) if nodes is not None else set()
    if devices is not None:
        names |= devices.extended.keys()
    return frozenset(names)


def _distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance (a swap of two neighbours counts one), stopping
    once it exceeds ``limit``: names compared are short, but an admission compares many."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            value = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                value = min(value, previous2[j - 2] + 1)
            row.append(value)
        if min(row) > limit:
            return limit + 1
        previous2, previous = previous, row
    return previous[-1]


def _plain(name: str) -> str:
    """A name without case or a plural ``s``: what a typo of case or number leaves."""
    lowered = name.lower()
    return lowered[:-1] if lowered.endswith("s") and not lowered.endswith("ss") else lowered


def lookalike(resource: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``resource`` is a misspelling of, or ``None``: another case or number
    (``nvidia.com/GPU``, ``nvidia.com/gpus``), at most two edits (``nvida.com/gpu``), or the
    same resource under a misspelt vendor domain (``nvidia.io/gpu``). MIG profiles are
    compared after their prefix, so ``mig-1g.10bg`` finds ``mig-1g.10gb``; a real MIG
    profile (``gpufacts.MIG_PROFILES``) is no misspelling of another."""
    if resource.startswith(MIG_PREFIX) and mig_profile_gpus(resource.removeprefix(MIG_PREFIX)):
        return None
    domain, _, path = resource.partition("/")
    best: tuple[int, str] | None = None
    for candidate in sorted(set(candidates)):
        if candidate == resource:
            continue
        if _plain(candidate) == _plain(resource):
            return candidate
        c_domain, _, c_path = candidate.partition("/")
        score = _distance(resource.lower(), candidate.lower(), 2)
        if score > 2 and _plain(path) == _plain(c_path) and c_domain in VENDOR_DOMAINS:
            labels = domain.lower().split(".")
            if VENDOR_DOMAINS[c_domain] in labels or _distance(domain.lower(), c_domain, 2) <= 2:
                score = 2
        if score <= 2 and (best is None or score < best[0]):
            best = (score, candidate)
    if best is None:
        return None
    if resource.startswith(MIG_PREFIX) != best[1].startswith(MIG_PREFIX):
        return None  # a MIG profile is no typo of a whole GPU, nor the other way round
    return best[1]
