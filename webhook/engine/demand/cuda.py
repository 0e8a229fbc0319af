"""What CUDA a container needs of the node's driver, and whether a node class's driver has it.

A container that needs a newer CUDA than the driver supports does not start: the NVIDIA
container toolkit checks the image's ``NVIDIA_REQUIRE_*`` variables before it starts it
("unsatisfied condition: cuda>=12.4"), and a framework without that check fails with "CUDA
driver version is insufficient for CUDA runtime version". The need is read, in order, from

1. the container's own ``NVIDIA_REQUIRE_CUDA`` (and other ``NVIDIA_REQUIRE_*``) variables,
   which replace the image's; judged exactly as the toolkit judges them
   (nvidia-container-toolkit ``internal/requirements/constraints/factory.go``: terms
   separated by spaces are ORed, the conditions of a term separated by commas are ANDed,
   properties ``cuda``, ``driver``, ``arch``, ``brand``; an unknown property is skipped;
   versions compare as semantic versions, missing parts zero). ``NVIDIA_DISABLE_REQUIRE``
   set true skips them (``CUDA.HasDisableRequire`` in ``internal/config/image/cuda_image.go``);
2. a rule file's mapping of image patterns to CUDA versions (private images);
3. the shipped table of public images (``webhook/data/cuda-images.yaml``): tags that say
   the version (``nvidia/cuda:12.4.1-...``) and NGC framework containers by release.

An image's CUDA X.Y runs on a driver whose CUDA is X.Y or newer; on an older driver of the
same major release by minor version compatibility, if the driver is at least that major's
minimum (CUDA 11.x: 450.80.02, 12.x: 525.60.13, 13.x: 580; docs.nvidia.com/deploy/
cuda-compatibility, "Minor Version Compatibility"); on a driver of an older major release
only by forward compatibility (the image's cuda-compat package, data center GPUs, and the
driver branches the image or its release notes list). The webhook cannot see the GPU's
brand or the image's own variables, so "possible" counts as compatible: only a node that
cannot run the container in any of these ways is too old.

The node's side is what GPU feature discovery labels (NVIDIA/k8s-device-plugin
``internal/lm/nvml.go``, ``newVersionLabeler``): ``nvidia.com/cuda.runtime-version.major``
and ``.minor`` (deprecated ``nvidia.com/cuda.runtime.*``) are the CUDA version the driver
supports (``nvmlSystemGetCudaDriverVersion``), ``nvidia.com/cuda.driver-version.*``
(deprecated ``nvidia.com/cuda.driver.*``) the driver's own version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from webhook.engine.resources.cudatable import (
    CudaImages,
    ImageCUDA,
    Version,
    cmp,
    parse_version,
    text,
)

Verdict = Literal["ok", "possible", "too-old", "unknown"]
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
# Tegra only: the toolkit leaves out every name with this prefix (``CUDA.GetRequirements``
# in internal/config/image/cuda_image.go).
REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
# The least driver of each CUDA major release that minor version compatibility covers.
MAJOR_MINIMUM: Mapping[int, Version] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580,)}
_OPERATORS = ("!=", "<=", ">=", "==", "=", "<", ">")
_PROPERTIES = ("cuda", "driver", "arch", "brand")


# --- the node's side ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """A node class's driver, from its GPU feature discovery labels."""

    cuda: Version | None = None  # the CUDA version the driver supports
    driver: Version | None = None  # the driver's version
    driver_text: str = ""  # as labelled ("550.90.07": revisions keep their zeros)

    @classmethod
    def of(cls, labels: Mapping[str, str]) -> DriverFacts:
        cuda = _pair(labels, "nvidia.com/cuda.runtime-version") or _pair(
            labels, "nvidia.com/cuda.runtime"
        )
        full = labels.get("nvidia.com/cuda.driver-version.full", "")
        driver = parse_version(full)
        if driver is None:
            full = ""
            for prefix, rev in (
                ("nvidia.com/cuda.driver-version", "revision"),
                ("nvidia.com/cuda.driver", "rev"),
            ):
                major = parse_version(labels.get(f"{prefix}.major"))
                if major is not None:
                    minor = parse_version(labels.get(f"{prefix}.minor")) or (0,)
                    revision = parse_version(labels.get(f"{prefix}.{rev}")) or ()
                    driver = major + minor + revision
                    parts = [labels.get(f"{prefix}.{p}", "") for p in ("major", "minor", rev)]
                    full = ".".join(p for p in parts if p)
                    break
        return cls(cuda=cuda, driver=driver, driver_text=full)

    @property
    def known(self) -> bool:
        return self.cuda is not None or self.driver is not None

    def describe(self) -> str:
        shown = self.driver_text or (text(self.driver) if self.driver else "?")
        driver = f"driver {shown}"
        return f"{driver} (CUDA {text(self.cuda)})" if self.cuda else driver


def _pair(labels: Mapping[str, str], prefix: str) -> Version | None:
    major = parse_version(labels.get(f"{prefix}.major"))
    minor = parse_version(labels.get(f"{prefix}.minor"))
    if major is None or len(major) != 1:
        return None
    return major + (minor[:1] if minor else (0,))


# --- the container's side -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    prop: str
    op: str
    value: str


Requirement = tuple[tuple[Condition, ...], ...]  # terms (ORed) of conditions (ANDed)


def parse_requirement(raw: str) -> Requirement:
    """One ``NVIDIA_REQUIRE_*`` value as the toolkit reads it; unknown properties and
    unparsable conditions are left out (the toolkit skips or rejects them; either way the
    webhook does not judge them)."""
    terms = []
    for term in raw.split(" "):
        conditions = []
        for factor in term.split(","):
            condition = _condition(factor.strip())
            if condition is not None:
                conditions.append(condition)
        if conditions:
            terms.append(tuple(conditions))
    return tuple(terms)


def _condition(factor: str) -> Condition | None:
    end = next((i for i, c in enumerate(factor) if c in "<>=!"), -1)
    if end <= 0:
        return None
    prop, rest = factor[:end], factor[end:]
    if prop not in _PROPERTIES:
        return None
    op = next((o for o in _OPERATORS if rest.startswith(o)), "")
    value = rest.removeprefix(op)
    if prop in ("cuda", "driver") and parse_version(value) is None:
        return None
    return Condition(prop, op, value)


def _holds(condition: Condition, facts: DriverFacts) -> bool | None:
    have = facts.cuda if condition.prop == "cuda" else facts.driver
    if condition.prop not in ("cuda", "driver") or have is None:
        return None  # brand and arch are not labelled: unknown
    want = parse_version(condition.value)
    if want is None:
        return None
    order = cmp(have, want)
    return {
        "<": order < 0,
        "<=": order <= 0,
        ">": order > 0,
        ">=": order >= 0,
        "!=": order != 0,
    }.get(condition.op, order == 0)


def _requirement_holds(requirement: Requirement, facts: DriverFacts) -> bool | None:
    """OR over the terms, AND within one; None where an unknown property decides."""
    if not requirement:
        return True
    seen_unknown = False
    for term in requirement:
        values = [_holds(c, facts) for c in term]
        if False in values:
            continue
        if None in values:
            seen_unknown = True
            continue
        return True
    return None if seen_unknown else False


@dataclass(frozen=True, slots=True)
class CudaNeed:
    """What one container needs of the driver."""

    container: str
    image: str
    requirements: tuple[tuple[str, Requirement], ...] = ()  # (variable=value, parsed)
    built_on: ImageCUDA | None = None

    @property
    def wanted(self) -> str:
        if self.requirements:
            return "; ".join(raw for raw, _ in self.requirements)
        assert self.built_on is not None
        return f"CUDA {text(self.built_on.cuda)}"

    def verdict(self, facts: DriverFacts) -> Verdict:
        if not facts.known:
            return "unknown"
        if self.requirements:
            result: bool | None = True
            for _, requirement in self.requirements:
                holds = _requirement_holds(requirement, facts)
                if holds is False:
                    return "too-old"
                if holds is None:
                    result = None
            return "ok" if result else "unknown"
        if self.built_on is None:
            return "unknown"
        return _runs_on(self.built_on, facts)


def _runs_on(image: ImageCUDA, facts: DriverFacts) -> Verdict:
    need = image.cuda
    if facts.cuda is None:
        return "unknown"
    if cmp(facts.cuda, need[:2]) >= 0:
        return "ok"
    if facts.driver is None:
        return "unknown"
    minimum = MAJOR_MINIMUM.get(need[0])
    if facts.cuda[0] == need[0]:
        # Minor version compatibility within a major release (CUDA 11 onwards).
        if minimum is None:
            return "unknown"
        return "possible" if cmp(facts.driver, minimum) >= 0 else "too-old"
    if facts.cuda[0] > need[0]:
        return "ok"
    if image.forward is None:
        return "unknown"
    branch = facts.driver[0]
    for least in image.forward:
        if least[0] == branch and cmp(facts.driver, least) >= 0:
            return "possible"  # forward compatibility on data center GPUs
    return "too-old"


def container_needs(
    containers: Sequence[tuple[str, Mapping[str, Any]]], images: CudaImages
) -> list[CudaNeed]:
    """The needs of the GPU containers (name, body) that say or imply one."""
    needs = []
    for name, body in containers:
        need = _need(name, body, images)
        if isinstance(need, CudaNeed):
            needs.append(need)
    return needs


def cuda_unknowns(
    containers: Sequence[tuple[str, Mapping[str, Any]]], images: CudaImages
) -> list[tuple[str, CudaNeed]]:
    """Containers whose image the tables know but whose need cannot be read from the pod
    (its variables may come from a ConfigMap or Secret): why, and what the image alone
    would need. Said, never judged."""
    out = []
    for name, body in containers:
        if not body.get("envFrom") and not _any_value_from(body.get("env")):
            continue  # every variable is literal: nothing hidden (the common case, cheaply)
        found = _need(name, body, images)
        if isinstance(found, tuple):
            out.append(found)
    return out


def _any_value_from(raw: object) -> bool:
    return isinstance(raw, list) and any(isinstance(i, dict) and "valueFrom" in i for i in raw)


def _need(
    name: str, body: Mapping[str, Any], images: CudaImages
) -> CudaNeed | tuple[str, CudaNeed] | None:
    """The container's need; why it cannot be known (with the image's own need); or None
    when it has none the webhook can see."""
    image = body.get("image")
    image = image if isinstance(image, str) else ""
    env, opaque = _literal_env(body.get("env"))
    hidden = sorted(n for n in opaque if n.startswith(REQUIRE_PREFIX) or n == DISABLE_REQUIRE)
    if hidden:
        # Set from a ConfigMap, Secret or field (valueFrom): the webhook cannot read it.
        verb = "is" if len(hidden) == 1 else "are"
        return _unknowable(name, image, f"{' and '.join(hidden)} {verb} set by valueFrom", images)
    from_sources = _env_from_sources(body.get("envFrom"))
    if from_sources and DISABLE_REQUIRE not in env:
        # envFrom may set NVIDIA_DISABLE_REQUIRE: no requirement of any kind is known.
        set_here = any(k.startswith(REQUIRE_PREFIX) for k in env)
        variable = DISABLE_REQUIRE if set_here else f"{REQUIRE_PREFIX}CUDA or {DISABLE_REQUIRE}"
        return _unknowable(name, image, _may_set(variable, from_sources), images)
    disabled = _true(env.get(DISABLE_REQUIRE))
    requirements: tuple[tuple[str, Requirement], ...] = ()
    if not disabled:
        requirements = tuple(
            (f"{key}={value}", parse_requirement(value))
            for key, value in sorted(env.items())
            if key.startswith(REQUIRE_PREFIX)
            and not key.startswith(REQUIRE_JETPACK)
            and value.strip()
        )
    if requirements:
        # An explicit variable wins over envFrom (env is applied after it, below).
        return CudaNeed(name, image, requirements=requirements)
    if from_sources and not disabled:
        # envFrom may set NVIDIA_REQUIRE_CUDA, replacing the image's own: unknown.
        return _unknowable(name, image, _may_set(REQUIRE_PREFIX + "CUDA", from_sources), images)
    built_on = images.lookup(image) if image else None
    return CudaNeed(name, image, built_on=built_on) if built_on is not None else None


def _may_set(variable: str, sources: Sequence[str]) -> str:
    return f"{variable} may be set by envFrom ({', '.join(sources)})"


def _unknowable(name: str, image: str, why: str, images: CudaImages) -> tuple[str, CudaNeed] | None:
    built_on = images.lookup(image) if image else None
    if built_on is None:
        return None  # nothing would have been judged: nothing to say
    sentence = (
        f'container "{name}": its CUDA need was not checked: {why}, which the webhook does not read'
    )
    return sentence, CudaNeed(name, image, built_on=built_on)


# The kubelet builds a container's environment from envFrom first (each key behind its
# prefix), then from env, whose entries replace any of the same name
# (pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables). An envFrom source can set a
# requirement variable only if its prefix can begin one.
_REQUIRE_NAMES = (REQUIRE_PREFIX, DISABLE_REQUIRE)


def _env_from_sources(raw: object) -> list[str]:
    """The envFrom ConfigMaps and Secrets that may set a requirement variable."""
    sources: list[str] = []
    if not isinstance(raw, list):
        return sources
    for item in raw:
        if not isinstance(item, dict):
            continue
        prefix = item.get("prefix")
        prefix = prefix if isinstance(prefix, str) else ""
        if not any(n.startswith(prefix) or prefix.startswith(n) for n in _REQUIRE_NAMES):
            continue
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = item.get(key)
            if isinstance(ref, dict):
                sources.append(f"{kind} {ref.get('name', '')}".strip())
    return sources


def _literal_env(raw: object) -> tuple[dict[str, str], set[str]]:
    """Variables with a literal value, and the names of those set from elsewhere (a
    ConfigMap, Secret or field), whose value the webhook cannot know. The last definition
    of a name wins, as the kubelet applies them; ``envFrom`` may set any name."""
    out: dict[str, str] = {}
    opaque: set[str] = set()
    if not isinstance(raw, list):
        return out, opaque
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            value = item.get("value")
            if isinstance(value, str) and "valueFrom" not in item:
                out[item["name"]] = value
                opaque.discard(item["name"])
            else:
                out.pop(item["name"], None)
                opaque.add(item["name"])
    return out, opaque


def _true(value: str | None) -> bool:
    # Go's strconv.ParseBool, as HasDisableRequire reads it.
    return value in ("1", "t", "T", "TRUE", "true", "True")
