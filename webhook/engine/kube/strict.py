"""Objects the API server refuses under strict field validation, field by field.

``kubectl apply`` asks for ``fieldValidation=Strict`` by default (kubectl 1.27+, KEP-2885):
the API server then decodes the body into its Go type with ``sigs.k8s.io/json``'s strict
mode and refuses an unknown field (``unknown field "spec.containers[0].resource"``: a
typo the policy would otherwise read as "no resources", and a GPU request that
silently disappears) or a value of the wrong JSON type (``cannot unmarshal number into Go
struct field EnvVar.value of type string``). Then API validation refuses a container
resource name that is neither standard nor domain-prefixed
(kubernetes ``pkg/apis/core/validation/validation.go``, ``validateContainerResourceName``).

The schema is plain data: one Kubernetes version's OpenAPI definitions of the built-in
kinds the webhook reads, cut to what decoding needs (``scripts/gen-kubeschemas``). Only
what Kubernetes surely refuses is said here; what it may accept (a missing field the
server defaults, a value it converts) is left to the API server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

FieldPath = tuple[str | int, ...]
MAX_PROBLEMS = 20
# sigs.k8s.io/json decodes a JSON number into an integer field only when it is one; a YAML
# 1.0 reaches the API server as 1 (kubectl's YAML-to-JSON goes through float64).
_INT_RANGE = (-(2**63), 2**63 - 1)
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
# k8s.io/apimachinery/pkg/util/validation: IsQualifiedName.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class KubeSchema:
    """One Kubernetes version's decoding schema: root definition per ``apiVersion/kind``,
    and the definitions by name."""

    version: str
    kinds: Mapping[str, str]
    definitions: Mapping[str, Mapping[str, Any]]

    def root(self, obj: Mapping[str, Any]) -> str | None:
        return self.kinds.get(f"{obj.get('apiVersion')}/{obj.get('kind')}")


@dataclass(frozen=True, slots=True)
class Refusal:
    path: FieldPath
    message: str
    # What refuses it: decoding ("unknownField", "type") or API validation ("resourceName").
    rule: str

    @property
    def dotted(self) -> str:
        return dotted(self.path)

    def __str__(self) -> str:
        return f"{self.dotted}: {self.message}"


def strict_problems(
    obj: Mapping[str, Any], schema: KubeSchema, *, limit: int = MAX_PROBLEMS
) -> tuple[list[Refusal], int]:
    """What the API server would refuse in ``obj`` (at most ``limit``), and how many more.
    An object of a kind the schema does not hold has none: it is not judged here."""
    root = schema.root(obj)
    if root is None:
        return [], 0
    found: list[Refusal] = []
    more = 0
    for refusal in _walk(obj, {"ref": root}, (), schema):
        if len(found) < limit:
            found.append(refusal)
        else:
            more += 1
    return found, more


def _walk(
    value: Any, node: Mapping[str, Any], path: FieldPath, schema: KubeSchema
) -> Iterator[Refusal]:
    while "ref" in node:
        node = schema.definitions.get(node["ref"], {})
    if value is None:  # null decodes as the zero value everywhere
        return
    wrong = _type_problem(value, node.get("type"))
    if wrong:
        yield Refusal(path, wrong, "type")
        return
    if isinstance(value, Mapping):
        yield from _fields(value, node, path, schema)
    elif isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            yield from _walk(item, node["items"], (*path, index), schema)


def _fields(
    value: Mapping[str, Any], node: Mapping[str, Any], path: FieldPath, schema: KubeSchema
) -> Iterator[Refusal]:
    properties: Mapping[str, Any] | None = node.get("properties")
    if properties is not None:
        for key, item in value.items():
            known = properties.get(key)
            if known is not None:
                yield from _walk(item, known, (*path, key), schema)
            elif node.get("closed"):
                yield Refusal((*path, key), _unknown(str(key), properties), "unknownField")
        return
    values = node.get("values")
    if values is None:
        return
    for key, item in value.items():
        if node.get("keys") == "containerResource":
            problem = container_resource_problem(str(key))
            if problem:
                yield Refusal((*path, key), problem, "resourceName")
        yield from _walk(item, values, (*path, key), schema)


def _unknown(key: str, properties: Mapping[str, Any]) -> str:
    message = "unknown field"
    close = _close(key, list(properties))
    return f"{message}; did you mean {close}?" if close else message


def _close(key: str, names: list[str]) -> str | None:
    lowered = {name.lower(): name for name in names}
    if key.lower() in lowered:  # field names are case-sensitive in Kubernetes
        return json.dumps(lowered[key.lower()])
    import difflib  # only when a field is unknown: check's start-up stays light

    found = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
    return json.dumps(found[0]) if found else None


_WANTED = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
}


def _type_problem(value: Any, wanted: str | list[str] | None) -> str | None:
    if wanted is None:
        return None
    kinds = [wanted] if isinstance(wanted, str) else wanted
    if any(_is(value, kind) for kind in kinds):
        return None
    if "integer" in kinds and _whole(value):
        return f"{_shown(value)} is out of range for a whole number"
    want = " or ".join(_WANTED.get(kind, kind) for kind in kinds)
    return f"{_shown(value)} is {_article(value)} where Kubernetes wants {want}"


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) or kind == "boolean":
        return isinstance(value, bool) and kind == "boolean"
    if kind == "integer":
        return _whole(value) and _INT_RANGE[0] <= value <= _INT_RANGE[1]
    if kind == "number":
        return isinstance(value, int | float)
    if kind == "string":
        return isinstance(value, str)
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list)
    return True


def _whole(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _article(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _shown(value: Any) -> str:
    if isinstance(value, Mapping | list):
        return "the value"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def container_resource_problem(name: str) -> str | None:
    """Why the API server refuses ``name`` in a container's requests or limits, if it does
    (``validateContainerResourceName``: a qualified name, standard when unprefixed,
    otherwise native or an extended resource name)."""
    prefix, slash, short = name.rpartition("/")
    if not slash:
        if name in _STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-"):
            return None
        return (
            f"{_shown(name)} is not a container resource Kubernetes accepts: cpu, memory, "
            "ephemeral-storage, hugepages-<size>, or a domain-prefixed name such as nvidia.com/gpu"
        )
    if not _qualified(prefix, short):
        return (
            f"{_shown(name)} is not a valid resource name: a DNS subdomain, a slash, then "
            "at most 63 letters, digits, '-', '_' or '.' starting and ending alphanumeric"
        )
    if "kubernetes.io/" in name:  # IsNativeResource
        return None
    # IsExtendedResourceName: its quota name, requests.<name>, is a qualified name too.
    if name.startswith("requests.") or not _qualified("requests." + prefix, short):
        return f"{_shown(name)} does not follow the extended resource name standard"
    return None


def _qualified(prefix: str, short: str) -> bool:
    if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return False
    return len(short) <= 63 and bool(_NAME.match(short))


def dotted(path: FieldPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(the object)"
