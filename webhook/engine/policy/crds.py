"""The CustomResourceDefinitions of the rule kinds, derived from the rule-file schema.

One source: ``schema.DOCUMENT_KINDS`` says what a document may hold, and this module turns
each kind's ``spec`` into the structural OpenAPI v3 schema the API server wants
(``scripts/gen-crds`` writes ``deploy/base/crds/``; a test fails when they are stale).

What the API server cannot say as JSON Schema does (apiextensions-apiserver
``pkg/apiserver/schema/validation.go``, ``validateStructuralInvariants``; ``pkg/apis/
apiextensions/validation/validation.go``, which forbids ``uniqueItems: true``):

- ``additionalProperties: false`` is a structural object without
  ``x-kubernetes-preserve-unknown-fields``, so that the API server itself names a misspelt
  field, also while the webhook is down: it prunes what the schema does not declare
  (``pkg/apiserver/schema/pruning/algorithm.go``) and, for a client that asks for strict
  field validation (kubectl's default), refuses the object with ``unknown field
  "spec.validate[0].maxGPUsPerPods"``; any other client gets that line as a warning (the
  server's default, ``Warn``; ``customresource_handler.go``, ``schemaCoercingDecoder``).
  Kept instead, the unknown key would be invisible to CEL and the webhook alone could
  name it;
- "exactly one of" (``oneOf``: the checks of a ``validate`` entry, the modes of
  ``memoryLimit``) is a CEL rule (``x-kubernetes-validations``) whose
  ``messageExpression`` says what the object holds, not a ``oneOf``, whose error ("must
  validate one and only one schema") names neither the choices nor the typo. A list
  holding such a rule has ``maxItems``: the API server refuses a rule whose estimated cost,
  times the most elements it may run on, is over its budget (``StaticEstimatedCostLimit``);
- a quantity (a string or a whole number) is ``x-kubernetes-int-or-string``;
- a value that may be a boolean or a word (``autoscaling: off`` reads as false in YAML 1.1,
  as kubectl's YAML does) keeps any value and is judged by ``/validate``;
- ``uniqueItems`` on a list of words is ``x-kubernetes-list-type: set``, which the API
  server enforces the same way;
- ``apiVersion``, ``kind`` and ``metadata`` are the API server's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.policy.schema import DOCUMENT_KINDS

GROUP = "gpu-webhook.io"
VERSION = "v1alpha1"
CATEGORY = "gpu-webhook"
READY = '.status.conditions[?(@.type=="Ready")]'


@dataclass(frozen=True, slots=True)
class KindNames:
    plural: str
    short_name: str
    columns: tuple[tuple[str, str, str], ...] = ()  # (name, type, JSONPath), after READY


# Short names all begin with gpu: none of them is a kind that users already have (Karpenter's
# nodepools, Kyverno's pol, Kueue's wl), so `kubectl get` never means two things.
NAMES: dict[str, KindNames] = {
    "GPUPolicy": KindNames(
        "gpupolicies",
        "gpupol",
        (
            ("Order", "integer", ".spec.order"),
            ("Checks", "string", ".status.checks"),
            ("Namespaces", "string", ".spec.match.namespaces"),
        ),
    ),
    "GPUSettings": KindNames(
        "gpusettings",
        "gpuset",
        (
            ("Autoscaling", "string", ".spec.autoscaling"),
            ("Inventory-Failure", "string", ".spec.inventoryFailureMode"),
        ),
    ),
    "GPUNodePool": KindNames(
        "gpunodepools",
        "gpunp",
        (("Max-Nodes", "integer", ".spec.maxNodes"),),
    ),
    "WorkloadKind": KindNames(
        "workloadkinds",
        "gpuwk",
        (("Group", "string", ".spec.group"), ("Kind", "string", ".spec.kind")),
    ),
    "InstanceType": KindNames(
        "instancetypes",
        "gpuit",
        (
            ("Provider", "string", ".spec.provider"),
            ("Instance-Type", "string", ".spec.instanceType"),
            ("GPU", "string", ".spec.gpu.model"),
            ("GPUs", "integer", ".spec.gpu.count"),
        ),
    ),
}

_CONDITION: dict[str, Any] = {
    "type": "object",
    "required": ["type", "status"],
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
    },
}
STATUS: dict[str, Any] = {
    "type": "object",
    "description": "Written by gpu-webhook (one replica): is the document in force.",
    "properties": {
        "observedGeneration": {"type": "integer", "format": "int64"},
        "conditions": {
            "type": "array",
            "items": _CONDITION,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        "checks": {"type": "string", "description": "The checks a GPUPolicy runs, for kubectl."},
        "inForce": {
            "type": "object",
            "description": "While this version is not in force: the one that stays in force.",
            "properties": {
                "generation": {"type": "integer", "format": "int64"},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
}


def structural(node: dict[str, Any]) -> dict[str, Any]:
    """One node of the rule-file schema as a structural OpenAPI v3 schema."""
    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = node["description"]
    branches = node.get("anyOf")
    if branches is not None:
        if {b.get("type") for b in branches} == {"string", "integer"}:
            return {**out, "x-kubernetes-int-or-string": True}
        return {**out, "x-kubernetes-preserve-unknown-fields": True}
    enum = node.get("enum")
    if enum is not None:
        if not all(isinstance(v, str) for v in enum):
            return {**out, "x-kubernetes-preserve-unknown-fields": True}
        return {**out, "type": "string", "enum": list(enum)}
    kind = node.get("type")
    if kind == "object" or "properties" in node or "oneOf" in node:
        return {**out, **_object(node)}
    if kind == "array":
        items = structural(node["items"])
        out |= {"type": "array", "items": items}
        if node.get("uniqueItems"):
            out["x-kubernetes-list-type"] = "set"
        for key in ("minItems", "maxItems"):
            if key in node:
                out[key] = node[key]
        return out
    out["type"] = kind
    for key in ("minimum", "maximum", "minLength", "maxLength", "pattern"):
        if key in node:
            out[key] = node[key]
    return out


def _object(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    properties = dict(node.get("properties") or {})
    choices = node.get("oneOf")
    one_of: list[str] = []
    checks = False
    if choices is not None:
        checks = not all(set(c) == {"required"} for c in choices)
        # A list entry that is one of several shapes (a check of ``validate``): the union
        # of their fields, and exactly one of the names that tell the shapes apart.
        for choice in choices:
            properties |= choice.get("properties") or {}
        one_of = [c["required"][0] for c in choices]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = structural(extra)
    elif extra is not False and not checks:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if properties:
        out["properties"] = {name: structural(value) for name, value in properties.items()}
    if node.get("required"):
        out["required"] = list(node["required"])
    rules = [exactly_one(one_of, checks=checks)] if one_of else []
    rules += node.get("x-kubernetes-validations") or []
    if rules:
        out["x-kubernetes-validations"] = rules
    if "minProperties" in node:
        out["minProperties"] = node["minProperties"]
    return out


def exactly_one(names: list[str], *, checks: bool) -> dict[str, str]:
    """The CEL rule that one and only one of ``names`` is set, and a message naming what
    is, in the words ``rules lint`` uses (webhook.files.rulefiles, ``_explain``) so that the
    API server and the webhook say the same (k8s.io/apiextensions-apiserver
    ``ValidationRule``: ``rule``, ``messageExpression``). ``has()`` of a declared field
    costs a constant, so the rule's cost is the number of names (times the list's
    ``maxItems`` where the object is a list's entry)."""
    count = " + ".join(f"(has(self.{n}) ? 1 : 0)" for n in names)
    present = "[" + ", ".join(f"has(self.{n}) ? '{n}' : ''" for n in names) + "]"
    present += ".filter(n, n != '')"
    listed = ", ".join(names)
    # The API server prunes a misspelt name before CEL runs, and warns of it.
    pruned = ' (a misspelt one is dropped with an "unknown field" warning)'
    if checks:
        none = f"no check in this entry; the checks: {listed}{pruned}"
        many = " are two checks in one entry: give each its own entry"
    else:
        none = f"give one of {listed}{pruned}"
        many = f" conflict: give only one of {listed}"
    message = f"{present}.size() == 0 ? '{none}' : {present}.join(' and ') + '{many}'"
    return {"rule": f"{count} == 1", "messageExpression": message}


def _columns(names: KindNames) -> list[dict[str, Any]]:
    ready = {"name": "Ready", "type": "string", "jsonPath": f"{READY}.status"}
    own = [{"name": n, "type": t, "jsonPath": p} for n, t, p in names.columns]
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    message = {
        "name": "Message",
        "type": "string",
        "jsonPath": f"{READY}.message",
        "priority": 1,  # kubectl get -o wide
    }
    return [ready, *own, age, message]


def custom_resource_definition(kind: str) -> dict[str, Any]:
    document = DOCUMENT_KINDS[kind]
    names = NAMES[kind]
    spec = structural(document["properties"]["spec"])
    schema = {
        "type": "object",
        "description": document.get("description", ""),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": STATUS,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{names.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "gpu-webhook"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": names.plural,
                "singular": kind.lower(),
                "shortNames": [names.short_name],
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _columns(names),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def custom_resource_definitions() -> dict[str, dict[str, Any]]:
    """Each rule kind's CRD by its file name (``gpupolicies.yaml``)."""
    return {f"{NAMES[k].plural}.yaml": custom_resource_definition(k) for k in DOCUMENT_KINDS}


def resource_of(kind: str) -> str:
    """The plural the API serves a rule kind at."""
    return NAMES[kind].plural
