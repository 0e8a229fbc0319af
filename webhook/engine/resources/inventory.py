"""An immutable snapshot of what the cluster's nodes offer, and the questions policy asks.

Admission cost must not grow with the cluster. Nodes are folded into *shapes* (nodes that
differ only in per-node identity labels such as the hostname), per-resource orderings are
computed once per snapshot, and the answer for one placement (node selector, required
affinity, tolerations) is memoised: pods of one workload share their placement.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from webhook.engine.kube.quantity import QuantityError, parse_quantity
from webhook.engine.kube.selectors import Labels, clean_terms, dig, terms_match, tolerates
from webhook.engine.resources.fit import Demand, Shortfall, shortfalls
from webhook.engine.resources.gpufacts import (
    DEVICE_PLUGIN_DEFAULTS,
    DeviceFacts,
    GPUFacts,
    SlotRefusal,
    gpu_facts,
)

# Transient node states, and the one rule for them (docs/rules.md, "Nodes that are not
# ready, unreachable or cordoned"): a "cannot fit" denial never rests on one, since the
# cluster heals and the scheduler simply waits; ``explain`` and the webhook's warnings say
# what the state is now. They are:
# - the taints the node lifecycle controller sets while a node's condition is bad
#   (``node.kubernetes.io/not-ready``, ``unreachable``, ``memory-pressure``, ...:
#   kubernetes ``pkg/controller/nodelifecycle``, TaintNodesByCondition; kube-scheduler's
#   TaintToleration filter rejects them now, ``tainttoleration/taint_toleration.go``);
# - a Ready condition that is not True (the controller adds the not-ready taint for it);
# - a cordon (``spec.unschedulable``, the taint ``node.kubernetes.io/unschedulable``: the
#   NodeUnschedulable filter), set by ``kubectl drain`` and by autoscalers that replace a
#   node; a pod that waits for it gets the node back, or a new one like it.
CONDITION_TAINT_PREFIX = "node.kubernetes.io/"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_STATES = {NOT_READY_TAINT: "not ready", "node.kubernetes.io/unreachable": "unreachable"}
ALWAYS_IDENTITY_LABELS = frozenset({"kubernetes.io/hostname"})
_PLACEMENT_CACHE_SIZE = 2048
_KEY_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Node:
    """What policy needs of one node (or of a node pool that may appear)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    # Extended resources by name; "cpu" in millicores; "memory" in bytes.
    allocatable: Mapping[str, int] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    # Set for a node pool declared in rule files: a cluster that scales from zero may
    # create up to ``count`` such nodes when a pod waits for one.
    pool: str = ""
    count: int = 1
    # Set for a node an autoscaler may create (``scheduling.karpenter``): whether it takes
    # a pod is its autoscaler's rule, not a match of labels.
    admits: Callable[[Placement], bool] | None = field(default=None, compare=False, repr=False)
    # A Karpenter pool's ``minValues``: (label key, N) that the instance types holding a
    # pod must show at least N distinct values of, or the pool launches none of them.
    min_values: tuple[tuple[str, int], ...] = ()
    # Why an autoscaler cannot create such a node right now (a pool at its limits): a
    # transient state, as a cordon is, never a reason to deny.
    unavailable: str = ""


@dataclass(frozen=True, slots=True)
class UnboundedPool:
    """Nodes an autoscaler may create whose size the webhook cannot know: no capacity
    check denies a pod such a pool admits (GUIDE.md, the rule above the others)."""

    name: str
    kind: str  # "Karpenter on AWS", "cluster-autoscaler", "GKE ComputeClass", ...
    reason: str
    admits: Callable[[Placement], bool] = field(compare=False, repr=False)

    def describe(self) -> str:
        return f"pool {self.name} ({self.kind}, size unknown: {self.reason})"


def healed(node: Node) -> Node:
    """The node once its transient states are gone: Ready, uncordoned, no condition taints
    (what a "cannot fit" denial judges; see ``CONDITION_TAINT_PREFIX``)."""
    if node.ready and not node.unschedulable and not _transient_taints(node.taints):
        return node
    taints = tuple(t for t in node.taints if not t.key.startswith(CONDITION_TAINT_PREFIX))
    return replace(node, ready=True, unschedulable=False, taints=taints)


def _transient_taints(taints: Sequence[Taint]) -> bool:
    return any(t.key.startswith(CONDITION_TAINT_PREFIX) for t in taints)


def _amount(name: str, raw: object) -> int | None:
    try:
        value = parse_quantity(raw)
    except QuantityError:
        return None
    if name == "cpu":
        value *= 1000
    return int(value)


def resources_from_json(raw: object) -> dict[str, int]:
    """Keep cpu, memory and extended resources; skip what policy never asks about."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, int] = {}
    for name, quantity in raw.items():
        if name in ("cpu", "memory") or "/" in name:
            amount = _amount(name, quantity)
            if amount is not None:
                out[_intern(str(name))] = amount
    return out


def _intern(text: str) -> str:
    """One copy of each label key and common value: a cache of 10,000 nodes holds the same
    few hundred strings millions of times otherwise (this halves its memory)."""
    return sys.intern(text)


def taints_from_json(raw: object) -> tuple[Taint, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        Taint(
            key=_intern(str(t.get("key", ""))),
            value=_intern(str(t.get("value") or "")),
            effect=_intern(str(t["effect"])),
        )
        for t in raw
        if isinstance(t, dict) and t.get("effect")
    )


def node_from_json(raw: Mapping[str, Any]) -> Node:
    """Read a ``v1.Node`` as the API server sends it; tolerant of missing parts."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    labels = meta.get("labels") or {}
    ready = any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return Node(
        name=str(meta.get("name", "")),
        labels={_intern(str(k)): _intern(str(v)) for k, v in labels.items()}
        if isinstance(labels, dict)
        else {},
        taints=taints_from_json(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        allocatable=resources_from_json(status.get("allocatable")),
        capacity=resources_from_json(status.get("capacity")),
    )


def _tolerates_cordon(tolerations: Sequence[Mapping[str, Any]]) -> bool:
    return bool(tolerations) and any(
        t.get("key") in (None, "", UNSCHEDULABLE_TAINT)
        and tolerates(t, key=UNSCHEDULABLE_TAINT, value="", effect="NoSchedule")
        for t in tolerations
    )


@dataclass(slots=True)  # built per review: frozen would triple its cost
class Placement:
    """Where a pod may go: what the scheduler's filters read from its spec."""

    node_selector: Mapping[str, str]
    required_terms: Sequence[Mapping[str, Any]] | None
    tolerations: Sequence[Mapping[str, Any]]
    # NodeUnschedulable lets a pod that tolerates the unschedulable taint onto a cordoned
    # node; ``None``: read it from the tolerations. False for "anywhere worth suggesting".
    cordoned: bool | None = None
    # The memo key, serialised once: several checks ask about one placement per review.
    _key: bytes = field(default=b"", repr=False, compare=False)

    def __post_init__(self) -> None:
        key = orjson.dumps(
            [self.node_selector, self.required_terms, self.tolerations],
            option=_KEY_OPTIONS,
            default=str,
        )
        if self.cordoned is not None:  # set, not read from the tolerations: another answer
            key += b"!cordoned" if self.cordoned else b"!not-cordoned"
        self._key = key

    @property
    def may_use_cordoned(self) -> bool:
        """NodeUnschedulable: whether a cordoned node is open to this pod (asked only when
        a placement's answer is not memoised yet)."""
        if self.cordoned is not None:
            return self.cordoned
        return _tolerates_cordon(self.tolerations)

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Placement:
        """Read from raw JSON that may be ill-typed (a custom resource's schema is checked
        after mutating webhooks run): malformed parts are read as absent."""
        if not isinstance(spec, dict):
            spec = {}
        selector = spec.get("nodeSelector")
        affinity = spec.get("affinity")  # most pods have none: nothing to dig or clean
        terms = (
            None
            if affinity is None
            else clean_terms(
                dig(affinity, "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
            )
        )
        node_selector = (
            {str(k): v for k, v in selector.items() if isinstance(v, str)}
            if isinstance(selector, dict)
            else {}
        )
        tolerations = spec.get("tolerations")
        tolerations = (
            [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []
        )
        # By position: a dataclass called with keywords costs twice as much, per review.
        return cls(node_selector, terms, tolerations)

    def key(self) -> bytes:
        return self._key

    def healed(self) -> Placement:
        """This placement on a cluster whose transient states are gone: cordoned nodes open
        to it (condition taints are never counted, see ``_tolerated``)."""
        if self.cordoned is True:
            return self
        return Placement(self.node_selector, self.required_terms, self.tolerations, cordoned=True)

    def transient_state(self, node: Node, taints: Sequence[Taint] | None = None) -> str:
        """What keeps the pod off ``node`` now, when only a transient state does: "cordoned",
        "not ready", or the condition taint; empty when the node takes it now."""
        if node.unavailable:
            return node.unavailable
        if node.unschedulable and not self.may_use_cordoned:
            return "cordoned"
        for taint in node.taints if taints is None else taints:
            if (
                taint.key.startswith(CONDITION_TAINT_PREFIX)
                and taint.key != UNSCHEDULABLE_TAINT
                and taint.effect in ("NoSchedule", "NoExecute")
                and not any(
                    tolerates(t, key=taint.key, value=taint.value, effect=taint.effect)
                    for t in self.tolerations
                )
            ):
                return _STATES.get(taint.key, f"tainted {taint.key}")
        if not node.ready and not any(
            tolerates(t, key=NOT_READY_TAINT, value="", effect="NoSchedule")
            for t in self.tolerations
        ):
            return "not ready"
        return ""

    def names_nodes(self, identity: frozenset[str]) -> bool:
        if any(k in identity for k in self.node_selector):
            return True
        for term in self.required_terms or ():
            if term.get("matchFields"):
                return True
            if any(
                isinstance(e, dict) and e.get("key") in identity
                for e in term.get("matchExpressions") or ()
            ):
                return True
        return False

    def admits(self, labels: Labels, name: str, taints: Sequence[Taint]) -> bool:
        for k, v in self.node_selector.items():
            if labels.get(k) != str(v):
                return False
        if self.required_terms is not None and not terms_match(self.required_terms, labels, name):
            return False
        return all(self._tolerated(t) for t in taints)

    def _tolerated(self, taint: Taint) -> bool:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            return True
        if taint.key.startswith(CONDITION_TAINT_PREFIX) and (
            taint.key != UNSCHEDULABLE_TAINT or self.cordoned is True  # healed: no cordon
        ):
            return True
        return any(
            tolerates(t, key=taint.key, value=taint.value, effect=taint.effect)
            for t in self.tolerations
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """Nodes alike in all that placement reads, except their identity labels."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    members: tuple[Node, ...]
    pool: str
    # How many nodes the shape stands for (a declared pool counts as its maxNodes).
    node_count: int = 0
    gpu: GPUFacts = field(default_factory=GPUFacts)

    @property
    def example(self) -> Node:
        return self.members[0]


@dataclass(frozen=True, slots=True)
class Fit:
    """The answer to "what is the largest node this pod can use for this resource"."""

    node: Node | None
    amount: int


Pause = Callable[[], None]
PAUSE_EVERY = 4  # changes between pauses of ``Inventory.updated``: about 0.1 ms of work


def _no_pause() -> None:
    """Nothing: a caller without other threads to let run."""


@dataclass(slots=True)
class _Index:
    """The maps a snapshot is updated from: mutable, and owned by one snapshot at a time.

    ``Inventory.updated`` changes them in place and hands them on to the snapshot it
    builds, so an update costs what it touches, not a copy of every node: in a live cache
    that copy held the interpreter for about a millisecond per publish with 10,000 nodes,
    and requests waited for it. A snapshot that no longer owns its index rebuilds one."""

    by_name: dict[str, Node]
    key_of: dict[str, _ShapeKey]
    groups: dict[_ShapeKey, dict[str, Node]]
    shape_of: dict[_ShapeKey, Shape]
    # One key object per shape: 10,000 nodes must not hold 10,000 copies of it.
    canonical: dict[_ShapeKey, _ShapeKey]
    owner: object

    @classmethod
    def of(cls, nodes: Iterable[Node], identity: frozenset[str]) -> _Index:
        index = cls({}, {}, {}, {}, {}, owner=None)
        for node in nodes:
            index.put(node, identity=identity, key=None)
        index.shape_of = {key: _shape(key, members) for key, members in index.groups.items()}
        return index

    def put(self, node: Node, *, identity: frozenset[str], key: _ShapeKey | None) -> _ShapeKey:
        """Add a node to shape ``key``, or to the shape it computes to when ``key`` is None;
        returns the key of the shape it joined."""
        if key is None:
            fresh = _shape_key(node, identity)
            key = self.canonical.setdefault(fresh, fresh)
        self.by_name[node.name] = node
        self.key_of[node.name] = key
        self.groups.setdefault(key, {})[node.name] = node
        return key

    def remove(self, name: str) -> tuple[Node, _ShapeKey] | None:
        old = self.by_name.pop(name, None)
        if old is None:
            return None
        key = self.key_of.pop(name)
        del self.groups[key][name]
        return old, key

    def reshape(self, touched: Iterable[_ShapeKey], *, pause: Pause) -> tuple[Shape, ...]:
        for key in touched:
            pause()
            members = self.groups.get(key)
            if members:
                self.shape_of[key] = _shape(key, members)
            else:
                self.groups.pop(key, None)
                self.shape_of.pop(key, None)
                self.canonical.pop(key, None)
        return tuple(self.shape_of[key] for key in self.groups)


class Inventory:
    """A frozen snapshot; build a new one for every change, never mutate one."""

    def __init__(
        self,
        nodes: Iterable[Node],
        *,
        resource_version: str = "",
        source: str = "",
    ) -> None:
        by_name = {node.name: node for node in nodes}
        identity = _identity_labels(list(by_name.values()))
        index = _Index.of(by_name.values(), identity)
        self._assemble(
            index=index,
            identity=identity,
            shapes=tuple(index.shape_of[key] for key in index.groups),
            count=len(by_name),
            resource_version=resource_version,
            source=source,
        )

    def _assemble(
        self,
        *,
        index: _Index | None,
        identity: frozenset[str],
        shapes: tuple[Shape, ...],
        count: int,
        resource_version: str,
        source: str,
    ) -> None:
        self._token = object()
        if index is not None:
            index.owner = self._token
        self._index = index
        self._count = count
        self._nodes: tuple[Node, ...] | None = None
        self.unbounded: tuple[UnboundedPool, ...] = ()
        self._unbounded_for: dict[bytes, tuple[UnboundedPool, ...]] = {}
        self.resource_version = resource_version
        self.source = source
        self.identity_labels = identity
        self.shapes = shapes
        # Only a cordon (NodeUnschedulable's ``spec.unschedulable``, or its taint) tells a
        # placement from its ``healed()`` one: without one, both admit the same nodes.
        self.cordons = any(
            shape.unschedulable or any(t.key == UNSCHEDULABLE_TAINT for t in shape.taints)
            for shape in shapes
        )
        totals: Counter[str] = Counter()
        for shape in self.shapes:
            for name, amount in shape.allocatable.items():
                totals[name] += amount * shape.node_count
        self._totals = dict(totals)
        self.resource_names = frozenset(n for n, a in totals.items() if a > 0 and "/" in n)
        self._by_resource: dict[str, tuple[int, ...]] = {}
        for name in self.resource_names:
            self._by_resource[name] = _largest_first(self.shapes, name)
        # Memos, not state: safe to share between threads (plain dict get/set only).
        self._placements: dict[bytes, frozenset[int]] = {}
        self._answers: dict[tuple[bytes, str], _Answer] = {}
        self._fits: dict[tuple[bytes, Demand, int], FitAnswer] = {}

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, by shape (for reports: admissions ask shapes, not nodes)."""
        if self._nodes is None:
            self._nodes = tuple(node for shape in self.shapes for node in shape.members)
        return self._nodes

    def updated(
        self,
        changes: Mapping[str, Node | None],
        *,
        resource_version: str,
        pause: Pause = _no_pause,
    ) -> Inventory:
        """A new snapshot: this one with ``changes`` applied (``None`` deletes a node).

        Costs what the changes touch, not the cluster's size (see ``_Index``): only the
        shapes that gain or lose a member are rebuilt, and identity labels are kept from
        this snapshot (a relist recounts them). Updating the newest snapshot is cheap;
        updating an older one rebuilds the index first. Not for two threads at once on
        one snapshot: a live cache updates from one publishing thread.

        ``pause`` is called every few changes and between shapes, so that a caller in a
        background thread can let requests run: a burst's hundreds of changes take
        milliseconds, and a request waiting for them took twice its usual time.
        """
        index = self._index
        if index is None or index.owner is not self._token:
            index = _Index.of(self.nodes, self.identity_labels)
        touched: set[_ShapeKey] = set()
        for done, (name, node) in enumerate(changes.items(), 1):
            if done % PAUSE_EVERY == 0:
                pause()
            gone = index.remove(name)
            if gone is not None:
                touched.add(gone[1])
            if node is not None:
                # Most updates are status heartbeats: same labels, taints and resources.
                same = gone[1] if gone is not None and _alike(gone[0], node) else None
                touched.add(index.put(node, identity=self.identity_labels, key=same))
        snapshot = Inventory.__new__(Inventory)
        snapshot._assemble(
            index=index,
            identity=self.identity_labels,
            shapes=index.reshape(touched, pause=pause),
            count=len(index.by_name),
            resource_version=resource_version,
            source=self.source,
        )
        return snapshot

    def __len__(self) -> int:
        return self._count

    def with_nodes(
        self, extra: Iterable[Node], *, unbounded: Sequence[UnboundedPool] = ()
    ) -> Inventory:
        """This snapshot plus node pools: declared in rule files, or sized from an
        autoscaler's objects (``extra``), and pools of unknown size (``unbounded``).

        Costs what the pools add: a live cache publishes often, and the first review after
        each snapshot pays for adding them. Pools are shapes of their own (their nodes are
        named ``nodepool/...``, which no node can be), so this snapshot's index is neither
        taken nor copied; requests call this, while the publisher updates the snapshot.
        """
        groups: dict[_ShapeKey, dict[str, Node]] = {}
        for node in extra:
            groups.setdefault(_shape_key(node, self.identity_labels), {})[node.name] = node
        if not groups and not unbounded:
            return self
        snapshot = Inventory.__new__(Inventory)
        snapshot._assemble(
            index=None,
            identity=self.identity_labels,
            shapes=self.shapes + tuple(_shape(key, members) for key, members in groups.items()),
            count=self._count + sum(len(members) for members in groups.values()),
            resource_version=self.resource_version,
            source=self.source,
        )
        snapshot.unbounded = self.unbounded + tuple(unbounded)
        return snapshot

    def unbounded_for(self, placement: Placement) -> tuple[UnboundedPool, ...]:
        """The pools of unknown size that may create a node this pod can use."""
        if not self.unbounded:
            return ()
        key = placement.key()
        hit = self._unbounded_for.get(key)
        if hit is None:
            hit = tuple(pool for pool in self.unbounded if pool.admits(placement))
            if len(self._unbounded_for) >= _PLACEMENT_CACHE_SIZE:
                self._unbounded_for = {}
            self._unbounded_for[key] = hit
        return hit

    def may_offer(self, resource: str) -> bool:
        """Whether ``resource`` may be offered at all: by a node, by a node pool the
        webhook could size (declared, or a Karpenter NodePool through the instance-type
        catalogue: its shapes are in ``shapes`` and ``resource_names``), or by a pool of
        unknown size (which may offer anything). "No node offers it" is true only when
        this is False."""
        return resource in self.resource_names or bool(self.unbounded)

    @property
    def pool_resource_names(self) -> frozenset[str]:
        """Resources that only pools (nodes that could exist) offer, none of today's nodes."""
        by_nodes = {n for s in self.shapes if not s.pool for n, a in s.allocatable.items() if a}
        return frozenset(self.resource_names - by_nodes)

    def total(self, resource: str) -> int:
        return self._totals.get(resource, 0)

    def _admitted_shapes(self, key: bytes, placement: Placement) -> frozenset[int]:
        hit = self._placements.get(key)
        if hit is not None:
            return hit
        names_nodes = placement.names_nodes(self.identity_labels)
        result = frozenset(
            i
            for i, shape in enumerate(self.shapes)
            if self._shape_admits(shape, placement, names_nodes=names_nodes)
        )
        if len(self._placements) >= _PLACEMENT_CACHE_SIZE:
            self._placements = {}
        self._placements[key] = result
        return result

    @staticmethod
    def _shape_admits(shape: Shape, placement: Placement, *, names_nodes: bool) -> bool:
        if shape.unschedulable and not placement.may_use_cordoned:
            return False
        # Members differ only in identity labels: one member answers for all unless the
        # placement names nodes (a hostname selector, matchFields on metadata.name).
        if shape.example.admits is not None:
            return shape.example.admits(placement)
        members = shape.members if names_nodes else shape.members[:1]
        return any(placement.admits(node.labels, node.name, shape.taints) for node in members)

    def largest(self, resource: str, placement: Placement | None = None) -> Fit:
        """The node with the most allocatable ``resource`` that the placement admits."""
        if placement is None:
            for index in self._by_resource.get(resource, ()):
                shape = self.shapes[index]
                return Fit(node=shape.example, amount=shape.allocatable[resource])
            return Fit(node=None, amount=0)
        return self._answer(resource, placement).fit

    def admitted(self, resource: str, placement: Placement) -> list[Shape]:
        """Shapes offering ``resource`` that the placement admits, largest first."""
        return list(self._answer(resource, placement).shapes)

    def shapes_admitting(self, placement: Placement) -> tuple[Shape, ...]:
        """Every shape the placement admits, whatever it offers (memoised per placement)."""
        admitted = self._admitted_shapes(placement.key(), placement)
        return tuple(shape for i, shape in enumerate(self.shapes) if i in admitted)

    def prepare_like(self, previous: Inventory) -> None:
        """Answer now the questions ``previous`` was asked.

        A live cache calls this before it publishes a new snapshot, so that the first
        admissions after a node change cost what later ones do.
        """
        for answer in list(previous._answers.values()):
            self._answer(answer.resource, answer.placement)
        for fit in list(previous._fits.values()):
            self.fit(fit.placement, fit.demand, fit.refusal)

    def placeable(self, placement: Placement) -> tuple[Shape, ...]:
        """The node classes a pod with this placement can land on, by the scheduler's
        NodeUnschedulable, NodeAffinity (nodeSelector and required terms) and
        TaintToleration filters, before any resource is counted.

        This is "the nodes this pod can land on" for every check that asks about capacity
        (GPU resources here, DRA devices elsewhere): filter these further, never the
        whole inventory.
        """
        admitted = self._admitted_shapes(placement.key(), placement)
        return tuple(shape for i, shape in enumerate(self.shapes) if i in admitted)

    def fit(
        self,
        placement: Placement,
        demand: Demand,
        refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS,
    ) -> FitAnswer:
        """Which node classes the pod can land on *and* whose empty nodes hold its whole
        request vector (and whose device plugin would not refuse it); memoised per
        placement and vector, so the cost of a request does not grow with the number of
        nodes. Transient states do not count (``healed``): a node cordoned or not ready
        now is a place the pod can run, and ``FitAnswer.waiting`` says so."""
        # The refusal by id, as hashing the dataclass costs more than the rest of a hit:
        # each answer holds its refusal, so no other object takes that id while it lives.
        key = (placement.key(), demand, id(refusal))
        hit = self._fits.get(key)
        if hit is not None:
            return hit
        fitting: list[Shape] = []
        missing: list[tuple[Shape, tuple[Shortfall, ...]]] = []
        for shape in self.placeable(placement.healed()):
            short = shortfalls(shape.allocatable, shape.gpu, demand, refusal)
            if short:
                missing.append((shape, short))
            else:
                fitting.append(shape)
        if any(shape.example.min_values for shape in fitting):
            fitting = _within_min_values(fitting, missing)
        answer = FitAnswer(placement, demand, tuple(fitting), tuple(missing), refusal)
        if len(self._fits) >= _PLACEMENT_CACHE_SIZE:
            self._fits = {}
        self._fits[key] = answer
        return answer

    def _answer(self, resource: str, placement: Placement) -> _Answer:
        # Memoised per placement and resource: the cost of a request does not grow with
        # the number of nodes or shapes.
        key = (placement.key(), resource)
        hit = self._answers.get(key)
        if hit is not None:
            return hit
        admitted = self._admitted_shapes(key[0], placement)
        shapes = tuple(self.shapes[i] for i in self._by_resource.get(resource, ()) if i in admitted)
        fit = (
            Fit(node=shapes[0].example, amount=shapes[0].allocatable[resource])
            if shapes
            else Fit(node=None, amount=0)
        )
        answer = _Answer(resource=resource, placement=placement, fit=fit, shapes=shapes)
        if len(self._answers) >= _PLACEMENT_CACHE_SIZE:
            self._answers = {}
        self._answers[key] = answer
        return answer


@dataclass(frozen=True, slots=True)
class FitAnswer:
    """The node classes a pod fits, and what each other class it can land on lacks."""

    placement: Placement
    demand: Demand
    fitting: tuple[Shape, ...]
    missing: tuple[tuple[Shape, tuple[Shortfall, ...]], ...]
    refusal: SlotRefusal = DEVICE_PLUGIN_DEFAULTS
    # Memo of ``units``: checks ask it per container, answers live as long as the snapshot.
    _units: dict[str, Units] = field(default_factory=dict, compare=False, repr=False)
    _whole: dict[tuple[tuple[str, int], ...], bool] = field(
        default_factory=dict, compare=False, repr=False
    )
    _later: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def refused(self) -> tuple[Shape, ...]:
        """Classes that hold the request but whose device plugin refuses a container of it:
        the scheduler places the pod there, and the kubelet fails it (memoised)."""
        hit = self._later.get("refused")
        if hit is None:
            hit = self._later["refused"] = tuple(
                shape for shape, short in self.missing if short and all(s.refused for s in short)
            )
        return hit

    def waiting(self) -> tuple[tuple[Shape, str], ...]:
        """When every fitting node is kept from the pod now by a transient state: each
        fitting class with that state ("cordoned", "not ready", ...); else empty (memoised:
        an answer lives as long as its snapshot)."""
        hit = self._later.get("waiting")
        if hit is None:
            hit = self._later["waiting"] = self._waiting()
        return hit

    def _waiting(self) -> tuple[tuple[Shape, str], ...]:
        states: list[tuple[Shape, str]] = []
        for shape in self.fitting:
            state = ""
            for node in shape.members:
                state = self.placement.transient_state(node, shape.taints)
                if not state:
                    return ()
            states.append((shape, state))
        return tuple(states)

    def whole(self, vector: tuple[tuple[str, int], ...]) -> bool:
        """Whether every resource of ``vector`` is whole GPUs (no MIG slice, no shared slot)
        on every class that fits: the common answer, memoised per vector."""
        hit = self._whole.get(vector)
        if hit is None:
            units = [self.units(name) for name, _ in vector]
            hit = self._whole[vector] = bool(self.fitting) and all(
                not u.mig and u.shared is None for u in units
            )
        return hit

    def units(self, resource: str) -> Units:
        """What one unit of ``resource`` is on the fitting classes that offer it."""
        hit = self._units.get(resource)
        if hit is None:
            hit = self._units[resource] = Units.of(
                (shape, shape.gpu.device(resource, shape.allocatable[resource]))
                for shape in self.fitting
                if shape.allocatable.get(resource, 0) > 0
            )
        return hit


@dataclass(frozen=True, slots=True)
class Units:
    """A GPU resource on some node classes: each class with what one unit is there."""

    offering: tuple[tuple[Shape, DeviceFacts], ...]
    mig: bool  # a MIG slice on some class
    shared: tuple[Shape, DeviceFacts] | None  # the first class where it is a shared slot

    @classmethod
    def of(cls, pairs: Iterable[tuple[Shape, DeviceFacts]]) -> Units:
        offering = tuple(pairs)
        return cls(
            offering=offering,
            mig=any(device.kind == "mig" for _, device in offering),
            shared=next(((s, d) for s, d in offering if d.shared), None),
        )


@dataclass(frozen=True, slots=True)
class _Answer:
    resource: str
    placement: Placement
    fit: Fit
    shapes: tuple[Shape, ...]


MIN_VALUES = "minValues"


def _within_min_values(
    fitting: list[Shape], missing: list[tuple[Shape, tuple[Shortfall, ...]]]
) -> list[Shape]:
    """Karpenter's ``minValues`` (kubernetes-sigs/karpenter pkg/controllers/provisioning/
    scheduling/nodeclaim.go ``filterInstanceTypesByRequirements``, then
    ``InstanceTypes.SatisfiesMinValues`` in pkg/cloudprovider/types.go): of the instance
    types that are compatible with the pod and hold its requests, the distinct values of
    each key with ``minValues: N`` must number N, or (``--min-values-policy Strict``, the
    default) the pool launches no node for the pod. A pool's shapes that fail it move to
    ``missing`` with a shortfall naming the key (resource ``minValues <key>``)."""
    by_pool: dict[str, list[Shape]] = {}
    for shape in fitting:
        if shape.example.min_values:
            by_pool.setdefault(shape.pool, []).append(shape)
    failed: set[int] = set()
    for shapes in by_pool.values():
        unmet = min_values_unmet(shapes[0].example.min_values, [s.labels for s in shapes])
        if unmet is not None:
            key, need, have = unmet
            short = (Shortfall(f"{MIN_VALUES} {key}", need, have),)
            missing.extend((s, short) for s in shapes)
            failed.update(id(s) for s in shapes)
    return [s for s in fitting if id(s) not in failed]


def min_values_unmet(
    min_values: Sequence[tuple[str, int]], holding: Sequence[Mapping[str, str]]
) -> tuple[str, int, int] | None:
    """The first ``minValues`` key (with N and the distinct values there are) that the
    labels of the instance types holding the pod do not number N of; None when all do."""
    for key, need in min_values:
        have = len({labels[key] for labels in holding if key in labels})
        if have < need:
            return key, need, have
    return None


def _largest_first(shapes: Sequence[Shape], resource: str) -> tuple[int, ...]:
    offering = [i for i, shape in enumerate(shapes) if shape.allocatable.get(resource, 0) > 0]
    return tuple(sorted(offering, key=lambda i: -shapes[i].allocatable[resource]))


def _identity_labels(nodes: Sequence[Node]) -> frozenset[str]:
    """Label keys that name a node rather than describe it (hostname, instance id, ...).

    Found by counting: a key with a different value on most nodes cannot help group them.
    """
    if len(nodes) < 8:
        return ALWAYS_IDENTITY_LABELS
    values: dict[str, set[str]] = {}
    for node in nodes:
        for key, value in node.labels.items():
            values.setdefault(key, set()).add(value)
    threshold = max(8, len(nodes) // 4)
    return ALWAYS_IDENTITY_LABELS | {k for k, v in values.items() if len(v) > threshold}


_ShapeKey = tuple[Any, ...]


def _shape_key(node: Node, identity: frozenset[str]) -> _ShapeKey:
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k not in identity))
    return (
        labels,
        node.taints,
        node.unschedulable,
        tuple(sorted(node.allocatable.items())),
        node.pool,
    )


def _alike(old: Node, new: Node) -> bool:
    """Whether two versions of a node fall in the same shape (its key needs no recount)."""
    return (
        old.labels == new.labels
        and old.taints == new.taints
        and old.unschedulable == new.unschedulable
        and old.allocatable == new.allocatable
        and old.pool == new.pool
    )


def _shape(key: _ShapeKey, members: Mapping[str, Node]) -> Shape:
    return Shape(
        labels=dict(key[0]),
        taints=key[1],
        unschedulable=key[2],
        allocatable=dict(key[3]),
        members=tuple(members.values()),
        pool=key[4],
        # Only a declared pool stands for more than one node.
        node_count=sum(n.count for n in members.values()) if key[4] else len(members),
        gpu=gpu_facts(dict(key[0]), dict(key[3])),
    )
