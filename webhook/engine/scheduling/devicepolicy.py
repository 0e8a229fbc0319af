"""Policies keyed on GPU node labels, held on the devices that ResourceSlices publish.

On a cluster served by NVIDIA's DRA driver (GPU Operator's ``GPUCluster``) there is no device
plugin and no GPU feature discovery, so GPU nodes carry no ``nvidia.com/gpu.*`` labels; each
GPU is described in a ResourceSlice instead (NVIDIA/k8s-dra-driver-gpu
``cmd/gpu-kubelet-plugin/deviceinfo.go``, ``GpuInfo.GetDevice``, ``MigDeviceInfo.GetDevice``:
attributes ``type``, ``productName`` (a MIG device's is its parent's), ``architecture``,
``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, MIG devices'
``profile``, and capacity ``memory`` in bytes). A rule written against the labels is read here
against the labels GFD would have written for that device (NVIDIA/k8s-device-plugin
``internal/lm/resource.go``, ``productLabel``: NVML's name with each space replaced by a dash,
``-MIG-<profile>`` for MIG devices; ``.memory`` in MiB; ``.family`` from the architecture;
``internal/lm/nvml.go``: the driver and CUDA versions; a MIG device also gets the labels GFD
writes for its profile, ``nvidia.com/mig-<profile>.*``: ``_mig_labels``), so one rule says one
thing on both kinds of node: ``NVIDIA A100-SXM4-80GB`` is ``NVIDIA-A100-SXM4-80GB``.

Node affinity cannot choose among the devices of one node, and a webhook cannot change a
claim that a pod only names (the claim exists already; a template is read when the pod is
created, by the resourceclaim controller). A plain ``nvidia.com/gpu`` that a DeviceClass
serves becomes a claim that takes the class's selectors only (KEP-5004;
kubernetes ``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``,
``createResourceRequestAndMappings``). So every device a pod's claim may get must satisfy the
policy, or the pod is denied with the selector (or the whole claim) to write.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.engine.kube.quantity import format_bytes
from webhook.engine.kube.selectors import requirement_matches
from webhook.engine.policy.decision import Finding
from webhook.engine.policy.ruleset import Action, Rule
from webhook.engine.resources.cel.celbudget import review_spent
from webhook.engine.resources.cel.deviceselectors import SelectorError, compile_selector
from webhook.engine.resources.devices import ClaimSpec, Device, DeviceInventory, SubRequest
from webhook.engine.resources.gpufacts import (
    MEMORY_LABEL,
    MIG_PREFIX,
    MIG_STRATEGY_LABEL,
    PRODUCT_LABEL,
)
from webhook.engine.resources.inventory import Inventory, Node, Placement
from webhook.engine.scheduling.dra import (
    Candidates,
    PodClaim,
    PodClaims,
    candidates,
    eligible_devices,
    eligible_or_unknown,
    fits_somewhere,
)

NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
MIB = 2**20
_FAMILY_LABEL = "nvidia.com/gpu.family"
_COMPUTE = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
_DRIVER = (
    ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"),
    (
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ),
)
# A device the allocator gives to one claim at a time (no ``allowMultipleAllocations``,
# kubernetes pkg/apis/resource/types.go, KEP-5075) is what GFD labels sharing strategy
# ``none`` with ``replicas`` 1 (NVIDIA/k8s-device-plugin internal/lm/resource.go,
# ``replicasLabel``: 1 unless time-slicing replicates the resource). A device that allows
# multiple allocations gets no strategy: NVIDIA's DRA driver time-slices or runs MPS per
# claim (its opaque GpuConfig ``sharing``), so no value holds for the device itself.
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
_RUNTIME = (
    ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"),
    ("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"),
)
# GFD's MIG attribute labels under nvidia.com/gpu (mig.strategy single; see ``MIG_PREFIX``).
GPU_MIG_LABELS = frozenset(
    f"nvidia.com/gpu.{suffix}"
    for suffix in (
        "multiprocessors",
        "slices.gi",
        "slices.ci",
        *(f"engines.{e}" for e in ("copy", "decoder", "encoder", "jpeg", "ofa")),
    )
)
# The GFD labels a DRA device's attributes can stand for; a rule keyed on any other node
# label (MIG strategy and config, a cloud's accelerator label) has no device reading: the
# MIG strategy is the device plugin's way of naming MIG resources, not a device's property.
DEVICE_LABELS = frozenset(
    {
        PRODUCT_LABEL,
        MEMORY_LABEL,
        _FAMILY_LABEL,
        *_COMPUTE,
        *(k for keys in _DRIVER for k in keys),
        *(k for keys in _RUNTIME for k in keys),
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.runtime-version.full",
        SHARING_LABEL,
        REPLICAS_LABEL,
        *GPU_MIG_LABELS,
    }
)


# Not a GFD label: whether a device is a whole GPU to itself (type gpu, no multiple
# allocations), what ``wholeGPUsOnly`` asks; a MIG device or a shared one is part of a GPU.
WHOLE_GPU = "gpu-webhook.io/whole-gpu"

# GFD's labels of one MIG profile: with mig.strategy mixed each profile is its resource
# ``nvidia.com/mig-<profile>`` (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go,
# ``newMigStrategyMixedLabeler``), labelled by ``NewMIGResourceLabeler`` (internal/lm/
# resource.go: ``baseLabeler``'s product, count, replicas, sharing-strategy, and
# ``newMigAttributeLabels``, the MIG device's NVML attributes of internal/resource/
# nvml-mig-device.go ``GetAttributes``: memory, multiprocessors, slices.gi, slices.ci,
# engines.*); with ``single`` the same attribute labels go under ``nvidia.com/gpu``. NVIDIA's
# DRA driver publishes a MIG device's GPU-instance profile as capacity (k8s-dra-driver-gpu
# cmd/gpu-kubelet-plugin/mig.go, ``CommonCapacitiesMig``: multiprocessors, copyEngines,
# decoders, encoders, jpegEngines, ofaEngines, memory) and only profiles whose compute
# instance spans the GPU instance (nvlib.go: ``G != C`` profiles are skipped), so the SM
# count and the engines NVML reports for the MIG device are those of its GPU instance.
_MIG_CAPACITY = {
    "multiprocessors": "multiprocessors",
    "engines.copy": "copyEngines",
    "engines.decoder": "decoders",
    "engines.encoder": "encoders",
    "engines.jpeg": "jpegEngines",
    "engines.ofa": "ofaEngines",
}
_MIG_SLICES = ("slices.gi", "slices.ci")
# The node's count of MIG devices of a profile (``baseLabeler``'s count): a property of the
# node, not of any one device, so no device reading, as ``nvidia.com/gpu.count`` has none.
MIG_COUNT = "count"
_MIG_SUFFIXES = (
    "product",
    "memory",
    "replicas",
    "sharing-strategy",
    *_MIG_SLICES,
    *_MIG_CAPACITY,
    MIG_COUNT,
)
# A profile as go-nvlib names it (``MigProfileInfo.String``: ``[<c>c.]<g>g.<gb>gb``, then
# ``+attr,...`` or ``-attr``); GFD's resource name replaces each ``+`` by a dot
# (``nvmlMigDevice.GetName``).
_PROFILE = re.compile(r"(?:(\d+)c\.)?(\d+)g\.\d+gb(?:[+.-].*)?")


def mig_label(key: str) -> tuple[str, str] | None:
    """(profile as GFD names it, suffix) of a per-profile MIG label, else None."""
    if not key.startswith(MIG_PREFIX):
        return None
    rest = key[len(MIG_PREFIX) :]
    for suffix in _MIG_SUFFIXES:
        if rest.endswith(f".{suffix}") and len(rest) > len(suffix) + 1:
            return rest[: -len(suffix) - 1], suffix
    return None


def is_device_label(key: str) -> bool:
    """Whether a GPU node label has a reading on DRA devices (``device_labels``)."""
    if key in DEVICE_LABELS:
        return True
    found = mig_label(key)
    return found is not None and found[1] != MIG_COUNT


def gfd_profile(profile: str) -> str:
    """A DRA device's ``profile`` as GFD's labels name it: ``1g.10gb+me`` is ``1g.10gb.me``."""
    return profile.replace("+", ".")


def dra_profile(profile: str) -> str:
    """GFD's name of a profile as the DRA driver's ``profile`` attribute has it (go-nvlib's
    ``MigProfileInfo.String``): the dot after ``<gb>gb`` is a ``+``."""
    base = re.match(r"(?:\d+c\.)?\d+g\.\d+gb", profile)
    if base is None or base.end() == len(profile) or profile[base.end()] != ".":
        return profile
    return f"{base.group(0)}+{profile[base.end() + 1 :]}"


def _mig_labels(device: Device, profile: str, product: str, memory: int | None) -> dict[str, str]:
    """What GFD would label a node holding only this MIG device: its profile's labels, and
    with mig.strategy single the same attributes under ``nvidia.com/gpu``."""
    named = gfd_profile(profile)
    values: dict[str, str] = {}
    if product:
        values["product"] = f"{label_form(product)}-MIG-{named}"
    if memory is not None:
        values["memory"] = str(memory)
    if not device.shared:
        values["replicas"] = "1"
        values["sharing-strategy"] = "none"
    slices = _PROFILE.fullmatch(profile)
    if slices is not None:
        values["slices.gi"] = slices.group(2)
        values["slices.ci"] = slices.group(1) or slices.group(2)
    capacity = {n: v for d, n, v in device.capacity if d == NVIDIA_DRA_DRIVER}
    whole_instance = slices is not None and slices.group(1) is None
    for suffix, name in _MIG_CAPACITY.items():
        value = capacity.get(name)
        # The GPU instance's SMs are the MIG device's only where its compute instance
        # spans it; the engines are shared by the instance's compute instances.
        if value is not None and (whole_instance or suffix != "multiprocessors"):
            values[suffix] = str(int(value))
    labels = {f"{MIG_PREFIX}{named}.{suffix}": value for suffix, value in values.items()}
    for suffix in (*_MIG_SLICES, *_MIG_CAPACITY):
        if suffix in values:
            labels[f"nvidia.com/gpu.{suffix}"] = values[suffix]
    return labels


def label_form(product: str) -> str:
    """A product as GFD labels it: NVML's name with dashes for spaces (``productLabel``)."""
    return product.replace(" ", "-")


def _text(value: object) -> str:
    text = getattr(value, "text", value)
    return text if isinstance(text, str) else ""


def _numbers(version: str) -> list[str]:
    return version.split("-", maxsplit=1)[0].split("+", maxsplit=1)[0].split(".")


def device_labels(device: Device) -> dict[str, str]:
    """The GFD labels of a node holding only this device, from its attributes."""
    attr = {(d, n): v for d, n, v in device.attributes if d == NVIDIA_DRA_DRIVER}
    labels: dict[str, str] = {}
    product = _text(attr.get((NVIDIA_DRA_DRIVER, "productName")))
    kind = _text(attr.get((NVIDIA_DRA_DRIVER, "type")))
    profile = _text(attr.get((NVIDIA_DRA_DRIVER, "profile"))) if kind == "mig" else ""
    if product:
        labels[PRODUCT_LABEL] = label_form(product)
        if profile:
            labels[PRODUCT_LABEL] += f"-MIG-{gfd_profile(profile)}"
    labels[WHOLE_GPU] = str(kind == "gpu" and not device.shared).lower()
    if not device.shared:
        labels[SHARING_LABEL] = "none"
        labels[REPLICAS_LABEL] = "1"
    memory = next(
        (v for d, n, v in device.capacity if (d, n) == (NVIDIA_DRA_DRIVER, "memory")), None
    )
    if memory is not None:
        labels[MEMORY_LABEL] = str(int(memory) // MIB)
    if profile:
        mib = int(memory) // MIB if memory is not None else None
        labels.update(_mig_labels(device, profile, product, mib))
    family = _text(attr.get((NVIDIA_DRA_DRIVER, "architecture")))
    if family:
        labels[_FAMILY_LABEL] = family.lower()
    compute = _numbers(_text(attr.get((NVIDIA_DRA_DRIVER, "cudaComputeCapability"))))
    for key, part in zip(_COMPUTE, compute, strict=False):
        if part.isdigit():
            labels[key] = part
    driver = _text(attr.get((NVIDIA_DRA_DRIVER, "driverVersion")))
    if driver:
        labels["nvidia.com/cuda.driver-version.full"] = driver
        for keys in _DRIVER:
            labels.update(zip(keys, _numbers(driver), strict=False))
    runtime = _text(attr.get((NVIDIA_DRA_DRIVER, "cudaDriverVersion")))
    if runtime:
        labels["nvidia.com/cuda.runtime-version.full"] = runtime
        for names in _RUNTIME:
            labels.update(zip(names, _numbers(runtime), strict=False))
    return labels


@dataclass(frozen=True, slots=True)
class DeviceRule:
    """One constraint of one rule, read on devices: ``check`` is the rule's check kind
    (``allowedProducts``, ``minGPUMemory``) or ``nodeAffinity`` for its required affinity."""

    rule: str
    check: str
    action: Action
    describe: str
    requirements: tuple[Mapping[str, Any], ...] = ()
    products: tuple[str, ...] = ()
    min_memory_mib: int | None = None
    whole: bool = False

    def allows(self, labels: Mapping[str, str]) -> bool:
        if self.whole:
            return labels.get(WHOLE_GPU) == "true"
        if self.requirements:
            return all(requirement_matches(r, labels) for r in self.requirements)
        if self.products:
            product = labels.get(PRODUCT_LABEL, "")
            return bool(product) and any(fnmatch.fnmatchcase(product, p) for p in self.products)
        if self.min_memory_mib is not None:
            memory = labels.get(MEMORY_LABEL, "")
            return memory.isdigit() and int(memory) >= self.min_memory_mib
        return True


def _requirement_text(r: Mapping[str, Any]) -> str:
    values = r.get("values") or []
    return f"{r.get('key')} {r.get('operator')} {list(map(str, values))}".replace("'", "")


def device_rules(rules: Sequence[Rule], *, affinity: bool = True) -> tuple[DeviceRule, ...]:
    """The device reading of each rule's label-keyed required affinity (keys that
    ``is_device_label``) and of its ``allowedProducts``, ``minGPUMemory`` and
    ``wholeGPUsOnly`` checks."""
    out: list[DeviceRule] = []
    for rule in rules:
        keyed = tuple(
            r for r in rule.mutations.required_affinity if is_device_label(str(r.get("key")))
        )
        if keyed and affinity:
            text = ", ".join(map(_requirement_text, keyed))
            out.append(DeviceRule(rule.name, "nodeAffinity", "deny", text, requirements=keyed))
        for check in rule.checks:
            if check.kind == "allowedProducts":
                listed = ", ".join(check.value)
                out.append(
                    DeviceRule(
                        rule.name,
                        check.kind,
                        check.action,
                        f"products {listed}",
                        products=tuple(check.value),
                    )
                )
            elif check.kind == "wholeGPUsOnly" and check.value:
                out.append(
                    DeviceRule(rule.name, check.kind, check.action, "whole GPUs", whole=True)
                )
            elif check.kind == "minGPUMemory":
                need = -(-int(check.value) // MIB)
                out.append(
                    DeviceRule(
                        rule.name,
                        check.kind,
                        check.action,
                        f"at least {format_bytes(int(check.value))} of GPU memory",
                        min_memory_mib=need,
                    )
                )
    return tuple(out)


def shown_product(device: Device) -> str:
    """The product as a message names it: NVML's name, with the MIG profile."""
    labels = device_labels(device)
    return labels.get(PRODUCT_LABEL, f"device {device.name} (no productName)")


def product_names(devices: Sequence[Device]) -> list[str]:
    """Distinct NVML product names of ``devices``, in order."""
    names = (
        _text(next((v for d, n, v in x.attributes if n == "productName"), "")) for x in devices
    )
    return sorted({n for n in names if n})


def allowing_selector(
    good: Sequence[Device], rules: Sequence[DeviceRule], *, refused: Sequence[Device] = ()
) -> str:
    """A CEL selector that picks ``good`` devices' products (and, for a memory rule, enough
    memory; where ``refused`` holds shared devices and ``good`` none, exclusive ones: a
    whole-GPU rule, a sharing strategy of none; where ``good`` are MIG devices and
    ``refused`` holds others of their products, their profiles):
    what the user adds to a claim's request so that it gets only allowed devices. The
    caller checks that it selects no device the rules refuse."""
    names = product_names(good)
    quoted = ", ".join(f"'{n}'" for n in names)
    parts = [f"device.attributes['{NVIDIA_DRA_DRIVER}'].productName in [{quoted}]"]
    floors = [r.min_memory_mib for r in rules if r.min_memory_mib is not None]
    for r in rules:
        for req in r.requirements:
            values = [str(v) for v in req.get("values") or []]
            key = str(req.get("key"))
            memory = key == MEMORY_LABEL or (mig_label(key) or ("", ""))[1] == "memory"
            gt = memory and req.get("operator") == "Gt"
            if gt and values and values[0].isdigit():
                floors.append(int(values[0]) + 1)
    if floors:
        parts.append(
            f"device.capacity['{NVIDIA_DRA_DRIVER}'].memory.compareTo(quantity('{max(floors)}Mi'))"
            " >= 0"
        )
    if any(d.shared for d in refused) and not any(d.shared for d in good):
        # A device that allows multiple allocations (KEP-5075) is part of a GPU, and a
        # selector sees the flag: kubernetes staging/src/k8s.io/dynamic-resource-allocation/
        # cel/compile.go declares ``device.allowMultipleAllocations`` (``multiAllocVar``,
        # ``deviceTypeV134ConsumableCapacity``) and ``DeviceMatches`` sets it from the
        # device, false when unset. Only where a slice holds such a device: the API server
        # stores the field only with DRAConsumableCapacity on, the gate that also declares
        # it to CEL, so without one a claim naming it could be refused as not compiling.
        parts.append("!device.allowMultipleAllocations")
    migs = [d for d in good if is_mig(d)]
    if not migs:
        parts.append(f"device.attributes['{NVIDIA_DRA_DRIVER}'].type == 'gpu'")
        return " && ".join(parts)
    if any(set(product_names([d])) & set(names) for d in refused):
        # Refused devices of an allowed product: the MIG devices are told apart by their
        # ``profile`` (the DRA driver's, ``CommonAttributesMig``). ``type`` comes first:
        # a device without ``profile`` fails the selector with an error otherwise, and the
        # allocator fails the claim on a CEL error (``&&`` and ``||`` absorb it).
        kinds = ", ".join(f"'{p}'" for p in sorted({_profile(d) for d in migs}))
        profile = f"device.attributes['{NVIDIA_DRA_DRIVER}'].profile in [{kinds}]"
        by_product: dict[str, set[str]] = {}
        for d in migs:
            for name in product_names([d]) or [""]:
                by_product.setdefault(name, set()).add(_profile(d))
        if len({frozenset(v) for v in by_product.values()}) > 1 and "" not in by_product:
            # Products allowed in different profiles (one's 2g.20gb, another's 3g.40gb):
            # every profile on every product would select a refused pair, so each product
            # names its own.
            pairs = [
                f"(device.attributes['{NVIDIA_DRA_DRIVER}'].productName == '{name}' && "
                f"device.attributes['{NVIDIA_DRA_DRIVER}'].profile in "
                "[" + ", ".join(f"'{p}'" for p in sorted(held)) + "])"
                for name, held in sorted(by_product.items())
            ]
            profile = "(" + " || ".join(pairs) + ")"
        mig = f"device.attributes['{NVIDIA_DRA_DRIVER}'].type == 'mig' && {profile}"
        whole = f"device.attributes['{NVIDIA_DRA_DRIVER}'].type == 'gpu'"
        parts.append(mig if len(migs) == len(good) else f"({whole} || ({mig}))")
    return " && ".join(parts)


def _profile(device: Device) -> str:
    return next(
        (_text(v) for d, n, v in device.attributes if (d, n) == (NVIDIA_DRA_DRIVER, "profile")),
        "",
    )


# --- the pod's claims against the policy --------------------------------------------------


def _key(device: Device) -> tuple[str, str, str]:
    return (device.driver, device.pool, device.name)


def _claim_devices(
    pod_claim: PodClaim,
    found: Candidates,
    devices: DeviceInventory,
    specs: tuple[ClaimSpec, ...] = (),
) -> list[Device]:
    """Every device a GPU request of the claim may be allocated on the candidate nodes:
    each ``firstAvailable`` alternative counts, since the allocator may take any. A node
    where the pod's claims (``specs``) surely cannot all be allocated gives none: the
    scheduler's DynamicResources filter leaves it out, as the allocator fails there."""
    assert pod_claim.claim is not None
    seen: dict[tuple[str, str, str], Device] = {}
    profiles = [
        p
        for p in found.profiles
        if not specs or fits_somewhere(specs, Candidates((p,)), devices).fits is not False
    ]
    for request in pod_claim.claim.spec.requests:
        for sub in request.alternatives:
            if pod_claim.counted and sub.name not in pod_claim.gpu_requests:
                continue
            for profile in profiles:
                for device in eligible_devices(sub, profile.devices, devices):
                    seen.setdefault(_key(device), device)
    return list(seen.values())


def _restricted(spec: ClaimSpec, gpu_requests: frozenset[str], selector: str) -> ClaimSpec:
    requests = tuple(
        replace(
            request,
            alternatives=tuple(
                replace(sub, selectors=(*sub.selectors, selector))
                if sub.name in gpu_requests or not gpu_requests
                else sub
                for sub in request.alternatives
            ),
        )
        for request in spec.requests
    )
    return replace(spec, requests=requests)


def _selects_only(selector: str, good: Sequence[Device], bad: Sequence[Device]) -> bool:
    compiled = compile_selector(selector)
    if isinstance(compiled, SelectorError):
        return False
    try:
        return all(compiled.matches(d.view()) for d in good) and not any(
            compiled.matches(d.view()) for d in bad
        )
    except SelectorError:
        return False


def _served_index(request: str) -> int:
    """The container index in a request name the scheduler's claim gives
    (``container-<index>-<resource>``, ``dra._served_requests``)."""
    parts = request.split("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1


def served_template(
    pod_claim: PodClaim, selector: str, namespace: str
) -> tuple[dict[str, Any], list[tuple[int, str]]]:
    """The ResourceClaimTemplate to write in place of a GPU resource a class serves: one
    request per request of the claim the scheduler would make (one per container), with the
    policy's selector; and which container index holds which request."""
    assert pod_claim.claim is not None
    requests = []
    holders = []
    subs = [r.alternatives[0] for r in pod_claim.claim.spec.requests if r.alternatives]
    for number, sub in enumerate(subs):
        name = "gpu" if len(subs) == 1 else f"gpu-{number}"
        holders.append((_served_index(sub.name), name))
        requests.append(
            {
                "name": name,
                "exactly": {
                    "deviceClassName": sub.device_class,
                    "count": sub.count,
                    "selectors": [{"cel": {"expression": selector}}],
                },
            }
        )
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-policy", **({"namespace": namespace} if namespace else {})},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    return template, holders


def _remedy(pod_claim: PodClaim, selector: str, namespace: str, containers: Sequence[str]) -> str:
    if pod_claim.counted:
        # A claim object judged at its own creation has no name in a pod yet.
        named = f' (claim "{pod_claim.name}")' if pod_claim.name else ""
        return (
            "The webhook cannot change a claim the pod only names: add this selector to the "
            f"GPU requests of {pod_claim.source}{named}: "
            f'selectors: [{{cel: {{expression: "{selector}"}}}}].'
        )
    template, holders = served_template(pod_claim, selector, namespace)
    held = "; ".join(
        f'container "{containers[i] if 0 <= i < len(containers) else i}": '
        f"resources.claims: [{{name: gpu, request: {name}}}]"
        for i, name in holders
    )
    return (
        f"A DRA device class serves {pod_claim.name} with the class's own selectors only "
        "(KEP-5004), so neither a selector nor node affinity can keep it on allowed devices. "
        f"Ask for the GPUs through a claim instead: create "
        f"{json.dumps(template, separators=(',', ':'))}, give the pod resourceClaims: "
        f"[{{name: gpu, resourceClaimTemplateName: gpu-policy}}] and, in place of "
        f"{pod_claim.name} in its resources, {held}."
    )


def device_policy_findings(
    claims: PodClaims,
    rules: Sequence[DeviceRule],
    *,
    placement: Placement,
    nodes: Inventory | None,
    devices: DeviceInventory,
    namespace: str,
    where: str,
    containers: Sequence[str] = (),
) -> Iterator[Finding]:
    """A finding for each rule whose policy some device the pod's GPU claims may get
    breaks, on the nodes it can use (as they will be once healed, as capacity judges)."""
    if not rules or not devices.complete:
        return
    found = candidates(devices, nodes, placement.healed())
    if not found.profiles:
        return
    pending = [
        c for c in claims.claims if c.claim is not None and not c.claim.allocated and c.gpu_count
    ]
    specs = tuple(c.claim.spec for c in pending if c.claim is not None)
    for pod_claim in pending:
        assert pod_claim.claim is not None
        eligible = _claim_devices(pod_claim, found, devices, specs)
        labels = {_key(d): device_labels(d) for d in eligible}
        offending = [(r, [d for d in eligible if not r.allows(labels[_key(d)])]) for r in rules]
        offending = [(r, bad) for r, bad in offending if bad]
        if not offending:
            continue
        good = [d for d in eligible if all(r.allows(labels[_key(d)]) for r in rules)]
        bad_all = [d for d in eligible if d not in good]
        remedy = _policy_remedy(
            pod_claim,
            pending,
            good,
            bad_all,
            rules,
            found=found,
            devices=devices,
            namespace=namespace,
            containers=containers,
            nodes=nodes,
            placement=placement,
        )
        what = f"{pod_claim.source}" if pod_claim.counted else f"the pod's {pod_claim.source}"
        for number, (rule, bad) in enumerate(offending):
            products = ", ".join(sorted({_offered(d) for d in bad}))
            message = (
                f"{what} may be given {products}, but rule {rule.rule} allows only "
                f"{rule.describe} here (read on the devices ResourceSlices publish). "
                + (remedy if number == 0 else "See the first finding for this claim.")
            )
            summary = (
                f"{pod_claim.name or pod_claim.source} may get {products}, outside {rule.describe}"
            )
            yield Finding(rule.rule, rule.check, rule.action, message, summary, where)


def _offered(device: Device) -> str:
    """A device as a finding names it: a shared one (KEP-5075) says so, since its product
    alone may be one the rule allows."""
    shown = shown_product(device)
    return f"{shown} that allows multiple allocations" if device.shared else shown


def _policy_remedy(
    pod_claim: PodClaim,
    pending: Sequence[PodClaim],
    good: Sequence[Device],
    bad: Sequence[Device],
    rules: Sequence[DeviceRule],
    *,
    found: Candidates,
    devices: DeviceInventory,
    namespace: str,
    containers: Sequence[str],
    nodes: Inventory | None,
    placement: Placement,
) -> str:
    asked = _asked(pod_claim)
    if not good:
        if pod_claim.counted:
            return (
                "None of the devices it can get on the nodes it can use is allowed: select "
                "allowed devices in the claim, or ask an admin."
            )
        return (
            f"The pod asks {asked}: no device it can get on the DRA nodes it can use is "
            "allowed, so no claim can keep it on allowed devices there"
            + _elsewhere(pod_claim, nodes, placement)
        )
    selector = allowing_selector(good, rules, refused=bad)
    if not _selects_only(selector, good, bad):
        # The selector reads product, memory, type and allowMultipleAllocations; a rule
        # keyed on another label (a driver version, a compute capability) may refuse
        # devices alike in all four.
        allowed = ", ".join(product_names(good))
        return (
            f"No selector this webhook can write on the devices' product, memory, type and "
            f"allowMultipleAllocations tells the allowed devices ({allowed}) from the "
            "refused ones: write one on the attributes the rule keys on, or ask an admin "
            "for a DeviceClass whose selectors keep only allowed devices."
        )
    assert pod_claim.claim is not None
    specs = tuple(
        _restricted(c.claim.spec, c.gpu_requests if c.counted else frozenset(), selector)
        if c is pod_claim
        else c.claim.spec
        for c in pending
        if c.claim is not None
    )
    answer = fits_somewhere(specs, found, devices)
    if answer.fits is False:
        return (
            f"The pod asks {asked}; restricted to allowed devices "
            f"({', '.join(product_names(good))}), its requests fit on no DRA node it can "
            "use, so no claim can place it there" + _elsewhere(pod_claim, nodes, placement)
        )
    return _remedy(pod_claim, selector, namespace, containers)


def _elsewhere(pod_claim: PodClaim, nodes: Inventory | None, placement: Placement) -> str:
    """The rest of a denial that no claim can mend: the nodes whose device plugin would
    hold the resource (the pod's placement, the rule's affinity included, admits them), or
    that it cannot fit within the policy."""
    if pod_claim.counted or nodes is None:
        return ": ask for fewer devices, or ask an admin."
    healed = placement.healed()
    holders = [
        n.name
        for n in nodes.nodes
        if n.allocatable.get(pod_claim.name, 0) >= pod_claim.gpu_count
        and healed.admits(n.labels, n.name, n.taints)
    ]
    if holders:
        shown = ", ".join(holders[:3]) + (", ..." if len(holders) > 3 else "")
        return (
            f". Nodes whose device plugin holds that many ({shown}) take it: select them "
            "(a nodeSelector on their labels) to keep the pod off the DRA nodes."
        )
    return (
        ", and no node whose device plugin serves it holds that many: it cannot fit within "
        "the policy. Ask for fewer, or ask an admin for nodes or devices the rule allows."
    )


def _asked(pod_claim: PodClaim) -> str:
    """What the pod asked, as a denial names it (issue 31, item 5)."""
    if pod_claim.counted:
        return f"{pod_claim.gpu_count} GPU device(s) through {pod_claim.source}"
    return f"{pod_claim.gpu_count} {pod_claim.name}"


# --- a rule's label-keyed affinity on nodes that carry no such label ------------------------


@dataclass(frozen=True, slots=True)
class AffinityPlan:
    """What to do with a rule's required affinity on GPU labels (``keyed``), judged with
    and without it against the GPU nodes the pod can use:

    - ``apply``: as written (no DRA node is shut out, or no node carries the label and
      no DRA node is in play: the capacity checks say so);
    - ``orUnlabelled``: as written, or the labels absent, so that DRA nodes stay open and
      the rule is held on their devices (``device_policy_findings``);
    - ``skip``: no GPU node the pod can use carries the labels, and DRA nodes could take it:
      the affinity would leave it nowhere, a denial of the webhook's own making; held on
      the devices;
    - ``applyWarn``: as written, though it shuts DRA nodes out, because unlabelled nodes
      without a DRA driver would otherwise let the pod onto GPUs of unknown product, or
      because the DRA nodes hold devices the rule refuses that nothing could keep a plain
      GPU resource off, while labelled nodes meet it.
    """

    verdict: str
    keyed: tuple[Mapping[str, Any], ...] = ()
    shut_out: tuple[str, ...] = ()  # DRA nodes the affinity keeps out
    # applyWarn: "refused" (the DRA nodes hold devices the rule refuses) or "unknown"
    # (unlabelled nodes without a DRA driver would get in).
    why: str = ""


APPLY = AffinityPlan("apply")


def _meets(requirements: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    return all(requirement_matches(r, labels) for r in requirements)


def _carries(keys: set[str]) -> Callable[[Node], bool]:
    """Whether a node is described by the labels ``keys`` (has them, or, for labels GFD
    writes only where MIG devices of the kind exist, is labelled by GFD at all: there the
    label's absence says the node has none, and the affinity judges it rightly)."""
    plain = {k for k in keys if not _mig_only(k)}
    if plain == keys:
        return lambda node: keys <= node.labels.keys()

    def carries(node: Node) -> bool:
        labels = node.labels
        gfd = PRODUCT_LABEL in labels or MIG_STRATEGY_LABEL in labels
        return plain <= labels.keys() and (gfd or keys <= labels.keys())

    return carries


def _mig_only(key: str) -> bool:
    """A label GFD sets only for MIG devices: per profile (mig.strategy mixed), or the
    attributes under ``nvidia.com/gpu`` (single)."""
    return key in GPU_MIG_LABELS or mig_label(key) is not None


def affinity_plan(
    required: Sequence[Mapping[str, Any]],
    *,
    placement: Placement,
    nodes: Inventory,
    dra_node: Callable[[Node], bool],
    plugin_node: Callable[[Node], bool],
    refused_on: Callable[[Node, Sequence[Mapping[str, Any]]], bool] | None = None,
    holds: Callable[[Node], bool] | None = None,
) -> AffinityPlan:
    """``dra_node``: the pod's GPUs would come from ResourceSlices there; ``plugin_node``:
    from the node's allocatable; ``refused_on``: the scheduler could give the pod a device
    there that the requirements refuse, and nothing can steer it off (a resource a class
    serves); ``holds``: the node has as many GPUs as the pod asks (``holds_gpus``).
    Cordons and conditions are ignored, as denials do."""
    keyed = tuple(r for r in required if is_device_label(str(r.get("key"))))
    if not keyed:
        return APPLY
    before: list[tuple[Node, bool]] = []
    # Nodes of one shape differ only in identity labels: one answers for all unless the
    # placement names nodes.
    names = placement.names_nodes(nodes.identity_labels)
    for shape in nodes.shapes:
        example = shape.example
        if not names and not placement.admits(example.labels, example.name, shape.taints):
            continue
        for node in shape.members[:1] if shape.pool else shape.members:
            if names and not placement.admits(node.labels, node.name, shape.taints):
                continue
            dra = not shape.pool and dra_node(node)
            if dra or plugin_node(node):
                before.append((node, dra))
    keys = {str(r.get("key")) for r in keyed}
    carries = _carries(keys)
    # Shut out for want of the labels: a DRA node labelled otherwise (GFD still running)
    # is judged by its labels, as every node is.
    shut_out = tuple(n.name for n, dra in before if dra and not carries(n))
    if not shut_out:
        return APPLY
    labelled = [n for n, _ in before if carries(n)]
    if not labelled and not nodes.unbounded_for(placement):
        return AffinityPlan("skip", keyed, shut_out)
    unknown = [n for n, dra in before if not dra and not carries(n)]
    # Labelled nodes meet the rule: where the DRA nodes could give the pod a refused device
    # and nothing can steer it there, keeping them out places the pod within the policy.
    # Not where none of them holds the pod: the affinity would leave it nowhere, and the
    # DRA nodes stay open so that the rule, held on their devices, denies it with the
    # claim that lands it on allowed ones (``device_policy_findings``).
    refused = (
        refused_on is not None
        and any(_meets(keyed, n.labels) and (holds is None or holds(n)) for n in labelled)
        and any(refused_on(n, keyed) for n, dra in before if dra and n.name in shut_out)
    )
    if unknown:
        return AffinityPlan("applyWarn", keyed, shut_out, "unknown")
    if refused:
        return AffinityPlan("applyWarn", keyed, shut_out, "refused")
    return AffinityPlan("orUnlabelled", keyed, shut_out)


_MEMO_SIZE = 4096


def remembered_plan(
    devices: DeviceInventory,
    nodes: Inventory,
    key: tuple[Any, ...],
    owner: object,
    plan: Callable[[], AffinityPlan],
) -> AffinityPlan:
    """``plan()`` once per snapshot (its memo), node inventory, ``owner`` (the rule) and
    ``key`` (the pod's placement and what serves its GPUs): the plan reads every GPU node,
    and the pods of one workload ask it alike."""
    memo = devices._memo
    full = ("affinity-plan", *key)
    known = memo.get(full)
    if known is not None and known[0] is nodes and known[1] is owner:
        return known[2]  # type: ignore[no-any-return]
    answer = plan()
    if len(memo) >= _MEMO_SIZE:
        memo.clear()
    memo[full] = (nodes, owner, answer)
    return answer


def affinity_finding(rule: str, plan: AffinityPlan, where: str) -> Finding | None:
    """The warning that names the rule whose affinity was not applied as written."""
    if plan.verdict == "apply":
        return None
    text = ", ".join(map(_requirement_text, plan.keyed))
    labels = ", ".join(sorted({str(r.get("key")) for r in plan.keyed}))
    nodes = ", ".join(plan.shut_out[:3]) + (", ..." if len(plan.shut_out) > 3 else "")
    if plan.verdict == "skip":
        message = (
            f"required node affinity {text} not added: no GPU node the pod can use carries "
            f"{labels} (DRA nodes such as {nodes} describe their GPUs in ResourceSlices, not "
            "in GPU feature discovery's labels), so it would leave the pod nowhere. The rule "
            "is held on the devices instead: every device the pod's claims may get must meet it."
        )
        summary = f"affinity on {labels} not added: no GPU node carries it"
    elif plan.verdict == "orUnlabelled":
        message = (
            f"required node affinity {text} added with an alternative for nodes without "
            f"{labels}: the DRA nodes ({nodes}) describe their GPUs in ResourceSlices, where "
            "the rule is held on the devices."
        )
        summary = f"affinity on {labels}, or nodes without it whose devices meet it"
    else:
        because = (
            "they hold devices the rule refuses, which nothing can keep a plain GPU resource "
            "off, and labelled nodes meet it"
            if plan.why == "refused"
            else "other GPU nodes without the labels have no DRA driver whose devices could "
            "be read, and would get in too"
        )
        message = (
            f"required node affinity {text} keeps the DRA nodes {nodes} out: they carry no "
            f"{labels}, and {because}. Ask for the GPUs through a ResourceClaim with a "
            "selector on the devices to use them."
        )
        summary = f"affinity on {labels} keeps DRA nodes out"
    return Finding(rule, "nodeAffinity", "warn", message, summary, where)


def refuses_devices(
    devices: DeviceInventory,
    classes: Sequence[str],
    rules: Sequence[DeviceRule] = (),
    *,
    lands: Callable[[Node], bool] | None = None,
) -> Callable[[Node, Sequence[Mapping[str, Any]]], bool]:
    """Whether a node holds an allocatable device of ``classes`` (the classes that serve
    the pod's plain GPU resources) whose GPU-feature-discovery labels fail the requirements
    or the rule's other device constraints (``rules``: its checks read on devices).

    Only where the pod could land and fit, the policy aside (``lands``): kube-scheduler
    filters out a node that cannot hold the pod (NodeResourcesFit, and DynamicResources'
    claim for the served resources), so no device of it is ever given to the pod, refused
    or not."""

    def refused(node: Node, requirements: Sequence[Mapping[str, Any]]) -> bool:
        if lands is not None and not lands(node):
            return False
        held = devices.profile(node).devices
        for device_class in classes:
            for device in eligible_devices(SubRequest("policy", device_class), held, devices):
                labels = device_labels(device)
                if not _meets(requirements, labels) or not all(r.allows(labels) for r in rules):
                    return True
        return False

    return refused


def holds_gpus(
    devices: DeviceInventory,
    classes: Sequence[str],
    vector: Sequence[tuple[str, int]],
    *,
    dra_node: Callable[[Node], bool],
    rules: Sequence[DeviceRule] = (),
) -> Callable[[Node], bool]:
    """Whether a node has as many GPUs as the pod asks (``vector``: its GPU resources and
    counts) within the policy: in its allocatable (NodeResourcesFit; its labels meet the
    rule), or, on a node whose GPUs come from ResourceSlices, as devices of ``classes``
    (the classes serving the resources) that ``rules`` allow. Nodes of a pool hold it
    (their count may grow)."""

    def holds(node: Node) -> bool:
        if node.pool or not vector:
            return True
        if all(node.allocatable.get(name, 0) >= count for name, count in vector):
            return True
        if not dra_node(node) or not classes:
            return False
        held = devices.profile(node).devices
        found = {
            _key(d)
            for device_class in classes
            for d in eligible_devices(SubRequest("policy", device_class), held, devices)
            if all(r.allows(device_labels(d)) for r in rules)
        }
        return len(found) >= sum(count for _, count in vector)

    return holds


def asked_gpus(vector: Sequence[tuple[str, int]], claims: PodClaims) -> tuple[tuple[str, int], ...]:
    """The pod's GPU resources and counts, those a device class serves included (they
    are taken out of its request vector, ``dra.extended_resource_claims``)."""
    served = tuple((c.name, c.gpu_count) for c in claims.claims if not c.counted)
    return (*vector, *served) if served else tuple(vector)


# --- what one unit of a claim is: a shared GPU, a MIG device ---------------------------------


@dataclass(frozen=True, slots=True)
class ClaimUnits:
    """What the GPU requests of one of a pod's claims may be given on the nodes it can use,
    for the checks the device plugin's resources answer by name (``maxSharedGPUs``,
    ``multipleMIGDevices``). Per request, the most of its ``firstAvailable`` alternatives
    (the allocator takes one): how many devices that may be shared, and how many that may
    be MIG devices."""

    claim: PodClaim
    shared: tuple[tuple[str, int], ...] = ()  # (request, devices that may be shared)
    mig: tuple[tuple[str, int], ...] = ()  # (request, devices that may be MIG devices)
    # A selector could not be evaluated, or a node pool's devices are unknown: what the
    # allocator picks is not known in full, so a check on these counts only warns.
    unknown: bool = False


def served_index(request: str) -> int:
    """The container index of a request the scheduler's claim for a served resource
    holds (``_served_index``)."""
    return _served_index(request)


def is_mig(device: Device) -> bool:
    """A MIG device of NVIDIA's DRA driver: ``type`` ``mig``, static or DynamicMIG
    (NVIDIA/k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/deviceinfo.go``,
    ``MigDeviceInfo.GetDevice``: ``type: mig`` with its ``profile``)."""
    for domain, name, value in device.attributes:
        if domain == NVIDIA_DRA_DRIVER and name == "type":
            return _text(value) == "mig"
    return False


def _sub_units(
    sub: SubRequest, found: Candidates, devices: DeviceInventory
) -> tuple[int, int, bool]:
    """(devices that may be shared, that may be MIG devices, selector not evaluated)."""
    shared = mig = 0
    unknown = False
    for profile in found.profiles:
        got, blind = eligible_or_unknown(sub, profile.devices, devices)
        unknown = unknown or blind
        count = len(got) if sub.all_devices else sub.count
        if any(d.shared for d in got):
            shared = max(shared, count)
        if any(is_mig(d) for d in got):
            mig = max(mig, count)
    return shared, mig, unknown


def claim_units(
    claims: PodClaims, *, placement: Placement, nodes: Inventory | None, devices: DeviceInventory
) -> list[ClaimUnits]:
    """Per pending GPU claim of the pod, what its requests may be given (``ClaimUnits``).
    A device with ``allowMultipleAllocations`` (KEP-5075; kubernetes
    ``pkg/apis/resource/types.go``, ``Device.AllowMultipleAllocations``: "multiple
    allocations can be made from this device", each taking what its capacity's
    ``RequestPolicy`` allows) may be given to other claims beside this one: each unit on it
    is a share of one GPU, as a time-sliced replica is.

    Every pod with a claim asks this (``multipleMIGDevices`` is built in), and the pods of
    one workload ask it alike: once per snapshot, node inventory, placement and claim specs,
    in the snapshot's memo as ``candidates`` is."""
    pending = [
        c for c in claims.claims if c.claim is not None and not c.claim.allocated and c.gpu_count
    ]
    if not pending or not devices.complete:
        return []
    key = (
        "claim-units",
        id(nodes),
        placement.key(),
        tuple((c.counted, c.gpu_requests, c.claim.spec) for c in pending if c.claim),
    )
    memo = devices._memo
    known = memo.get(key)
    if known is not None and known[0] is nodes:
        counts = known[1]
    else:
        counts = _claim_unit_counts(pending, placement=placement, nodes=nodes, devices=devices)
        # Found with selectors left unevaluated (the budget ran out): this review's only.
        if not review_spent():
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = (nodes, counts)
    return [
        ClaimUnits(pod_claim, shared, mig, unknown)
        for pod_claim, (shared, mig, unknown) in zip(pending, counts, strict=True)
        if shared or mig or unknown
    ]


_UnitCounts = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...], bool]


def _claim_unit_counts(
    pending: Sequence[PodClaim],
    *,
    placement: Placement,
    nodes: Inventory | None,
    devices: DeviceInventory,
) -> tuple[_UnitCounts, ...]:
    """Per claim of ``pending``: (request, devices that may be shared), (request, devices
    that may be MIG devices), and whether what the allocator picks is not known in full."""
    found = candidates(devices, nodes, placement.healed())
    out: list[_UnitCounts] = []
    for pod_claim in pending:
        assert pod_claim.claim is not None
        shared: list[tuple[str, int]] = []
        mig: list[tuple[str, int]] = []
        unknown = found.pool
        for request in pod_claim.claim.spec.requests:
            most_shared = most_mig = 0
            for sub in request.alternatives:
                if pod_claim.counted and sub.name not in pod_claim.gpu_requests:
                    continue
                s, m, blind = _sub_units(sub, found, devices)
                most_shared, most_mig = max(most_shared, s), max(most_mig, m)
                unknown = unknown or blind
            if most_shared:
                shared.append((request.name, most_shared))
            if most_mig:
                mig.append((request.name, most_mig))
        out.append((tuple(shared), tuple(mig), unknown))
    return tuple(out)
