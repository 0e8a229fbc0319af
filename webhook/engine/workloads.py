"""Where pod templates live in each kind: the one table that checks never branch around.

As in pod-security-admission, a kind maps to template locations once, so a check written
for a pod applies unchanged to a Deployment, a PyTorchJob or a RayCluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class TemplateLocation:
    """A path to pod templates (``*`` matches every map value or list item), and the paths
    whose product is how many pods each template makes (the same ``*`` bindings apply).

    ``pod_spec`` marks locations that hold a bare pod spec (KServe's predictor) rather than
    a template with ``metadata`` and ``spec``.
    """

    path: tuple[str, ...]
    replicas: tuple[tuple[str, ...], ...] = ()
    pod_spec: bool = False

    @classmethod
    def parse(
        cls, path: str, replicas: Iterable[str] = (), *, pod_spec: bool = False
    ) -> TemplateLocation:
        return cls(
            path=tuple(p for p in path.split(".") if p),
            replicas=tuple(tuple(r.split(".")) for r in replicas),
            pod_spec=pod_spec,
        )


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    group: str
    kind: str
    locations: tuple[TemplateLocation, ...]
    # DaemonSets make a pod per node: no replica count to multiply.
    per_node: bool = False
    # The resource name in webhook rules; every kind here follows the lower-case-plus-s rule.
    plural: str = ""

    @property
    def resource(self) -> str:
        return self.plural or self.kind.lower() + "s"


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod template found in an object.

    ``path`` points at the object holding ``metadata`` and ``spec`` (for a Pod: the root),
    or at the pod spec itself when ``pod_spec`` is set.
    """

    path: Path
    template: Mapping[str, Any]
    replicas: int | None
    pod_spec: bool = False

    @property
    def spec(self) -> Mapping[str, Any]:
        if self.pod_spec:
            return self.template
        spec = self.template.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def spec_path(self) -> Path:
        return self.path if self.pod_spec else (*self.path, "spec")

    @property
    def labels(self) -> Mapping[str, str]:
        if self.pod_spec:
            return {}
        meta = self.template.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return labels if isinstance(labels, dict) else {}


def _kind(
    group: str, kind: str, *locations: TemplateLocation, per_node: bool = False
) -> WorkloadKind:
    return WorkloadKind(group=group, kind=kind, locations=locations, per_node=per_node)


_L = TemplateLocation.parse
POD = _kind("", "Pod", _L(""))
BUILTIN_KINDS: tuple[WorkloadKind, ...] = (
    POD,
    _kind("apps", "Deployment", _L("spec.template", ["spec.replicas"])),
    _kind("apps", "ReplicaSet", _L("spec.template", ["spec.replicas"])),
    _kind("apps", "StatefulSet", _L("spec.template", ["spec.replicas"])),
    _kind("apps", "DaemonSet", _L("spec.template"), per_node=True),
    _kind("", "ReplicationController", _L("spec.template", ["spec.replicas"])),
    _kind("batch", "Job", _L("spec.template", ["spec.parallelism"])),
    _kind(
        "batch",
        "CronJob",
        _L("spec.jobTemplate.spec.template", ["spec.jobTemplate.spec.parallelism"]),
    ),
    _kind(
        "kubeflow.org",
        "PyTorchJob",
        _L("spec.pytorchReplicaSpecs.*.template", ["spec.pytorchReplicaSpecs.*.replicas"]),
    ),
    _kind(
        "kubeflow.org",
        "TFJob",
        _L("spec.tfReplicaSpecs.*.template", ["spec.tfReplicaSpecs.*.replicas"]),
    ),
    _kind(
        "kubeflow.org",
        "MPIJob",
        _L("spec.mpiReplicaSpecs.*.template", ["spec.mpiReplicaSpecs.*.replicas"]),
    ),
    _kind(
        "kubeflow.org",
        "PaddleJob",
        _L("spec.paddleReplicaSpecs.*.template", ["spec.paddleReplicaSpecs.*.replicas"]),
    ),
    _kind(
        "kubeflow.org",
        "XGBoostJob",
        _L("spec.xgbReplicaSpecs.*.template", ["spec.xgbReplicaSpecs.*.replicas"]),
    ),
    _kind(
        "ray.io",
        "RayCluster",
        _L("spec.headGroupSpec.template"),
        _L("spec.workerGroupSpecs.*.template", ["spec.workerGroupSpecs.*.replicas"]),
    ),
    _kind(
        "ray.io",
        "RayJob",
        _L("spec.rayClusterSpec.headGroupSpec.template"),
        _L(
            "spec.rayClusterSpec.workerGroupSpecs.*.template",
            ["spec.rayClusterSpec.workerGroupSpecs.*.replicas"],
        ),
        _L("spec.submitterPodTemplate"),
    ),
    _kind(
        "ray.io",
        "RayService",
        _L("spec.rayClusterConfig.headGroupSpec.template"),
        _L(
            "spec.rayClusterConfig.workerGroupSpecs.*.template",
            ["spec.rayClusterConfig.workerGroupSpecs.*.replicas"],
        ),
    ),
    _kind(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        _L("spec.leaderWorkerTemplate.leaderTemplate", ["spec.replicas"]),
        # One worker group holds `size` pods, the leader among them: an upper bound.
        _L(
            "spec.leaderWorkerTemplate.workerTemplate",
            ["spec.replicas", "spec.leaderWorkerTemplate.size"],
        ),
    ),
    _kind("batch.volcano.sh", "Job", _L("spec.tasks.*.template", ["spec.tasks.*.replicas"])),
    _kind(
        "jobset.x-k8s.io",
        "JobSet",
        _L(
            "spec.replicatedJobs.*.template.spec.template",
            ["spec.replicatedJobs.*.replicas", "spec.replicatedJobs.*.template.spec.parallelism"],
        ),
    ),
    _kind(
        "serving.kserve.io",
        "InferenceService",
        _L("spec.predictor", pod_spec=True),
        _L("spec.transformer", pod_spec=True),
        _L("spec.explainer", pod_spec=True),
    ),
)


class KindTable:
    """Lookup of workload kinds by API group and kind (versions share a layout)."""

    def __init__(self, kinds: Iterable[WorkloadKind] = BUILTIN_KINDS) -> None:
        self._kinds: dict[tuple[str, str], WorkloadKind] = {}
        for kind in kinds:
            self._kinds[(kind.group, kind.kind)] = kind

    def extended(self, kinds: Iterable[WorkloadKind]) -> KindTable:
        table = KindTable(self._kinds.values())
        for kind in kinds:
            table._kinds[(kind.group, kind.kind)] = kind
        return table

    def lookup(self, api_version: str, kind: str) -> WorkloadKind | None:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        return self._kinds.get((group, kind))

    def knows(self, group: str, kind: str) -> bool:
        return (group, kind) in self._kinds

    def __iter__(self) -> Iterator[WorkloadKind]:
        return iter(self._kinds.values())

    def templates(self, obj: Mapping[str, Any]) -> list[PodTemplate] | None:
        """Every pod template of ``obj``; ``None`` when the kind holds none we know of."""
        kind = self.lookup(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if kind is None:
            return None
        if kind is POD:  # the common case, on every pod create
            return [PodTemplate(path=(), template=obj, replicas=None)]
        found: list[PodTemplate] = []
        for location in kind.locations:
            for path, template in _walk(obj, location.path, ()):
                if not isinstance(template, dict):
                    continue
                replicas = None if kind.per_node else _replicas(obj, location, path)
                found.append(
                    PodTemplate(
                        path=path, template=template, replicas=replicas, pod_spec=location.pod_spec
                    )
                )
        return found


def _walk(node: object, pattern: tuple[str, ...], at: Path) -> Iterator[tuple[Path, object]]:
    if not pattern:
        yield at, node
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        if isinstance(node, dict):
            for key in sorted(node, key=str):
                yield from _walk(node[key], rest, (*at, str(key)))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                yield from _walk(item, rest, (*at, index))
    elif isinstance(node, dict) and head in node:
        yield from _walk(node[head], rest, (*at, head))


# Public for webhook.engine.shape, which checks the replica fields found the same way.
walk = _walk


def _replicas(obj: Mapping[str, Any], location: TemplateLocation, path: Path) -> int:
    """Product of the replica fields, wildcards bound as in ``path``; a missing field is 1."""
    bindings = [path[i] for i, part in enumerate(location.path) if part == "*"]
    total = 1
    for pattern in location.replicas:
        queue = iter(bindings)
        value: object = obj
        for part in pattern:
            key: str | int = next(queue, "*") if part == "*" else part
            if isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list) and isinstance(key, int) and key < len(value):
                value = value[key]
            else:
                value = None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            total *= value
    return total
