"""Kubernetes' own OpenAPI schemas (kubernetes-validate), for tests that prove a patched
object stays as valid as it was."""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils

K8S_VERSION = kubernetes_validate.latest_version()

# kubernetes-validate reads and parses its schema files at every ``validate`` (utils.py,
# ``validate`` calls ``schema_contents`` for the kind's file and the 1.8 MB
# ``_definitions.json``): 7 of the 8 ms a call takes, a few thousand calls in the suite.
# The files are part of the installed package and never change while it runs, and a
# schema is only read, so each is parsed once per test process.
kubernetes_validate.utils.schema_contents = functools.cache(  # type: ignore[assignment]
    kubernetes_validate.utils.schema_contents
)


def validation_error(obj: Any) -> str | None:
    """``None`` when valid; the first error otherwise. Raises for kinds without a schema."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=False)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(map(str, exc.path))}: {exc.message}"
    return None


# What strict field validation and decoding refuse: unknown fields and JSON types. Required
# fields, enums and formats are the API server's validation, which the strict decoder of
# ``webhook.engine.kube.strict`` leaves alone.
DECODING_VALIDATORS = frozenset({"additionalProperties", "type", "oneOf"})


def decoding_errors(obj: Any, version: str = K8S_VERSION) -> list[str]:
    """Every unknown field and wrong JSON type kubernetes-validate's strict schema finds in
    ``obj``, as ``path: validator``; raises for kinds without a schema."""
    import jsonschema
    import referencing

    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj["apiVersion"])
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    try:
        schema = kubernetes_validate.utils.schema_contents(
            f"{folder}/{obj['kind'].lower()}-{api_version}.json", version
        )
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=version, kind=obj["kind"], api_version=obj["apiVersion"]
        ) from None
    definitions = kubernetes_validate.utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = referencing.Resource.from_contents(definitions) @ (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    validator = jsonschema.validators.Draft202012Validator(schema, registry=registry)
    return sorted(
        f"{'.'.join(map(str, error.absolute_path))}: {error.validator}"
        for error in validator.iter_errors(obj)
        # null decodes as the zero value; a required field left null is validation's.
        if error.validator in DECODING_VALIDATORS and error.instance is not None
    )


# --- custom resources, as the API server takes them ------------------------------------------
#
# apiextensions-apiserver (kubernetes/apiextensions-apiserver): ``pkg/apiserver/
# customresource_handler.go`` (``schemaCoercingDecoder``: pruning with the unknown field
# paths, a strict decoding error of ``unknown field "<path>"`` lines), ``pkg/apiserver/
# schema/pruning/algorithm.go`` (what is pruned, the path format), ``pkg/apiserver/schema/
# cel`` (``x-kubernetes-validations``). k8s.io/apiserver ``pkg/endpoints/handlers/
# create.go``: ``fieldValidation=Strict`` (kubectl's default) fails the request at the
# decoding error, ``Warn`` (the server's default for other clients: ``rest.go``,
# ``fieldValidation``, when the request names none) returns the lines as
# warnings and goes on with the pruned object, ``Ignore`` drops them silently. Schema and
# CEL validation run on the pruned object, before any validating webhook.

FIELD_VALIDATIONS = ("Strict", "Warn", "Ignore")
_META_FIELDS = ("apiVersion", "kind", "metadata")


@dataclass(frozen=True)
class Applied:
    """What the API server answers a create: the object stored (None when refused), the
    error it refuses with, and the warnings the client prints."""

    stored: dict[str, Any] | None
    error: str | None
    warnings: tuple[str, ...]


def as_json_schema(node: Any) -> Any:
    """An openAPIV3Schema as JSON Schema, with the API server's extensions as it reads
    them: int-or-string, preserved unknown fields (anything), list-type set (unique). CEL
    rules (``x-kubernetes-validations``) are not JSON Schema: ``cel_errors`` runs them."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: as_json_schema(v) for name, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = as_json_schema(value)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [as_json_schema(v) for v in value]
        elif key == "x-kubernetes-int-or-string":
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        elif key == "x-kubernetes-list-type" and value == "set":
            out["uniqueItems"] = True
        elif not key.startswith("x-kubernetes-") and key != "format":
            out[key] = value
    return out


def pruned_fields(obj: Any, schema: dict[str, Any]) -> list[str]:
    """Prune ``obj`` in place as the API server does; the paths pruned, sorted."""
    unknown: list[str] = []
    _prune(obj, schema, "", unknown, root=True)
    return sorted(unknown)


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _prune(value: Any, schema: dict[str, Any] | None, path: str, unknown: list[str], *,
           root: bool = False) -> None:  # fmt: skip
    keep = schema is not None and schema.get("x-kubernetes-preserve-unknown-fields")
    if isinstance(value, dict):
        properties = (schema or {}).get("properties") or {}
        extra = (schema or {}).get("additionalProperties")
        for key in list(value):
            if root and key in _META_FIELDS:
                continue
            if key in properties:
                _prune(value[key], properties[key], _key(path, key), unknown)
            elif isinstance(extra, dict):
                _prune(value[key], extra, _key(path, key), unknown)
            elif not keep:
                unknown.append(_key(path, key))
                del value[key]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _prune(item, (schema or {}).get("items"), f"{path}[{index}]", unknown)


@functools.cache
def _cel_program(text: str) -> Any:
    import celpy

    from webhook.engine.resources.cel.celenvironment import FUNCTIONS

    environment = celpy.Environment()
    return environment.program(environment.compile(text), functions=dict(FUNCTIONS))


def cel_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Every ``x-kubernetes-validations`` rule that ``value`` breaks, in the API server's
    words: ``<path>: Invalid value: "object": <message>``."""
    import celpy

    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations") or ():
        this = {"self": celpy.json_to_cel(value)}
        if not bool(_cel_program(rule["rule"]).evaluate(this)):
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            if "messageExpression" in rule:
                message = str(_cel_program(rule["messageExpression"]).evaluate(this))
            where = path + rule.get("fieldPath", "")
            shown = _type_name(value)
            errors.append(f'{where}: Invalid value: "{shown}": {message}')
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            below = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if below is not None:
                errors += cel_errors(item, below, _key(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += cel_errors(item, schema["items"], f"{path}[{index}]")
    return errors


def apply_custom_resource(
    crd: dict[str, Any], obj: dict[str, Any], *, field_validation: str = "Strict"
) -> Applied:
    """A create of ``obj`` through ``crd``'s one version, as the API server answers it."""
    from jsonschema import Draft202012Validator

    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    body = copy.deepcopy(obj)
    unknown = [f'unknown field "{path}"' for path in pruned_fields(body, schema)]
    if unknown and field_validation == "Strict":
        return Applied(None, f"strict decoding error: {', '.join(unknown)}", ())
    warnings = tuple(unknown) if field_validation == "Warn" else ()
    errors = [
        f"{_path(e.absolute_path)}: {e.message}"
        for e in Draft202012Validator(as_json_schema(schema)).iter_errors(body)
    ]
    errors += cel_errors(body, schema)
    if errors:
        kind = f"{crd['spec']['names']['kind']}.{crd['spec']['group']}"
        name = (body.get("metadata") or {}).get("name", "")
        said = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        return Applied(None, f'{kind} "{name}" is invalid: {said}', warnings)
    return Applied(body, None, warnings)


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else _key(out, str(part))
    return out


def _type_name(value: Any) -> str:
    """As field.Invalid shows a CEL rule's value: its OpenAPI type."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "number"
