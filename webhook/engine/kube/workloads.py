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
    # Keys of the pod spec that hold one container each (KServe's ``model`` and framework
    # forms), judged as app containers beside ``containers``.
    singles: tuple[str, ...] = ()
    # When this path exists, the last replica factor counts one pod fewer: a
    # LeaderWorkerSet's ``size`` includes the leader, made from ``leaderTemplate`` if set.
    one_less_if: tuple[str, ...] = ()
    # A field that says how many pods an autoscaler may make of this template (an elastic
    # PyTorchJob's ``elasticPolicy.maxReplicas``), and the ``*`` binding it bounds ("Worker");
    # counted toward the workload's GPU limits when above the replica count.
    most: tuple[str, ...] = ()
    most_of: str = ""

    @classmethod
    def parse(
        cls,
        path: str,
        replicas: Iterable[str] = (),
        *,
        pod_spec: bool = False,
        singles: Iterable[str] = (),
        one_less_if: str = "",
        most: str = "",
        most_of: str = "",
    ) -> TemplateLocation:
        return cls(
            path=tuple(p for p in path.split(".") if p),
            replicas=tuple(tuple(r.split(".")) for r in replicas),
            pod_spec=pod_spec,
            singles=tuple(singles),
            one_less_if=tuple(p for p in one_less_if.split(".") if p),
            most=tuple(p for p in most.split(".") if p),
            most_of=most_of,
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
    # API versions this layout is for; empty: every version without a layout of its own.
    versions: tuple[str, ...] = ()
    # The ``specReplicasPath`` of the kind's ``scale`` subresource (the field a ``kubectl
    # scale`` or an HPA sets); empty: the kind has none (webhook.engine.evaluation.scale).
    scale: tuple[str, ...] = ()

    @property
    def resource(self) -> str:
        return self.plural or self.kind.lower() + "s"


@dataclass(slots=True)  # built per review: frozen would triple its cost
class PodTemplate:
    """One pod template found in an object.

    ``path`` points at the object holding ``metadata`` and ``spec`` (for a Pod: the root),
    or at the pod spec itself when ``pod_spec`` is set.
    """

    path: Path
    template: Mapping[str, Any]
    replicas: int | None
    pod_spec: bool = False
    singles: tuple[str, ...] = ()
    # The pods an autoscaler may make of it when a field declares more than ``replicas``
    # (``TemplateLocation.most``), and that field's path, for the message.
    most: int | None = None
    most_from: str = ""

    @property
    def counted(self) -> int | None:
        """The pods counted toward the workload's GPU limits: the declared maximum when
        there is one above the replica count."""
        if self.most is not None and self.replicas is not None and self.most > self.replicas:
            return self.most
        return self.replicas

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
    group: str,
    kind: str,
    *locations: TemplateLocation,
    per_node: bool = False,
    versions: tuple[str, ...] = (),
    scale: str = "",
) -> WorkloadKind:
    return WorkloadKind(
        group=group,
        kind=kind,
        locations=locations,
        per_node=per_node,
        versions=versions,
        scale=tuple(p for p in scale.split(".") if p),
    )


# KServe v1beta1 PredictorSpec: one container under the model or a framework's name
# (``PredictorExtensionSpec`` embeds ``v1.Container``), beside an inline pod spec.
KSERVE_PREDICTORS = (
    "model",
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)


def _ray(prefix: str) -> tuple[TemplateLocation, ...]:
    # A multi-host worker group (TPU slices, multi-node GPU groups) makes numOfHosts pods
    # per replica (KubeRay ``WorkerGroupSpec.NumOfHosts``, default 1).
    return (
        _L(f"{prefix}.headGroupSpec.template"),
        _L(
            f"{prefix}.workerGroupSpecs.*.template",
            [f"{prefix}.workerGroupSpecs.*.replicas", f"{prefix}.workerGroupSpecs.*.numOfHosts"],
        ),
    )


_L = TemplateLocation.parse
POD = _kind("", "Pod", _L(""))
BUILTIN_KINDS: tuple[WorkloadKind, ...] = (
    POD,
    # ``scale``: the kinds with a scale subresource and the field it sets. Built-in kinds:
    # kubernetes pkg/registry/{apps/deployment,apps/replicaset,apps/statefulset,
    # core/replicationcontroller}/storage/storage.go, ScaleREST (``Spec.Replicas``).
    _kind("apps", "Deployment", _L("spec.template", ["spec.replicas"]), scale="spec.replicas"),
    _kind("apps", "ReplicaSet", _L("spec.template", ["spec.replicas"]), scale="spec.replicas"),
    _kind("apps", "StatefulSet", _L("spec.template", ["spec.replicas"]), scale="spec.replicas"),
    _kind("apps", "DaemonSet", _L("spec.template"), per_node=True),
    _kind(
        "",
        "ReplicationController",
        _L("spec.template", ["spec.replicas"]),
        scale="spec.replicas",
    ),
    _kind("batch", "Job", _L("spec.template", ["spec.parallelism"])),
    _kind(
        "batch",
        "CronJob",
        _L("spec.jobTemplate.spec.template", ["spec.jobTemplate.spec.parallelism"]),
    ),
    # Custom resources declare their scale subresource in their CRD (``subresources.scale.
    # specReplicasPath``): kubeflow/training-operator v1.9.0 manifests/base/crds
    # kubeflow.org_pytorchjobs.yaml and kubeflow.org_paddlejobs.yaml (the Worker replicas;
    # TFJob, MPIJob and XGBoostJob have none), kubernetes-sigs/lws config/crd/bases
    # leaderworkerset.x-k8s.io_leaderworkersets.yaml (``.spec.replicas``, the groups); KubeRay,
    # Volcano, JobSet and KServe CRDs declare only ``status``.
    _kind(
        "kubeflow.org",
        "PyTorchJob",
        # An elastic job's HPA (training-operator pkg/controller.v1/pytorch hpa.go) scales
        # the Worker replicas up to ``elasticPolicy.maxReplicas``.
        _L(
            "spec.pytorchReplicaSpecs.*.template",
            ["spec.pytorchReplicaSpecs.*.replicas"],
            most="spec.elasticPolicy.maxReplicas",
            most_of="Worker",
        ),
        scale="spec.pytorchReplicaSpecs.Worker.replicas",
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
    # mpi-operator v1alpha1: one worker template and a replica count (``MPIJobSpec``).
    _kind(
        "kubeflow.org",
        "MPIJob",
        _L("spec.template", ["spec.replicas"]),
        versions=("v1alpha1",),
    ),
    _kind(
        "kubeflow.org",
        "PaddleJob",
        _L("spec.paddleReplicaSpecs.*.template", ["spec.paddleReplicaSpecs.*.replicas"]),
        scale="spec.paddleReplicaSpecs.Worker.replicas",
    ),
    _kind(
        "kubeflow.org",
        "XGBoostJob",
        _L("spec.xgbReplicaSpecs.*.template", ["spec.xgbReplicaSpecs.*.replicas"]),
    ),
    _kind("ray.io", "RayCluster", *_ray("spec")),
    _kind("ray.io", "RayJob", *_ray("spec.rayClusterSpec"), _L("spec.submitterPodTemplate")),
    _kind("ray.io", "RayService", *_ray("spec.rayClusterConfig")),
    _kind(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        _L("spec.leaderWorkerTemplate.leaderTemplate", ["spec.replicas"]),
        # A group holds `size` pods, its leader included: the workers are size - 1 when the
        # leader has its own template, else the worker template makes the leader too.
        _L(
            "spec.leaderWorkerTemplate.workerTemplate",
            ["spec.replicas", "spec.leaderWorkerTemplate.size"],
            one_less_if="spec.leaderWorkerTemplate.leaderTemplate",
        ),
        scale="spec.replicas",
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
        # ``maxReplicas``: what its autoscaler (Knative's, or the HPA of a raw deployment)
        # may scale each component to (kserve pkg/apis/serving/v1beta1/component.go
        # ``ComponentExtensionSpec``; 0, unset, is no maximum and counts nothing).
        _L(
            "spec.predictor",
            pod_spec=True,
            singles=KSERVE_PREDICTORS,
            most="spec.predictor.maxReplicas",
        ),
        _L("spec.transformer", pod_spec=True, most="spec.transformer.maxReplicas"),
        _L(
            "spec.explainer",
            pod_spec=True,
            singles=("art",),
            most="spec.explainer.maxReplicas",
        ),
    ),
)


class KindTable:
    """Lookup of workload kinds by API group and kind (versions share a layout)."""

    def __init__(self, kinds: Iterable[WorkloadKind] = BUILTIN_KINDS) -> None:
        self._kinds: dict[tuple[str, str], WorkloadKind] = {}
        # Layouts of one API version that differ from the kind's usual one.
        self._versions: dict[tuple[str, str, str], WorkloadKind] = {}
        for kind in kinds:
            self._add(kind)

    def _add(self, kind: WorkloadKind) -> None:
        if kind.versions:
            for version in kind.versions:
                self._versions[(kind.group, version, kind.kind)] = kind
        else:
            self._kinds[(kind.group, kind.kind)] = kind

    def extended(self, kinds: Iterable[WorkloadKind]) -> KindTable:
        table = KindTable(self)
        for kind in kinds:
            table._add(kind)
        return table

    def lookup(self, api_version: str, kind: str) -> WorkloadKind | None:
        group, _, version = api_version.rpartition("/")
        if self._versions:
            special = self._versions.get((group, version, kind))
            if special is not None:
                return special
        return self._kinds.get((group, kind))

    def knows(self, group: str, kind: str) -> bool:
        return (group, kind) in self._kinds

    def by_resource(self, group: str, resource: str) -> WorkloadKind | None:
        """The kind served as ``resource`` in ``group`` (an admission request's
        ``resource``: a ``scale`` subresource's request names its parent only so)."""
        for kind in self:
            if kind.group == group and kind.resource == resource:
                return kind
        return None

    def __iter__(self) -> Iterator[WorkloadKind]:
        yield from self._kinds.values()
        yield from self._versions.values()

    def templates(self, obj: Mapping[str, Any]) -> list[PodTemplate] | None:
        """Every pod template of ``obj``; ``None`` when the kind holds none we know of."""
        kind = self.lookup(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if kind is None:
            return None
        if kind is POD:  # the common case, on every pod create: built by position
            return [PodTemplate((), obj, None)]
        found: list[PodTemplate] = []
        for location in kind.locations:
            for path, template in _walk(obj, location.path, ()):
                if not isinstance(template, dict):
                    continue
                replicas = None if kind.per_node else _replicas(obj, location, path)
                found.append(
                    PodTemplate(
                        path=path,
                        template=template,
                        replicas=replicas,
                        pod_spec=location.pod_spec,
                        singles=location.singles,
                    )
                )
                if location.most and (not location.most_of or location.most_of in path):
                    most = _at(obj, location.most)
                    if isinstance(most, int) and not isinstance(most, bool) and most >= 0:
                        found[-1].most = most
                        found[-1].most_from = ".".join(location.most[1:])
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


# Public for webhook.engine.kube.shape, which checks the replica fields found the same way.
walk = _walk


def _replicas(obj: Mapping[str, Any], location: TemplateLocation, path: Path) -> int:
    """Product of the replica fields, wildcards bound as in ``path``; a missing field is 1."""
    bindings = [path[i] for i, part in enumerate(location.path) if part == "*"]
    total = 1
    one_less = bool(location.one_less_if) and _exists(obj, location.one_less_if)
    for number, pattern in enumerate(location.replicas, 1):
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
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            value = 1  # missing or ill-typed: the field's usual default
        if one_less and number == len(location.replicas):
            value = max(value - 1, 0)
        total *= value
    return total


def _exists(obj: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    return _at(obj, path) is not None


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> object:
    value: object = obj
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
