"""The ``cudaDriver`` check and the ``cudaAffinity`` mutation: GPU containers only on nodes
whose driver can run their CUDA (``webhook.engine.demand.cuda`` says which can).

Among the node classes a pod can land on and fit, those whose driver is known to be too
old are kept out by required node affinity (``NotIn`` the driver's major version, which
also admits nodes without the label: a node the webhook knows nothing of stays open); when
every class is too old the pod is denied, naming the newest driver there is. Nothing known
(no labels, an image the tables do not know): nothing said.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.engine.demand.cuda import CudaNeed, DriverFacts, container_needs, cuda_unknowns
from webhook.engine.demand.gpus import PodGPUs
from webhook.engine.enforcement.mutators import add_required_affinity
from webhook.engine.kube.patch import Editor
from webhook.engine.kube.workloads import Path
from webhook.engine.policy.decision import Finding, action_of
from webhook.engine.policy.ruleset import Settings
from webhook.engine.resources.cudatable import parse_version
from webhook.engine.resources.devices import DeviceInventory
from webhook.engine.resources.inventory import FitAnswer, Shape

# GPU feature discovery sets both, the first deprecated (NVIDIA/k8s-device-plugin
# internal/lm/nvml.go): a node labelled by either version is kept out.
DRIVER_MAJOR_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver-version.major")


# Driver facts per node class, read once per class (a snapshot's shapes live as long as it
# does): held with the shape, so that a freed shape's reused id is never taken for it.
_FACTS: dict[int, tuple[Shape, DriverFacts]] = {}


def _facts(shape: Shape) -> DriverFacts:
    hit = _FACTS.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    if len(_FACTS) >= 4096:
        _FACTS.clear()
    facts = DriverFacts.of(shape.labels)
    _FACTS[id(shape)] = (shape, facts)
    return facts


# Whether some class a fit answer holds has a known driver, held with the answer (as _SORTED).
_KNOWN: dict[int, tuple[FitAnswer, bool]] = {}


def drivers_known(fit: FitAnswer) -> bool:
    """Some fitting class's driver is labelled: without one no need can be judged (every
    verdict is "unknown"), so the pod's needs are not worked out at all."""
    hit = _KNOWN.get(id(fit))
    if hit is not None and hit[0] is fit:
        return hit[1]
    known = any(_facts(shape).known for shape in fit.fitting)
    if len(_KNOWN) >= 4096:
        _KNOWN.clear()
    _KNOWN[id(fit)] = (fit, known)
    return known


def gpu_needs(
    pod: PodGPUs, settings: Settings, holders: frozenset[Path] = frozenset()
) -> list[CudaNeed]:
    """What the pod's GPU containers (and those holding GPU claims) need of the driver."""
    containers = [(c.name, c.body) for c in pod.containers if c.gpu_count > 0 or c.path in holders]
    return container_needs(containers, settings.cuda_images) if containers else []


def cuda_notices(pod: PodGPUs, settings: Settings, fit: FitAnswer) -> list[str]:
    """GPU containers whose need envFrom may change (``demand.cuda.cuda_unknowns``) and whose
    image alone would be too old for some node they fit: not judged, but said, so that
    ``explain`` shows why no affinity or denial came."""
    containers = [(c.name, c.body) for c in pod.containers if c.gpu_count > 0]
    if not containers or not fit.fitting:
        return []
    return [
        why
        for why, need in cuda_unknowns(containers, settings.cuda_images)
        if any(need.verdict(_facts(shape)) == "too-old" for shape in fit.fitting)
    ]


def cuda_findings(
    editor: Editor,
    spec_path: Path,
    *,
    needs: Sequence[CudaNeed],
    fit: FitAnswer,
    settings: Settings,
    exempt: frozenset[str],
    where: str,
) -> list[Finding]:
    """Keep the pod off classes too old for it, or deny it when no class is new enough."""
    if not needs or "cudaDriver" in exempt or not fit.fitting:
        return []
    too_old, usable, blocked_by, facts = _sorted(tuple(needs), fit)
    if not too_old:
        return []
    if not usable:
        return [_denial(too_old, blocked_by, facts, settings, where)]
    if "cudaAffinity" not in exempt:
        _keep_off(editor, spec_path, too_old, usable)
    return []


_Sorted = tuple[list[Shape], list[Shape], dict[int, CudaNeed], dict[int, DriverFacts]]
# The classes a (needs, fit) pair sorts into: pods of one workload ask the same, and a fit
# answer lives as long as its snapshot. Held with the fit, for the same reason as _FACTS.
_SORTED: dict[tuple[tuple[CudaNeed, ...], int], tuple[FitAnswer, _Sorted]] = {}


def _sorted(needs: tuple[CudaNeed, ...], fit: FitAnswer) -> _Sorted:
    """The fitting classes too old for some need (with that need), and the others."""
    key = (needs, id(fit))
    hit = _SORTED.get(key)
    if hit is not None and hit[0] is fit:
        return hit[1]
    facts = {id(shape): _facts(shape) for shape in fit.fitting}
    too_old: list[Shape] = []
    usable: list[Shape] = []
    blocked_by: dict[int, CudaNeed] = {}
    for shape in fit.fitting:
        for need in needs:
            if need.verdict(facts[id(shape)]) == "too-old":
                blocked_by[id(shape)] = need
                too_old.append(shape)
                break
        else:
            usable.append(shape)
    if len(_SORTED) >= 4096:
        _SORTED.clear()
    answer = (too_old, usable, blocked_by, facts)
    _SORTED[key] = (fit, answer)
    return answer


def _keep_off(editor: Editor, spec_path: Path, too_old: list[Shape], usable: list[Shape]) -> None:
    """Required affinity ``NotIn`` the too-old drivers' major versions, leaving out a major
    that a usable class shares (a condition on a finer version would be needed there)."""
    majors: dict[str, set[str]] = {key: set() for key in DRIVER_MAJOR_LABELS}
    for key in DRIVER_MAJOR_LABELS:
        open_ = {s.labels.get(key) for s in usable}
        for shape in too_old:
            value = shape.labels.get(key)
            if value is not None and value not in open_:
                majors[key].add(value)
    wanted: list[Mapping[str, Any]] = [
        {"key": key, "operator": "NotIn", "values": sorted(values)}
        for key, values in majors.items()
        if values
    ]
    if wanted:
        add_required_affinity(editor, spec_path, wanted)


def _denial(
    too_old: list[Shape],
    blocked_by: Mapping[int, CudaNeed],
    facts: Mapping[int, DriverFacts],
    settings: Settings,
    where: str,
) -> Finding:
    def newness(shape: Shape) -> tuple[int, ...]:
        known = facts[id(shape)]
        return (known.cuda or ()) + (0,) + (known.driver or ())

    newest = max(too_old, key=newness)
    need = blocked_by[id(newest)]
    have = facts[id(newest)]
    source = (
        f" ({need.built_on.source})" if need.built_on is not None and need.built_on.source else ""
    )
    image = f" {need.image}" if need.image else ""
    message = (
        f'container "{need.container}" (image{image}) needs {need.wanted}{source}, but '
        f"no node it can use has a driver that supports it: the newest there is "
        f"{have.describe()} on {newest.example.name}. It would fail to start "
        '("unsatisfied condition" or "CUDA driver version is insufficient"). Use an image '
        "built for an older CUDA, or upgrade the nodes' driver."
    )
    return Finding(
        "builtin",
        "cudaDriver",
        action_of(settings.actions.get("cudaDriver", "deny")),
        message,
        f'container "{need.container}": {need.wanted}, newest driver {have.describe()}',
        where,
    )


# NVIDIA's DRA driver (k8s-dra-driver-gpu) publishes each GPU's and MIG device's driver as
# attributes of domain gpu.nvidia.com: ``driverVersion`` and ``cudaDriverVersion`` (the CUDA
# version the driver supports), both semantic versions (cmd/gpu-kubelet-plugin
# deviceinfo.go: ``AttributeDriverVersion``, ``AttributeCUDADriverVersion``). Its classes
# gpu.nvidia.com and mig.nvidia.com select only its own devices.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
NVIDIA_DRA_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com"})


def dra_driver_facts(devices: DeviceInventory) -> list[tuple[str, DriverFacts]]:
    """Every NVIDIA DRA device's driver, by the node its slice serves."""
    found = []
    for piece in devices.slices:
        if piece.driver != NVIDIA_DRA_DRIVER:
            continue
        for device in piece.devices:
            attrs = {(d, n): v for d, n, v in device.attributes}
            cuda = parse_version(_text(attrs.get((NVIDIA_DRA_DRIVER, "cudaDriverVersion"))))
            driver = _text(attrs.get((NVIDIA_DRA_DRIVER, "driverVersion")))
            found.append(
                (
                    piece.node_name or piece.name,
                    DriverFacts(
                        cuda=cuda[:2] if cuda else None,
                        driver=parse_version(driver),
                        driver_text=driver,
                    ),
                )
            )
    return found


def _text(value: object) -> str:
    text = getattr(value, "text", value)
    return text if isinstance(text, str) else ""


def dra_cuda_findings(
    *,
    needs: Sequence[CudaNeed],
    classes: Sequence[str],
    devices: DeviceInventory | None,
    settings: Settings,
    exempt: frozenset[str],
    where: str,
) -> list[Finding]:
    """A pod whose GPUs come from NVIDIA's DRA classes, when every NVIDIA DRA device of the
    cluster has a driver too old for it: no node can start it. Otherwise nothing (the
    devices a claim gets are chosen at allocation; node affinity cannot steer them)."""
    if (
        not needs
        or "cudaDriver" in exempt
        or devices is None
        or not devices.complete
        or not classes
        or not set(classes) <= NVIDIA_DRA_CLASSES
    ):
        return []
    facts = dra_driver_facts(devices)
    if not facts:
        return []
    for _, known in facts:
        if all(need.verdict(known) != "too-old" for need in needs):
            return []  # some device may run it
    node, newest = max(facts, key=lambda f: (f[1].cuda or ()) + (0,) + (f[1].driver or ()))
    need = next(n for n in needs if n.verdict(newest) == "too-old")
    message = (
        f'container "{need.container}" needs {need.wanted}, but every GPU of the NVIDIA DRA '
        f"driver has an older driver: the newest is {newest.describe()} (cudaDriverVersion "
        f"on {node}). It would fail to start. Use an image built for an older CUDA, or "
        "upgrade the nodes' driver."
    )
    return [
        Finding(
            "builtin",
            "cudaDriver",
            action_of(settings.actions.get("cudaDriver", "deny")),
            message,
            f'container "{need.container}": {need.wanted}, newest DRA driver {newest.describe()}',
            where,
        )
    ]
