"""Objects the API server would refuse as written, found before the policy judges them.

``kubectl apply`` decodes an object into its Go type first: a string where a list or a
number belongs, or no ``kind``, stops it there ("cannot unmarshal string into Go struct
field PodSpec.spec.containers of type []v1.Container"). The webhook never sees such an
object from the API server, but ``gpu-webhook check`` reads files, and the policy reads
malformed parts as absent: without this, ``containers: "oops"`` would pass as a pod with
no GPU. Only the fields the policy reads are checked here; full validation is the API
server's (``kubectl apply --dry-run=server``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from webhook.engine.kube.workloads import KindTable, Path, PodTemplate, walk

CONTAINER_LISTS = ("initContainers", "containers")
RESOURCE_MAPS = ("limits", "requests")


def shape_problems(obj: Mapping[str, Any], kinds: KindTable) -> list[str]:
    """What makes ``obj`` undecodable by the API server, as ``field: what is wrong``."""
    problems = list(_identity_problems(obj))
    if problems:
        return problems
    templates = kinds.templates(obj)
    if templates is None:
        return []
    kind = kinds.lookup(str(obj["apiVersion"]), str(obj["kind"]))
    if kind is not None:
        for location in kind.locations:
            for pattern in location.replicas:
                for path, value in walk(obj, pattern, ()):
                    if value is not None and not _is_int(value):
                        problems.append(f"{_dotted(path)}: {_shown(value)} is not a whole number")
    for template in templates:
        problems.extend(_template_problems(template))
    return problems


def _identity_problems(obj: Mapping[str, Any]) -> Iterator[str]:
    for field in ("apiVersion", "kind"):
        value = obj.get(field)
        if value is None or value == "":
            yield f"{field}: missing; every object names its apiVersion and kind"
        elif not isinstance(value, str):
            yield f"{field}: {_shown(value)} is not a string"
    meta = obj.get("metadata")
    if meta is None:
        yield "metadata: missing; every object has metadata.name"
    elif not isinstance(meta, Mapping):
        yield f"metadata: {_shown(meta)} is not an object"
    elif not meta.get("name") and not meta.get("generateName"):
        yield "metadata.name: missing"
    elif "namespace" in meta and not isinstance(meta["namespace"], str):
        yield f"metadata.namespace: {_shown(meta['namespace'])} is not a string"


def _template_problems(template: PodTemplate) -> Iterator[str]:
    if not template.pod_spec and "spec" in template.template:
        spec = template.template["spec"]
        if not isinstance(spec, Mapping):
            yield f"{_dotted(template.spec_path)}: {_shown(spec)} is not an object"
            return
    spec = template.spec
    at = template.spec_path
    for section in CONTAINER_LISTS:
        containers = spec.get(section)
        if containers is None:
            continue
        if not isinstance(containers, list):
            yield f"{_dotted((*at, section))}: {_shown(containers)} is not a list of containers"
            continue
        for index, container in enumerate(containers):
            where = (*at, section, index)
            if not isinstance(container, Mapping):
                yield f"{_dotted(where)}: {_shown(container)} is not a container object"
                continue
            yield from _resources_problems(container, where)


def _resources_problems(container: Mapping[str, Any], where: Path) -> Iterator[str]:
    resources = container.get("resources")
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        yield f"{_dotted((*where, 'resources'))}: {_shown(resources)} is not an object"
        return
    for name in RESOURCE_MAPS:
        amounts = resources.get(name)
        if amounts is not None and not isinstance(amounts, Mapping):
            yield (
                f"{_dotted((*where, 'resources', name))}: {_shown(amounts)} is not a map of "
                "resource names to quantities"
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(the object)"


def _shown(value: object) -> str:
    kind = (
        "a list" if isinstance(value, list) else "an object" if isinstance(value, Mapping) else ""
    )
    if kind:
        return kind
    return json.dumps(value) if isinstance(value, str | int | float | bool) else str(value)
