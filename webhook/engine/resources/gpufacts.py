"""What a node's GPU resources really are: whole GPUs, shared slots or MIG slices.

A node advertises counts (``status.allocatable``); what one unit of a count *is* comes from
the labels NVIDIA GPU feature discovery (now part of NVIDIA/k8s-device-plugin, package
``internal/lm``) sets next to them:

- ``nvidia.com/gpu.count``, ``.replicas``, ``.sharing-strategy`` (``none``, ``time-slicing``,
  ``mps``), ``.product`` and ``.memory`` (MiB), written by ``resourceLabeler.baseLabeler``
  in ``internal/lm/resource.go`` for every resource name ``<name>.<suffix>``;
- the product gets ``-SHARED`` when the resource is replicated and not renamed
  (``getProductName``), and ``-MIG-<profile>`` for MIG devices (``NewMIGResourceLabeler``);
- ``nvidia.com/mig.strategy`` (``none``, ``single``, ``mixed``; ``internal/lm/strategy.go``)
  and ``nvidia.com/mig.capable`` (``internal/lm/nvml.go``);
- with ``mig.strategy=single`` the MIG labeler overwrites the ``nvidia.com/gpu.*`` labels:
  ``gpu.count`` is then the number of MIG devices, ``gpu.memory`` that of one slice, and the
  product ``<model>-MIG-<profile>`` (``internal/lm/mig-strategy_test.go``);
- with ``mixed``, each profile is its own resource ``nvidia.com/mig-<profile>`` with labels
  ``nvidia.com/mig-<profile>.count``, ``.product``, ``.memory``, ``.replicas``;
- time-slicing with ``renameByDefault`` advertises ``<name>.shared``
  (``DefaultSharedRename`` in ``api/config/v1/resources.go``) and keeps the labels under the
  original name, product without ``-SHARED``; MPS never renames (``disableResoureRenaming``).

Nodes without these labels keep the old reading: a unit is a whole GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

NVIDIA_GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
CUDA_DRIVER_LABEL = "nvidia.com/cuda.driver.major"
UNLABELLED = "(unlabelled)"

Kind = Literal["whole", "shared", "mig"]


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """One advertised GPU resource on one node class, and what a unit of it is."""

    resource: str
    units: int
    kind: Kind = "whole"
    sharing: str = "none"  # none | time-slicing | mps (a replicated resource)
    replicas: int = 1  # units per physical device (1 unless shared)
    physical: int | None = None  # physical GPUs behind the units; None where unknown
    product: str = ""  # the product a pod gets: "-SHARED" and "-MIG-<profile>" included
    memory_mib: int | None = None  # per unit: a whole GPU's, or one MIG slice's
    profile: str = ""  # MIG profile ("1g.10gb") for MIG devices

    @property
    def shared(self) -> bool:
        return self.sharing != "none" or self.replicas > 1

    @property
    def describe(self) -> str:
        """How a person would name a unit: "whole GPU", "time-slicing slot (x4)", ..."""
        what = {"whole": "whole GPU", "shared": "shared slot", "mig": f"MIG {self.profile} slice"}
        text = what[self.kind]
        if self.shared:
            text += f", {self.sharing if self.sharing != 'none' else 'shared'} x{self.replicas}"
        return text


@dataclass(frozen=True, slots=True)
class GPUFacts:
    """GPU facts of one node class, read once per shape from its labels and allocatable."""

    product: str = ""
    physical: int | None = None  # physical NVIDIA GPUs; None where the labels do not say
    mig_strategy: str = ""
    mig_capable: bool = False
    cuda_driver_major: int | None = None
    devices: Mapping[str, DeviceFacts] = field(default_factory=dict)

    def device(self, resource: str, units: int) -> DeviceFacts:
        known = self.devices.get(resource)
        return known if known is not None else DeviceFacts(resource, units, physical=units)


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _base(resource: str) -> str:
    """The name GFD labels a resource under: a renamed ``X.shared`` is labelled as ``X``."""
    return resource.removesuffix(SHARED_SUFFIX)


def _device(resource: str, units: int, labels: Mapping[str, str], *, single: bool) -> DeviceFacts:
    base = _base(resource)
    renamed = resource != base
    product = labels.get(f"{base}.product", "")
    replicas = _int(labels.get(f"{base}.replicas")) or 1
    sharing = labels.get(f"{base}.sharing-strategy") or "none"
    if renamed and sharing == "none":
        sharing = "time-slicing"  # renamed resources come only from time-slicing
    memory = _int(labels.get(f"{base}.memory"))
    shared = replicas > 1 or renamed or product.endswith("-SHARED")
    profile = ""
    if base.startswith(MIG_PREFIX):
        profile = base.removeprefix(MIG_PREFIX)
        if not product and labels.get(PRODUCT_LABEL):
            product = f"{labels[PRODUCT_LABEL]}-MIG-{profile}"
    elif single and "-MIG-" in product and not product.endswith("-MIG-INVALID"):
        profile = product.partition("-MIG-")[2].removesuffix("-SHARED")
    if shared and product and not product.endswith("-SHARED"):
        product += "-SHARED"
    kind: Kind = "mig" if profile else "shared" if shared else "whole"
    physical: int | None = None
    if kind == "whole":
        physical = units
    elif kind == "shared":
        count = _int(labels.get(f"{base}.count"))
        physical = count if count else (units // replicas if replicas > 1 else None)
    return DeviceFacts(
        resource=resource,
        units=units,
        kind=kind,
        sharing=sharing if shared else "none",
        replicas=replicas if shared else 1,
        physical=physical,
        product=product,
        memory_mib=memory,
        profile=profile,
    )


def gpu_facts(labels: Mapping[str, str], allocatable: Mapping[str, int]) -> GPUFacts:
    """Facts for every NVIDIA GPU resource a node advertises; other vendors' resources
    are whole devices (``GPUFacts.device`` answers for them)."""
    strategy = labels.get(MIG_STRATEGY_LABEL, "")
    single = strategy == "single"
    devices = {
        name: _device(name, units, labels, single=single)
        for name, units in allocatable.items()
        if units > 0 and (name == NVIDIA_GPU or name.startswith((NVIDIA_GPU + ".", MIG_PREFIX)))
    }
    product = labels.get(PRODUCT_LABEL, "")
    physical: int | None = None
    if not (single and "-MIG-" in product):
        # Under "single" the MIG labeler overwrites gpu.count with the number of slices.
        physical = _int(labels.get(COUNT_LABEL))
    if physical is None:
        whole = devices.get(NVIDIA_GPU)
        physical = whole.physical if whole is not None else None
    return GPUFacts(
        product=product,
        physical=physical,
        mig_strategy=strategy,
        mig_capable=labels.get(MIG_CAPABLE_LABEL) == "true",
        cuda_driver_major=_int(labels.get(CUDA_DRIVER_LABEL)),
        devices=devices,
    )


# MIG profiles per GPU, from NVIDIA's Multi-Instance GPU User Guide ("Supported MIG
# Profiles", docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html)
# and the GPU operator's default mig-parted configuration. A requested profile found here
# is real: if no node offers it, the cluster lacks it, and no other profile is suggested.
MIG_PROFILES: dict[str, tuple[str, ...]] = {
    "A30-24GB": ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
    "A100-40GB": ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB / H100-80GB / H800-80GB": (
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ),
    "H100-94GB": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "GH200-96GB": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    "H200-141GB": (
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    ),
    "B200-180GB": (
        "1g.23gb",
        "1g.23gb+me",
        "1g.45gb",
        "2g.45gb",
        "3g.90gb",
        "4g.90gb",
        "7g.180gb",
    ),
    "RTX-PRO-6000-Blackwell": ("1g.24gb", "2g.48gb", "4g.96gb"),
}


def mig_profile_gpus(profile: str) -> list[str]:
    """The GPUs that offer a MIG profile; empty for a profile no GPU has (a typo)."""
    return [gpu for gpu, profiles in MIG_PROFILES.items() if profile in profiles]
