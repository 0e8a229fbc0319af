"""Kubernetes' own OpenAPI schemas (kubernetes-validate), for tests that prove a patched
object stays as valid as it was."""

from __future__ import annotations

import functools
import re
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
