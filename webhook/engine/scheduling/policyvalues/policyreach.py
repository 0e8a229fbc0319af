"""Policy values checked against the cluster (issue 42): the one function that says which
values of a rule match nothing the nodes, node pools, ResourceSlices and API objects offer.

A one-character typo in a policy (``NVIDIA-A10O-SXM4-80GB``, ``NVIDIA-A100`` without its
glob, a memory floor no GPU has) is valid to the schema, so ``rules lint`` passed it and
every GPU pod of the namespace was denied from the next reload on. Every entry point of a
policy (``rules lint --inventory``, ``serve`` on start and every reload, ``/validate`` of a
policy object, the object's status) and the denial such a rule causes call ``unmet_values``
here (through ``evaluation.evaluate.policy_findings``, which adds the node pools as every
admission sees them), so that they all say the same thing.

Three answers per value, never a guess:

- it matches something a node has: nothing to say;
- no node has it, but a node pool may bring it (a declared ``GPUNodePool``, a Karpenter
  NodePool or GKE class sized through the catalogue, or a pool of unknown size): said as
  such, not as a typo;
- nothing has it: a finding with the nearest value the cluster has (did-you-mean). A rule
  that can then admit no GPU pod it matches (every allowed product, its required node
  affinity, its GPU memory floor or its RuntimeClass matches nothing) is ``blocking``: its
  denials say the rule cannot be met on this cluster (``evaluation.evaluate``).

Values the webhook cannot compare (namespaces without a live cluster, RuntimeClasses and
DeviceClasses it was not shown) are left out and said so by ``not_checked``. Label keys
that no GPU node carries are ``labelkeys``' findings, not repeated here.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.policy.ruleset import (
    DEFAULT_GPU_DEVICE_CLASSES,
    DocumentRef,
    Policy,
    PolicyProblem,
    Rule,
)
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.gpufacts import MEMORY_LABEL, MIG_PREFIX, PRODUCT_LABEL
from webhook.engine.resources.inventory import Inventory, Shape
from webhook.engine.scheduling.devicepolicy import NVIDIA_DRA_DRIVER, device_labels
from webhook.engine.scheduling.dra import gpu_devices, gpu_names

NOWHERE = "matches no node, pool or device"
MiB = 2**20
_GLOB = "*?["


@dataclass(frozen=True, slots=True)
class Unmet:
    """One value of one rule that nothing in the cluster has (or only a pool may bring)."""

    rule: str
    document: DocumentRef | None
    check: str  # the finding's check name: allowedProducts, nodeAffinity, minGPUMemory, ...
    path: str  # where in the document: spec.validate[0].allowedProducts[0]
    value: str  # as written (memory as written, a label value, a glob)
    what: str  # "GPU product", "node label nvidia.com/gpu.product", "namespace", ...
    nearest: str = ""  # did you mean
    pool: str = ""  # no node has it yet; this pool may bring it
    blocking: bool = False  # the rule can then admit no GPU pod it matches
    nowhere: str = NOWHERE  # what it was looked for in: API objects are not on nodes
    action: str = "deny"  # a check's action: what a pod the rule cannot be met for gets

    @property
    def source(self) -> str:
        """The rule's file, or the object it is: what an admin opens to fix it."""
        ref = self.document
        if ref is None:
            return "rule files"
        if ref.index < 0:
            return f"{ref.kind} object {ref.name}"
        return ref.source

    @property
    def headline(self) -> str:
        """What the value matches, with the fix: shared by every entry point."""
        if self.pool:
            return (
                f"{self.what} {self.value} ({self.path}): no node has it yet; pool "
                f"{self.pool} may bring it"
            )
        guess = f"; did you mean {self.nearest}?" if self.nearest else ""
        return f"{self.what} {self.value} ({self.path}) {self.nowhere}{guess}"

    @property
    def core(self) -> str:
        """The sentence every entry point says, without the rule's name: ``/validate``'s
        warning (kubectl names the object; the API server keeps 256 characters of one)."""
        if self.blocking:
            gets = {"deny": "is denied", "warn": "is warned", "audit": "is audited"}
            return (
                f"{self.headline} The rule cannot be met on this cluster: every GPU pod it "
                f"matches {gets.get(self.action, 'is denied')}."
            )
        return self.headline

    @property
    def message(self) -> str:
        """The line lint, serve's log and the object's status print: the core, by rule."""
        return f"rule {self.rule} ({self.source}): {self.core}"

    @property
    def denial(self) -> str:
        """The denial of a pod this rule alone keeps out: the rule is at fault, not the pod."""
        guess = f"; did you mean {self.nearest}?" if self.nearest else "."
        return (
            f"rule {self.rule} ({self.source}) cannot be met on this cluster: {self.what} "
            f"{self.value} {self.nowhere}{guess} Ask the cluster admin to fix the rule "
            f"({self.path})."
        )

    @property
    def problem(self) -> PolicyProblem:
        """For lint's list: the message names the file (or object) and path itself."""
        return PolicyProblem(None, "", self.message)


@dataclass(frozen=True, slots=True)
class ClusterValues:
    """What the cluster offers, each value with where it is: "" on a node today, else the
    name of the pool that may bring it."""

    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    products: Mapping[str, str] = field(default_factory=dict)
    memory_mib: Mapping[int, str] = field(default_factory=dict)
    counts: Mapping[int, str] = field(default_factory=dict)
    resources: Mapping[str, str] = field(default_factory=dict)
    classes: frozenset[str] | None = None
    runtime_classes: frozenset[str] | None = None
    namespaces: frozenset[str] | None = None
    # Pools of unknown size: they may bring any value, so nothing is blocking while one exists.
    unbounded: tuple[str, ...] = ()
    # GPU nodes and pools that do not say a fact ("product", "label:<key>"): ""
    # when a node does not (the fact cannot be judged: no finding), else the first pool
    # (it may bring any value, as a pool of unknown size does).
    gaps: Mapping[str, str] = field(default_factory=dict)

    def gap(self, fact: str) -> str | None:
        """None: every GPU node and pool says ``fact``; "": a node does not (do not judge);
        a pool's name: that pool may bring any value of it."""
        found = self.gaps.get(fact)
        if found is None and self.unbounded:
            return _unknown_pool(self)
        return found


def _put(into: dict[Any, str], value: Any, where: str) -> None:
    """A node beats a pool; the first pool that may bring a value is the one named."""
    if where == "" or value not in into:
        into[value] = where


def cluster_values(
    policy: Policy,
    nodes: Inventory | None,
    devices: DeviceInventory | None,
    *,
    runtime_classes: Collection[str] | None = None,
    namespaces: Collection[str] | None = None,
) -> ClusterValues | None:
    """The values of the GPU nodes and pools of ``nodes`` (the snapshot with its pools) and
    of the GPU devices of ``devices``; None when there is no GPU node or pool to compare
    with (nothing can then be called a typo)."""
    if nodes is None:
        return None
    resources, is_gpu_class = gpu_names(
        policy.settings.gpu_resources,
        is_gpu_class=policy.settings.gpu_device_classes,
        devices=devices,
    )
    holds = gpu_devices(devices, is_gpu_class).holds if devices is not None else None
    labels: dict[str, dict[str, str]] = {}
    products: dict[str, str] = {}
    memory: dict[int, str] = {}
    counts: dict[int, str] = {}
    offered: dict[str, str] = {}
    gaps: dict[str, str] = {}
    pools: list[Shape] = []
    gpu = 0
    for shape in nodes.shapes:
        gpus = {r: a for r, a in shape.allocatable.items() if a > 0 and resources.is_gpu(r)}
        held = holds is not None and any(holds(n) for n in shape.members)
        if not gpus and not held:
            continue
        gpu += 1
        where = shape.pool
        if where:
            pools.append(shape)
        # A shape's labels, not its members': identity labels (hostname) are left out, so
        # that a snapshot costs its shapes, and a rule on them is not judged here.
        for key, value in shape.labels.items():
            _put(labels.setdefault(key, {}), value, where)
        known = _shape_gpus(shape, gpus, products=products, memory=memory, counts=counts)
        # A GPU that says no product (its devices do: ``_device_values``). Memory has no
        # gap: minGPUMemory counts a GPU whose memory is not labelled as too small.
        if "product" not in known and not held:
            _put(gaps, "product", where)
        for resource in shape.allocatable:
            if shape.allocatable[resource] > 0:
                _put(offered, resource, where)
    if devices is not None:
        seen = _device_values(devices)
        for key, found in seen.items():
            for value in found:
                _put(labels.setdefault(key, {}), value, "")
        for value in seen.get(PRODUCT_LABEL, ()):
            _put(products, value, "")
        for value in seen.get(MEMORY_LABEL, ()):
            if value.isdigit():
                _put(memory, int(value), "")
        for cls in devices.classes.values():
            if cls.extended_resource:
                _put(offered, cls.extended_resource, "")
    if not gpu and not products:
        return None
    for key in labels:  # a pool whose template lacks a GPU node's label may bring any value
        lacking = next((p.pool for p in pools if key not in p.labels), "")
        if lacking:
            gaps[f"label:{key}"] = lacking
    return ClusterValues(
        labels=labels,
        products=products,
        memory_mib=memory,
        counts=counts,
        resources=offered,
        classes=frozenset(devices.classes) if devices is not None and devices.complete else None,
        runtime_classes=frozenset(runtime_classes) if runtime_classes is not None else None,
        namespaces=frozenset(namespaces) if namespaces is not None else None,
        unbounded=tuple(p.name for p in nodes.unbounded),
        gaps=gaps,
    )


def _shape_gpus(
    shape: Shape,
    gpus: Mapping[str, int],
    *,
    products: dict[str, str],
    memory: dict[int, str],
    counts: dict[int, str],
) -> set[str]:
    """The products a pod really gets there (``-MIG-<profile>``, ``-SHARED`` included, as
    ``allowedProducts`` judges them), the memory of one unit, the units of each resource;
    which of "product" and "memory" the shape says at all."""
    where = shape.pool
    known = set()
    base = shape.labels.get(PRODUCT_LABEL)
    if base:
        _put(products, base, where)
        known.add("product")
    label = shape.labels.get(MEMORY_LABEL, "")
    if label.isdigit():
        _put(memory, int(label), where)
        known.add("memory")
    for resource, units in gpus.items():
        _put(counts, units, where)
        device = shape.gpu.device(resource, units)
        if device.product:
            _put(products, device.product, where)
            known.add("product")
        if device.memory_mib:
            _put(memory, device.memory_mib, where)
            known.add("memory")
    return known


def _device_values(devices: DeviceInventory) -> Mapping[str, frozenset[str]]:
    """The values of the devices ResourceSlices publish, read as the GFD labels of a node
    holding each alone (``devicepolicy.device_labels``: product with dashes and
    ``-MIG-<profile>``, memory in MiB), as the engine holds rules on them. Kept in the
    snapshot's memo, which snapshots that differ only in claims share: a claim created does
    not read every device again."""
    key = ("policyreach-device-values",)
    known = devices._memo.get(key)
    if known is not None:
        return known  # type: ignore[no-any-return]
    found: dict[str, set[str]] = {}
    seen = 0
    for s in devices.slices:
        if s.driver != NVIDIA_DRA_DRIVER:
            continue
        for device in (*s.devices, *(d for d, *_ in s.per_device)):
            seen += 1
            if seen > 10_000:  # bounded: alike devices repeat; the first ones show the names
                break
            for label, value in device_labels(device).items():
                found.setdefault(label, set()).add(value)
    frozen = {label: frozenset(values) for label, values in found.items()}
    devices._memo[key] = frozen
    return frozen


def unmet_values(policy: Policy, values: ClusterValues | None) -> list[Unmet]:
    """Every value of every rule of ``policy`` that no node has (``Unmet``), in rule order;
    empty when there is nothing to compare with."""
    if values is None:
        return []
    found: list[Unmet] = []
    for rule in policy.rules:
        found.extend(_rule_unmet(rule, values))
    return found


def blocking_unmet(policy: Policy, values: ClusterValues | None) -> dict[tuple[str, str], Unmet]:
    """(rule, check) -> the first value that makes the rule unmeetable: what its denial
    names."""
    found: dict[tuple[str, str], Unmet] = {}
    for unmet in unmet_values(policy, values):
        if unmet.blocking:
            found.setdefault((unmet.rule, unmet.check), unmet)
    return found


def not_checked(policy: Policy, values: ClusterValues | None) -> list[str]:
    """What the policy names that could not be compared here, as one notice line: said,
    never guessed at."""
    if values is None:
        return []
    specs = [rule.spec for rule in policy.rules]
    missing = []
    if values.namespaces is None and any((s.get("match") or {}).get("namespaces") for s in specs):
        missing.append("namespaces (known only from a live cluster: --kubeconfig)")
    if values.runtime_classes is None and any(
        (s.get("mutate") or {}).get("runtimeClassName") for s in specs
    ):
        missing.append("RuntimeClasses (known only from a live cluster)")
    if values.classes is None and any((s.get("match") or {}).get("deviceClasses") for s in specs):
        missing.append("DeviceClasses (a live cluster, or DRA objects in the inventory)")
    if not missing:
        return []
    return [f"rule values not checked against the cluster: {', '.join(missing)}"]


# --- the values of one rule --------------------------------------------------------------


def _rule_unmet(rule: Rule, values: ClusterValues) -> Iterator[Unmet]:
    spec = rule.spec
    yield from _checks(rule, spec.get("validate") or [], values)
    mutate = spec.get("mutate") or {}
    affinity = mutate.get("nodeAffinity") or {}
    yield from _required(rule, affinity, values)
    yield from _preferred(rule, affinity.get("preferred") or [], values)
    avoid = mutate.get("avoidGPUNodes") or {}
    carried = values.labels.get(str(avoid.get("nodeLabel", "")))
    if avoid.get("value") is not None and carried and str(avoid["value"]) not in carried:
        # Pods that ask for no GPU are kept off nodes with this value: one no GPU node has
        # keeps them off none (no denial, the rule only does nothing).
        yield _unmet(
            rule,
            check="avoidGPUNodes",
            path="spec.mutate.avoidGPUNodes.value",
            value=str(avoid["value"]),
            what=f"node label {avoid['nodeLabel']}",
            among=carried,
        )
    runtime = mutate.get("runtimeClassName")
    known = values.runtime_classes
    if isinstance(runtime, str) and known is not None and runtime not in known:
        yield _unmet(
            rule,
            check="runtimeClassName",
            path="spec.mutate.runtimeClassName",
            value=runtime,
            what="RuntimeClass",
            among=dict.fromkeys(known, ""),
            blocking=True,
            nowhere="matches no RuntimeClass of the cluster",
        )
    match = spec.get("match") or {}
    yield from _listed(
        rule, match.get("namespaces"), "spec.match.namespaces", "namespace", values.namespaces
    )
    classes = values.classes
    if classes is not None:  # NVIDIA's own class names are never typos, MIG or not here
        classes = classes | frozenset(DEFAULT_GPU_DEVICE_CLASSES)
    yield from _listed(
        rule, match.get("deviceClasses"), "spec.match.deviceClasses", "DeviceClass", classes
    )
    yield from _profiles(rule, match.get("resources") or [], values)


def _profiles(rule: Rule, patterns: list[Any], values: ClusterValues) -> Iterator[Unmet]:
    """MIG resources a rule names exactly (``nvidia.com/mig-1g.10gb``) on a cluster that
    offers MIG devices: a profile no node offers is a typo or another GPU's profile. Globs
    and other resources are left alone: the shipped rules name resources of every setup
    (``nvidia.com/gpu.shared``), and a rule that matches no pod denies none."""
    offered = {r: w for r, w in values.resources.items() if r.startswith(MIG_PREFIX)}
    if not offered or values.unbounded:
        return
    for index, name in enumerate(map(str, patterns)):
        if not name.startswith(MIG_PREFIX) or any(c in name for c in _GLOB):
            continue
        if name not in offered:
            yield _unmet(
                rule,
                check="match",
                path=f"spec.match.resources[{index}]",
                value=name,
                what="MIG resource",
                among=offered,
            )


def _checks(rule: Rule, entries: list[Any], values: ClusterValues) -> Iterator[Unmet]:
    for index, entry in enumerate(entries):
        action = str(entry.get("action", "deny"))
        for unmet in _check(rule, index, entry, values):
            yield unmet if action == "deny" else Unmet(**{**_fields(unmet), "action": action})


def _check(
    rule: Rule, index: int, entry: Mapping[str, Any], values: ClusterValues
) -> Iterator[Unmet]:
    """The values of one ``validate`` entry: products, memory floor, counts."""
    path = f"spec.validate[{index}]"
    gap = values.gap("product")
    if "allowedProducts" in entry and gap != "":  # "": a GPU node says no product
        patterns = [str(p) for p in entry["allowedProducts"]]
        yield from _patterns(
            rule,
            patterns,
            path=f"{path}.allowedProducts",
            what="GPU product",
            among=values.products,
            check="allowedProducts",
            gap=gap,
        )
    if "minGPUMemory" in entry and values.memory_mib:
        yield from _memory(
            rule,
            entry["minGPUMemory"],
            path=f"{path}.minGPUMemory",
            check="minGPUMemory",
            values=values,
            blocks=True,
        )
    if "allowedGPUCounts" in entry and values.counts:
        most = max(values.counts)
        listed = [int(n) for n in entry["allowedGPUCounts"]]
        for at, count in enumerate(listed):
            if count > most and not values.unbounded:
                yield Unmet(
                    rule.name,
                    rule.document,
                    "allowedGPUCounts",
                    f"{path}.allowedGPUCounts[{at}]",
                    str(count),
                    "GPU count",
                    nearest=str(most),
                    blocking=all(n > most for n in listed),
                )


def _required(rule: Rule, affinity: Mapping[str, Any], values: ClusterValues) -> Iterator[Unmet]:
    for index, requirement in enumerate(affinity.get("required") or []):
        yield from _requirement(
            rule, requirement, path=f"spec.mutate.nodeAffinity.required[{index}]", values=values
        )
    memory = (affinity.get("gpuMemory") or {}).get("min")
    if memory is not None and values.memory_mib:
        yield from _memory(
            rule,
            memory,
            path="spec.mutate.nodeAffinity.gpuMemory.min",
            check="nodeAffinity",
            values=values,
            blocks=True,
        )


def _preferred(rule: Rule, preferred: list[Any], values: ClusterValues) -> Iterator[Unmet]:
    for index, preference in enumerate(preferred):
        for at, expression in enumerate(preference.get("matchExpressions") or []):
            path = f"spec.mutate.nodeAffinity.preferred[{index}].matchExpressions[{at}]"
            for unmet in _requirement(rule, expression, path=path, values=values):
                # A preference that matches nothing is never met, but never denies either.
                yield Unmet(**{**_fields(unmet), "blocking": False})


def _fields(unmet: Unmet) -> dict[str, Any]:
    return {name: getattr(unmet, name) for name in Unmet.__dataclass_fields__}


def _requirement(
    rule: Rule, requirement: Mapping[str, Any], *, path: str, values: ClusterValues
) -> Iterator[Unmet]:
    key = str(requirement.get("key", ""))
    operator = requirement.get("operator")
    carried = values.labels.get(key)
    if not carried:
        return  # a key no GPU node carries: labelkeys' warning
    gap = values.gap(f"label:{key}")
    written = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        unmet = [
            _unmet(
                rule,
                check="nodeAffinity",
                path=f"{path}.values[{at}]",
                value=value,
                what=f"node label {key}",
                among=carried,
                gap=gap,
            )
            for at, value in enumerate(written)
            if carried.get(value) != ""
        ]
        # Blocking when no value is on a node today or in a pool, and no pool may bring one.
        blocks = gap is None and not any(v in carried for v in written)
        for item in unmet:
            yield Unmet(**{**_fields(item), "blocking": blocks and not item.pool})
    elif operator in ("Gt", "Lt") and written:
        numbers = {int(v): where for v, where in carried.items() if v.lstrip("-").isdigit()}
        bound = written[0]
        if not numbers or not bound.lstrip("-").isdigit():
            return
        fits = {
            n: w
            for n, w in numbers.items()
            if (n > int(bound) if operator == "Gt" else n < int(bound))
        }
        if any(w == "" for w in fits.values()):
            return
        pool = next(iter(fits.values()), "") or gap or ""
        best = max(numbers) if operator == "Gt" else min(numbers)
        yield Unmet(
            rule.name,
            rule.document,
            "nodeAffinity",
            f"{path}.values[0]",
            f"{operator} {bound}",
            f"node label {key}",
            nearest=""
            if pool
            else f"{key} {best} (the {'largest' if operator == 'Gt' else 'smallest'})",
            pool=pool,
            blocking=not pool,
        )


def _memory(
    rule: Rule, raw: object, *, path: str, check: str, values: ClusterValues, blocks: bool
) -> Iterator[Unmet]:
    gap = values.gap("memory")  # only a pool of unknown size: as minGPUMemory judges
    try:
        wanted = parse_quantity(raw)
    except QuantityError:
        return  # the schema's problem, reported by lint
    fits = {m: w for m, w in values.memory_mib.items() if m * MiB >= wanted}
    if any(w == "" for w in fits.values()):
        return
    pool = next(iter(fits.values()), "") or gap or ""
    most = max(values.memory_mib)
    yield Unmet(
        rule.name,
        rule.document,
        check,
        path,
        str(raw),
        "GPU memory",
        nearest="" if pool else f"{_mib_text(most)} (the most any GPU has)",
        pool=pool,
        blocking=blocks and not pool,
    )


def _mib_text(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _patterns(
    rule: Rule,
    patterns: list[str],
    *,
    path: str,
    what: str,
    among: Mapping[str, str],
    check: str,
    gap: str | None,
) -> Iterator[Unmet]:
    """Names and globs; blocking when none matches a node's or a pool's value and no pool
    may bring any."""
    found = []
    today = False
    for at, pattern in enumerate(patterns):
        where = _where(pattern, among)
        if where == "":
            today = True
            continue
        found.append(
            _unmet(
                rule,
                check=check,
                path=f"{path}[{at}]",
                value=pattern,
                what=what,
                among=among,
                gap=gap,
            )
        )
    reachable = today or any(u.pool for u in found) or gap is not None
    for unmet in found:
        yield Unmet(**{**_fields(unmet), "blocking": not reachable})


def _listed(
    rule: Rule, names: object, path: str, what: str, known: frozenset[str] | None
) -> Iterator[Unmet]:
    if known is None or not isinstance(names, list):
        return
    among = dict.fromkeys(known, "")
    for at, name in enumerate(names):
        if _where(str(name), among) is None:
            yield _unmet(
                rule,
                check="match",
                path=f"{path}[{at}]",
                value=str(name),
                what=what,
                among=among,
                nowhere=f"matches no {what} of the cluster",
            )


def _where(pattern: str, among: Mapping[str, str]) -> str | None:
    """ "" when a node has a value the pattern matches, a pool's name when only a pool
    may bring one, None when nothing matches."""
    if not any(c in pattern for c in _GLOB):
        return among.get(pattern)
    pools = ""
    for value, where in among.items():
        if fnmatch.fnmatchcase(value, pattern):
            if where == "":
                return ""
            pools = pools or where
    return pools or None


def _unmet(
    rule: Rule,
    *,
    check: str,
    path: str,
    value: str,
    what: str,
    among: Mapping[str, str],
    gap: str | None = None,
    blocking: bool = False,
    nowhere: str = NOWHERE,
) -> Unmet:
    pool = _where(value, among) or gap or ""
    return Unmet(
        rule.name,
        rule.document,
        check,
        path,
        value,
        what,
        nearest="" if pool else did_you_mean(value, among),
        pool=pool,
        blocking=blocking and not pool,
        nowhere=nowhere,
    )


def _unknown_pool(values: ClusterValues) -> str:
    """A pool of unknown size and labels: it may bring any value (not a typo, unsaid)."""
    return f"{values.unbounded[0]} (size and labels unknown)" if values.unbounded else ""


def did_you_mean(value: str, among: Collection[str]) -> str:
    """The nearest value the cluster has: for a glob, the glob it would be with the
    nearest value's text (``NVIDIA-A10O-*`` -> ``NVIDIA-A100-*``); for a name that
    begins a value (``NVIDIA-A100``, a product without its glob), that prefix's glob."""
    names = sorted(among)
    if any(c in value for c in _GLOB):
        head = value.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        tail = value[len(head) :]
        heads = sorted({n[: len(head)] for n in names})
        close = difflib.get_close_matches(head, heads, n=1, cutoff=0.6)
        return close[0] + tail if close else ""
    prefixed = [n for n in names if n.startswith(value)]
    if prefixed and value:
        following = {n[len(value) : len(value) + 1] for n in prefixed}
        joint = following.pop() if len(following) == 1 else ""
        return f"{value}{joint if joint in ('-', '_', '.') else ''}*"
    close = difflib.get_close_matches(value, names, n=1, cutoff=0.6)
    return close[0] if close else ""
